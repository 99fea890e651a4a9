"""Refresh sagellm's image tables (src/sagellm/engines/data/*.json) from an installed SageMaker SDK.

    pip install sagemaker-core && python scripts/refresh_image_tables.py

Copies the inference tables of the frameworks sagellm's engines name from the SDK's
`sagemaker/core/image_uri_config/`, keeping only the fields sagellm.engines.images reads.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

FRAMEWORKS = ("huggingface-llm", "djl-lmi", "huggingface-llm-neuronx", "vllm", "sglang")  # engines/tgi, lmi, tgi_neuron, vllm, sglang
TABLE_KEYS = ("processors", "version_aliases", "versions")
VERSION_KEYS = ("registries", "repository", "py_versions", "container_version", "tag_prefix")
# The SDK builds these frameworks' tags with an inference tool in the processor's place: the Hugging Face
# SDK retrieves huggingface-llm-neuronx with inference_tool="neuronx" (get_huggingface_llm_image_uri), and
# image_uris._format_tag writes `<prefix>-neuronx-py310-…`; the table alone would give `…-inf2-…`.
INFERENCE_TOOLS = {"huggingface-llm-neuronx": "neuronx"}
OUT = Path(__file__).resolve().parents[1] / "src" / "sagellm" / "engines" / "data"


def sdk_tables() -> Path:
    """The SDK's image_uri_config folder, found without importing the SDK."""
    spec = find_spec("sagemaker")
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (folder := Path(root) / "core" / "image_uri_config").is_dir():
            return folder
    sys.exit("no SageMaker SDK installed: pip install sagemaker-core")


def slim(framework: str, folder: Path) -> dict:
    """The inference table of one framework, with only what sagellm reads."""
    data = json.loads((folder / f"{framework}.json").read_text())
    table = data.get("inference", data)
    out = {k: table[k] for k in TABLE_KEYS if k in table}
    out["versions"] = {v: {k: e[k] for k in VERSION_KEYS if k in e} for v, e in table["versions"].items()}
    if framework in INFERENCE_TOOLS:
        out["inference_tool"] = INFERENCE_TOOLS[framework]
    return out


def main() -> None:
    folder = sdk_tables()
    source = f"sagemaker-core {version('sagemaker-core')}, sagemaker/core/image_uri_config"
    for framework in FRAMEWORKS:
        table = {"source": source, **slim(framework, folder)}
        (OUT / f"{framework}.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"{framework}: {len(table['versions'])} versions from {source}")


if __name__ == "__main__":
    main()

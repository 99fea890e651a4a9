"""Build a tiny random-weight Llama that vLLM can serve, deterministically, with no hub download.

Run with vLLM's interpreter (it has numpy, safetensors and tokenizers): `python tiny_llama.py OUT_DIR`.
Writes config.json, model.safetensors, tokenizer.json, tokenizer_config.json and generation_config.json.
The same seed gives the same bytes, so a failure seen once can be seen again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 1234
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 256, 4, 4, 2, 512
VOCAB = 4096
MAX_POSITIONS = 2048
SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2: unknown, begin and end of sequence
# The words the bench's prompts are made of (sagellm.emulator.frontend.formats), so each is one token.
PROMPT_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "again")
# A minimal chat template (ChatML), so the chat API can be served too.
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def corpus(rng: np.random.Generator) -> list[str]:
    """ASCII-only training text: the prompt words, then random lowercase words for the rest of the vocab.

    Only characters seen here enter the byte-level alphabet, so every token decodes to whole ASCII
    characters: a random model's output then streams as text, never as held-back partial UTF-8.
    """
    lines = [" ".join(PROMPT_WORDS)] * 200
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    punctuation = np.array(list(".,;:!?'-()0123456789"))
    for _ in range(4000):
        words = ["".join(rng.choice(letters, size=rng.integers(1, 9))) for _ in range(12)]
        words.append("".join(rng.choice(punctuation, size=2)))
        lines.append(" ".join(words))
    return lines


def build_tokenizer(rng: np.random.Generator) -> Tokenizer:
    """A byte-level BPE with VOCAB entries, trained on `corpus()`."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=list(SPECIAL), show_progress=False)
    tokenizer.train_from_iterator(corpus(rng), trainer=trainer)
    return tokenizer


def weights(rng: np.random.Generator, vocab: int) -> dict[str, np.ndarray]:
    """Llama weights with Hugging Face names, normal(0, 0.02) like a fresh model, float32."""
    head_dim = HIDDEN // HEADS
    kv = KV_HEADS * head_dim

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    out = {"model.embed_tokens.weight": normal(vocab, HIDDEN), "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out |= {
            p + "self_attn.q_proj.weight": normal(HIDDEN, HIDDEN), p + "self_attn.k_proj.weight": normal(kv, HIDDEN),
            p + "self_attn.v_proj.weight": normal(kv, HIDDEN), p + "self_attn.o_proj.weight": normal(HIDDEN, HIDDEN),
            p + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": np.ones(HIDDEN, np.float32),
            p + "post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
        }
    head = normal(vocab, HIDDEN)
    # The end-of-sequence logit is then exactly 0 while the largest of ~4000 random ones is positive:
    # greedy decoding never stops early, so every request yields exactly the tokens it asked for.
    head[SPECIAL.index("</s>")] = 0.0
    out["lm_head.weight"] = head
    return out


def build(out: Path) -> None:
    """Write the model folder."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tokenizer = build_tokenizer(rng)
    vocab = tokenizer.get_vocab_size()
    tokenizer.save(str(out / "tokenizer.json"))
    bos, eos = SPECIAL.index("<s>"), SPECIAL.index("</s>")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HIDDEN // HEADS, "vocab_size": vocab,
        "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
        "bos_token_id": bos, "eos_token_id": eos,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": MAX_POSITIONS, "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2))
    save_file(weights(rng, vocab), str(out / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    build(Path(sys.argv[1]))

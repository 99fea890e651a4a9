"""A model outside the catalog, read from its Hugging Face `config.json` (huggingface_hub, imported lazily).

The Hub's own cache holds what was read (HF_HUB_CACHE / HF_HOME); HF_TOKEN opens gated repositories;
HF_HUB_OFFLINE=1 (or `--offline`) reads the cache only. The parameter count is estimated from the config
(embeddings, attention, MLP or experts per layer, the LM head), so a plan is the same online and offline.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sagellm.catalog.model import Model
from sagellm.errors import InputError

# Families whose config leaves tie_word_embeddings out because their class defaults it to true
# (transformers' Gemma/Gemma2/Gemma3 configs); every other family here defaults to untied.
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text")
# Families with attention and MLP side by side, read from the same input (one all-reduce per layer).
PARALLEL_ATTENTION_KEYS = ("parallel_attn",)


def offline() -> bool:
    """Whether the Hub may not be contacted (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_resolves() -> bool:
    """Whether the Hub's host name resolves; False when it does not (no network, no DNS), so that sagellm reads
    the cache at once instead of sitting through huggingface_hub's five retries (24 s) of a lookup that cannot
    succeed. Behind a proxy the proxy resolves names, so that is left to huggingface_hub."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    from huggingface_hub import constants

    host = urlsplit(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def _gated_records() -> Path:
    """Where sagellm remembers which Hub models are gated (`$XDG_CACHE_HOME/sagellm/hub-gated.json`), so that an
    offline plan still knows that its deployment needs HF_TOKEN."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(root) if os.path.isabs(root) else Path.home() / ".cache"  # the XDG spec ignores a relative one
    return base / "sagellm" / "hub-gated.json"


def _read_gated() -> dict[str, bool]:
    try:
        records = json.loads(_gated_records().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in records.items() if isinstance(v, bool)} if isinstance(records, dict) else {}


def is_gated(hf_id: str, *, online: bool) -> bool:
    """Whether the model's repository is gated (its weights need HF_TOKEN in the container too): asked of the
    Hub when online and remembered, else what was remembered (not gated when never asked)."""
    records = _read_gated()
    if online:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        try:
            gated = bool(HfApi().model_info(hf_id).gated)  # False, or "auto"/"manual" approval
        except (HfHubHTTPError, OSError):
            return records.get(hf_id, False)
        if records.get(hf_id) is not gated:
            records[hf_id] = gated
            path = _gated_records()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(records, indent=1, sort_keys=True), encoding="utf-8")
                tmp.replace(path)  # atomic: a concurrent run reads the old map or the new one
            except OSError:
                pass  # remembering is a convenience; the answer stands for this run
        return gated
    return records.get(hf_id, False)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (multimodal configs nest it under `text_config`)."""
    nested = config.get("text_config")
    return {**config, **nested} if isinstance(nested, dict) else config


def _first(config: dict[str, Any], *keys: str) -> Any:
    """The first of several names a family gives the same fact (Llama's vs Falcon's vs GPT's)."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def estimate_params(config: dict[str, Any]) -> tuple[float, float]:
    """(total, active) parameters in billions from a config: embeddings, attention, MLP or experts, LM head.

    Norms and biases are left out (under 0.1 % of a 1B+ model); a vision tower of a multimodal model is not
    counted (sagellm serves the text model), nor DeepSeek's multi-token-prediction layer (not loaded to serve)."""
    c = _text_config(config)
    hidden, layers = c["hidden_size"], c["num_hidden_layers"]
    vocab = c["vocab_size"]
    attention = _attention_params(c)
    experts = _experts(c)
    per_token = _first(c, "num_experts_per_tok", "num_experts_per_token") or 1
    expert_inter = _first(c, "moe_intermediate_size", "intermediate_size") or 4 * hidden
    # SwiGLU/GeGLU MLPs have three matrices (gate, up, down); GPT-style ones two.
    matrices = 2 if c.get("model_type") in ("falcon", "gpt2", "gpt_neox", "gpt_bigcode") else 3
    expert = matrices * hidden * expert_inter
    # Shared experts: Qwen2-MoE gives their width, DeepSeek their count (each as wide as a routed one).
    shared = matrices * hidden * ((c.get("shared_expert_intermediate_size") or 0)
                                  + (c.get("n_shared_experts") or 0) * expert_inter)
    router = hidden * experts if experts > 1 else 0
    # DeepSeek's first layers keep a dense MLP of intermediate_size (first_k_dense_replace).
    dense_layers = min(layers, c.get("first_k_dense_replace") or 0) if experts > 1 else 0
    dense = dense_layers * matrices * hidden * (c.get("intermediate_size") or 4 * hidden)
    moe_layers = layers - dense_layers
    tied = c.get("tie_word_embeddings", c.get("model_type") in TIED_BY_DEFAULT)
    embeddings = vocab * hidden * (1 if tied else 2)
    total = embeddings + layers * attention + dense + moe_layers * (experts * expert + shared + router)
    active = embeddings + layers * attention + dense + moe_layers * (per_token * expert + shared + router)
    return round(total / 1e9, 2), round(active / 1e9, 2)


def _experts(c: dict[str, Any]) -> int:
    """Routed experts per MoE layer (1: a dense model); DeepSeek names them n_routed_experts."""
    return int(_first(c, "num_local_experts", "num_experts", "n_routed_experts") or 1)


def _head_dim(c: dict[str, Any]) -> int:
    """Dimension of a query/key head: MLA's is its no-rope plus rope parts (DeepSeek gives no head_dim)."""
    if c.get("kv_lora_rank") is not None:
        return int((c.get("qk_nope_head_dim") or 0) + (c.get("qk_rope_head_dim") or 0))
    return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


def _attention_params(c: dict[str, Any]) -> int:
    """One layer's attention weights: q, k, v and o; with MLA, the low-rank query and the compressed KV
    projections (vllm deepseek_v2.py@v0.32.0: q_a/q_b or q, kv_a_proj_with_mqa, kv_b_proj, o_proj)."""
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    rank = c.get("kv_lora_rank")
    if rank is None:
        return int(hidden * _head_dim(c) * (2 * heads + 2 * kv_heads))  # q and o, k and v
    rope, nope = c.get("qk_rope_head_dim") or 0, c.get("qk_nope_head_dim") or 0
    v_dim, q_rank = c.get("v_head_dim") or nope, c.get("q_lora_rank")
    q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
    kv = hidden * (rank + rope) + rank * heads * (nope + v_dim)
    return int(q + kv + heads * v_dim * hidden)


# What a decoder LLM's config.json can hold: the largest published models stay well inside these (e.g. 126
# layers, 128 heads, 16,384 hidden, 262,144 vocabulary, 10M context); a value outside is a broken file.
_BOUNDS = {"num_hidden_layers": 1024, "num_attention_heads": 1024, "num_key_value_heads": 1024,
           "hidden_size": 262_144, "head_dim": 4096, "vocab_size": 10_000_000, "intermediate_size": 10_000_000,
           "moe_intermediate_size": 10_000_000, "max_position_embeddings": 2**27, "max_sequence_length": 2**27,
           "seq_length": 2**27, "n_positions": 2**27, "num_local_experts": 4096, "num_experts": 4096,
           "num_experts_per_tok": 4096, "num_experts_per_token": 4096, "sliding_window": 2**27,
           "n_routed_experts": 4096, "n_shared_experts": 4096, "first_k_dense_replace": 1024,
           "kv_lora_rank": 65_536, "q_lora_rank": 65_536, "qk_rope_head_dim": 4096, "qk_nope_head_dim": 4096,
           "v_head_dim": 4096}


def config_errors(config: dict[str, Any], where: str) -> list[str]:
    """One line per value of a config.json that no model can have (negative, zero, a fraction, absurdly large,
    more KV heads than heads), each naming `where` (the file)."""
    c = _text_config(config)
    errors = [f"{where}: {key}: {c[key]!r} is not possible; a whole number from 1 to {top:,} is"
              for key, top in _BOUNDS.items()
              if c.get(key) is not None and (isinstance(c[key], bool) or not isinstance(c[key], int)
                                              or not 1 <= c[key] <= top)]
    heads, kv_heads = c.get("num_attention_heads"), c.get("num_key_value_heads")
    if not errors and isinstance(heads, int) and isinstance(kv_heads, int) and heads % kv_heads:
        errors.append(f"{where}: num_key_value_heads: {kv_heads} must divide num_attention_heads ({heads})")
    return errors


def _quant_method(config: dict[str, Any]) -> str | None:
    """The method a pre-quantized checkpoint's weights are stored in (transformers writes quantization_config with
    its quant_method: gptq, awq, fp8, bitsandbytes, eetq, compressed-tensors, …); None: not quantized."""
    quant = _text_config(config).get("quantization_config")
    if not isinstance(quant, dict) or not isinstance(method := quant.get("quant_method"), str):
        return None
    if method == "bitsandbytes" and quant.get("load_in_4bit"):  # 4-bit: TGI's bitsandbytes-nf4 / -fp4
        return f"bitsandbytes-{quant.get('bnb_4bit_quant_type', 'fp4')}"
    return method.lower()


def model_from_config(hf_id: str, config: dict[str, Any], *, gated: bool = False,
                      where: str | None = None) -> Model:
    """A catalog Model from a Hugging Face config.json (fields named as transformers names them); `where` names
    the file in errors (default: the model's config.json)."""
    c = _text_config(config)
    if errors := config_errors(config, where or f"{hf_id}: its config.json"):
        raise InputError(errors)
    try:
        hidden, heads = c["hidden_size"], c["num_attention_heads"]
        total, active = estimate_params(config)
        n_layers = c["num_hidden_layers"]
        max_context = _first(c, "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise InputError(f"{hf_id}: its config.json has no {exc} (a decoder LLM config names hidden_size, "
                         "num_hidden_layers, num_attention_heads, vocab_size); give its architecture under "
                         "'architecture:' in the profile") from None
    experts = _experts(c)
    window = c.get("sliding_window") if c.get("use_sliding_window", True) else None
    return Model(
        hf_id=hf_id,
        params_b=total,
        active_params_b=active if experts > 1 else None,
        n_layers=n_layers,
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=c.get("num_key_value_heads") or heads,
        head_dim=_head_dim(c),
        max_context=int(max_context or 0),
        n_experts=experts,
        experts_per_token=_first(c, "num_experts_per_tok", "num_experts_per_token") or 1,
        parallel_attention=any(c.get(k) for k in PARALLEL_ATTENTION_KEYS),
        gated=gated,
        architecture=(config.get("architectures") or [c.get("model_type")])[0],
        dtype=_first(config, "torch_dtype", "dtype") or _first(c, "torch_dtype", "dtype"),
        sliding_window=window if isinstance(window, int) else None,
        quantization=_quant_method(config),
        kv_lora_rank=c.get("kv_lora_rank"),
        qk_rope_head_dim=c.get("qk_rope_head_dim") or 0,
        source="config.json from the Hugging Face Hub (parameters estimated from it)",
    )


def _download_config(hf_id: str, local_only: bool) -> str:
    """The path of the model's config.json in the Hub cache, fetched unless `local_only`; one line per failure."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    where = hf_id
    # huggingface_hub logs each retry of an unreachable Hub as a warning; the failure is sagellm's one line.
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    # Most specific first: a gated repository is a RepositoryNotFoundError, a cache miss an EntryNotFoundError.
    try:
        path: str = hf_hub_download(hf_id, "config.json", local_files_only=local_only,
                                    cache_dir=os.environ.get("HF_HUB_CACHE") or None)
        return path
    except GatedRepoError:
        raise InputError(f"{where} is gated on the Hugging Face Hub: accept its licence on huggingface.co/{hf_id} "
                         "and set HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise InputError(f"{where} is neither in the catalog (`sagellm models`) nor on the Hugging Face Hub "
                         "(check the id; a private repository needs HF_TOKEN)") from None
    except LocalEntryNotFoundError:
        how = ("offline (HF_HUB_OFFLINE or --offline) and its config.json is not in the Hugging Face cache"
               if offline() else "the Hugging Face Hub is unreachable and its config.json is not cached")
        raise InputError(f"{where}: not in the catalog; {how}: run once online, or give its architecture under "
                         "'architecture:' in the profile") from None
    except EntryNotFoundError:
        raise InputError(f"{where}: the repository has no config.json (not a transformers model); give its "
                         "architecture under 'architecture:' in the profile") from None
    except HfHubHTTPError as exc:
        raise InputError(f"{where}: the Hugging Face Hub answered {' '.join(str(exc).split())[:200]}") from None
    finally:
        hub_logger.setLevel(level)


def local_model(folder: Path) -> Model:
    """A model from the config.json in a local folder (a downloaded or fine-tuned model); one line per problem."""
    if not folder.exists():
        looked = "" if folder.is_absolute() else f" (looked for {folder.absolute()})"
        raise InputError(f"{folder}: no such folder{looked}; give the folder holding the model's config.json, or a "
                         "Hugging Face id")
    if not folder.is_dir():
        raise InputError(f"{folder}: a file, not a folder; give the folder holding the model's config.json, or a "
                         "Hugging Face id")
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{folder}: a local folder without a config.json; give a folder holding the model's "
                         "config.json, or a Hugging Face id") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it ({exc}); check its permissions") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc}); give the model's config.json") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: not a config (a JSON object of the model's settings)")
    model = model_from_config(str(folder), config, where=str(path))
    return dataclasses.replace(model, source=f"config.json in {folder} (parameters estimated from it)",
                               folder=str(folder))


@cache
def hub_model(hf_id: str) -> Model:
    """A model outside the catalog from its config.json on the Hugging Face Hub (or in its cache); errors are
    one line each, without the `where:` prefix the caller adds."""
    online = not offline() and _hub_resolves()
    with open(_download_config(hf_id, local_only=not online), encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as exc:
            raise InputError(f"{hf_id}: its cached config.json is not JSON ({exc})") from None
    return model_from_config(hf_id, config, gated=is_gated(hf_id, online=online))

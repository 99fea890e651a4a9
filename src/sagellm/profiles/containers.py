"""Pinned serving containers: the image of exactly one version, and what that server generation reads.

Facts and their sources are written down in docs/containers.md. In short:
- TGI ≥ 1.4 ignores MAX_BATCH_TOTAL_TOKENS for flash-attention models (every catalog model): the KV
  budget is what is free after the warm-up prefill (`backends/v3/src/lib.rs`). sagellm never writes it.
- TGI 3 chunks prefills by default (PREFILL_CHUNKING=1) and then ignores MAX_BATCH_SIZE
  (`backends/v3/src/backend.rs`): a batch-size limit needs PREFILL_CHUNKING=0 beside it.
- LMI ≥ 0.33 runs vLLM through its async OpenAI service when told so; sagellm names that engine
  explicitly instead of relying on LMI's auto-detection (which would also cap the batch at 32 sequences).

Image URIs come from the SageMaker Python SDK's JSON tables (`sagemaker/core/image_uri_config/*.json`),
read as data: importing the SDK costs seconds on `cdk synth`'s path.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from sagellm.errors import InputError

# The versions sagellm pins (a redeploy never changes the server underneath an endpoint).
PINNED = {"tgi": "3.3.6", "lmi": "0.35.0"}
# The Neuron (Inferentia2) TGI image: optimum-neuron built on TGI 3.3.6 (tag 2.7.0-optimum3.3.6).
PINNED_NEURON = "0.3.0"
FRAMEWORKS = {"tgi": "huggingface-llm", "tgi-neuron": "huggingface-llm-neuronx", "lmi": "djl-lmi"}
# The oldest versions whose behaviour docs/containers.md describes.
OLDEST = {"tgi": (2, 0, 0), "lmi": (0, 33, 0)}

# LMI: the vLLM engine through the async OpenAI service (LMI's own choice for vLLM-capable models).
LMI_ENGINE = {
    "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
    "OPTION_ASYNC_MODE": "true",
    "OPTION_ROLLING_BATCH": "disable",
}

# Variables each server reads (docs/containers.md, with the source line of each).
_TGI_READS = frozenset({
    # sagemaker-entrypoint.sh maps these to the launcher's names
    "HF_MODEL_ID", "HF_MODEL_REVISION", "SM_NUM_GPUS", "HF_MODEL_QUANTIZE", "HF_MODEL_TRUST_REMOTE_CODE",
    # text-generation-launcher arguments (clap `env`), the entrypoint's targets included
    "MODEL_ID", "REVISION", "NUM_SHARD", "QUANTIZE", "TRUST_REMOTE_CODE", "MAX_CONCURRENT_REQUESTS", "MAX_BEST_OF", "MAX_STOP_SEQUENCES", "MAX_TOP_N_TOKENS", "MAX_INPUT_TOKENS",
    "MAX_INPUT_LENGTH", "MAX_TOTAL_TOKENS", "WAITING_SERVED_RATIO", "MAX_BATCH_PREFILL_TOKENS",
    "MAX_WAITING_TOKENS", "MAX_BATCH_SIZE", "CUDA_GRAPHS", "CUDA_MEMORY_FRACTION", "ROPE_SCALING", "ROPE_FACTOR",
    "DTYPE", "KV_CACHE_DTYPE", "SPECULATE", "MAX_CLIENT_BATCH_SIZE", "PAYLOAD_LIMIT", "LORA_ADAPTERS",
    "VALIDATION_WORKERS", "DISABLE_GRAMMAR_SUPPORT", "ENABLE_PREFILL_LOGPROBS", "JSON_OUTPUT", "USAGE_STATS",
    "DISABLE_CUSTOM_KERNELS", "TOKENIZER_CONFIG_PATH", "OTLP_ENDPOINT", "OTLP_SERVICE_NAME",
    # read by the model shards
    "PREFILL_CHUNKING", "PREFIX_CACHING", "ATTENTION", "TGI_WIGGLE_ROOM", "HF_HUB_ENABLE_HF_TRANSFER",
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
})
# Read, but without effect on the models sagellm serves: refused with the reason.
_TGI_IGNORED = {
    "MAX_BATCH_TOTAL_TOKENS": "TGI ≥ 1.4 ignores it for flash-attention models: the KV budget is what is free "
                              "after warm-up",
}
_LMI_READS = frozenset({"HF_MODEL_ID", "HF_MODEL_REVISION", "HF_TOKEN", "TENSOR_PARALLEL_DEGREE",
                        "PIPELINE_PARALLEL_DEGREE"})
_LMI_PREFIXES = ("OPTION_", "SERVING_")  # option.* (vLLM engine arguments pass through) and server settings


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.-]", version))


def generation(kind: str, version: str | None) -> str:
    """The server generation whose behaviour sagellm models: `tgi3`, `tgi2` or `lmi`."""
    if kind == "lmi":
        return "lmi"
    return "tgi3" if _version_key(version or PINNED["tgi"]) >= (3,) else "tgi2"


def chunks_prefill(server: str, max_batch_size: int | None) -> bool:
    """Whether the server splits long prompts over several prefill passes: vLLM (LMI), and TGI 3 unless a
    batch-size limit turns chunking off (PREFILL_CHUNKING=0 beside MAX_BATCH_SIZE)."""
    return server == "lmi" or (server == "tgi3" and max_batch_size is None)


def _tables_dir() -> Path:
    """Where the SageMaker SDK keeps its image URI tables (found without importing the SDK)."""
    spec = find_spec("sagemaker")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(root) / "core" / "image_uri_config"
        if folder.is_dir():
            return folder
    raise InputError("container: the SageMaker SDK's image tables are missing (pip install sagemaker-core)")


@cache
def _table(framework: str) -> dict[str, Any]:
    data = json.loads((_tables_dir() / f"{framework}.json").read_text())
    return data.get("inference", data)


def _framework(kind: str, neuron: bool) -> str:
    return FRAMEWORKS["tgi-neuron" if neuron and kind == "tgi" else kind]


def version_errors(kind: str, version: str, where: str) -> list[str]:
    """A pinned version the SDK tables do not know exactly, or older than sagellm models."""
    framework = FRAMEWORKS[kind]
    versions = sorted(_table(framework)["versions"], key=_version_key)
    if version not in versions:
        alias = _table(framework).get("version_aliases", {}).get(version)
        hint = f"use the exact version {alias}" if alias else f"known: {', '.join(versions[-5:])}"
        return [f"{where}: {version!r} is not an exact {framework} image version ({hint})"]
    if _version_key(version) < OLDEST[kind]:
        oldest = ".".join(map(str, OLDEST[kind]))
        message = f"sagellm models {kind} {oldest} and newer (pinned default: {PINNED[kind]}); see docs/containers.md"
        return [f"{where}: {version!r}: {message}"]
    return []


def image_uri(kind: str, version: str, region: str, neuron: bool = False) -> str:
    """The ECR image URI of exactly `version` in `region`, built from the SDK's tables as the SDK does."""
    framework = _framework(kind, neuron)
    if neuron and kind == "tgi":
        version = PINNED_NEURON
    config = _table(framework)
    entry = config["versions"][version]
    registry = entry["registries"].get(region)
    if registry is None:
        raise InputError(f"region: {region!r}: no {framework} {version} image there (use a SageMaker region "
                         "such as us-east-1)")
    processor = (config.get("processors") or [None])[0]
    py = (entry.get("py_versions") or [None])[0]
    suffix = (entry.get("container_version") or {}).get(processor)
    tag = "-".join(p for p in (entry.get("tag_prefix", version), processor, py, suffix) if p)
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{registry}.dkr.ecr.{region}.{domain}/{entry['repository']}:{tag}"


def environment_errors(kind: str, version: str, env: dict[str, str], where: Callable[[str], str]) -> list[str]:
    """`serving.environment` variables the pinned server does not read, or reads without effect.

    `where(name)` names the variable's place (file:line: serving.environment.NAME).
    """
    errors = []
    for name in env:
        if kind == "lmi":
            if name not in _LMI_READS and not name.startswith(_LMI_PREFIXES):
                errors.append(f"{where(name)}: LMI {version} does not read it (it reads HF_MODEL_ID, "
                              "TENSOR_PARALLEL_DEGREE, OPTION_* and SERVING_*); see docs/containers.md")
        elif name in _TGI_IGNORED:
            errors.append(f"{where(name)}: {_TGI_IGNORED[name]} (TGI {version}); remove it")
        elif name not in _TGI_READS:
            close = difflib.get_close_matches(name, sorted(_TGI_READS), n=3, cutoff=0.85)
            hint = f"did you mean {', '.join(close)}?" if close else "see docs/containers.md for what it reads"
            errors.append(f"{where(name)}: TGI {version} does not read it; {hint}")
    return errors

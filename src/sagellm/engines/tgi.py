"""Hugging Face TGI on GPUs (the SageMaker Hugging Face LLM DLC): what each version reads and how it batches.

Facts and their sources are written down in docs/containers.md. In short:
- TGI ≥ 1.4 ignores MAX_BATCH_TOTAL_TOKENS for flash-attention models (every catalog model): the KV
  budget is what is free after the warm-up prefill (`backends/v3/src/lib.rs`). sagellm never writes it.
- TGI 3 chunks prefills by default (PREFILL_CHUNKING=1) and then ignores MAX_BATCH_SIZE
  (`backends/v3/src/backend.rs`): a batch-size limit needs PREFILL_CHUNKING=0 beside it.
- The router answers 429 above MAX_CONCURRENT_REQUESTS; a refused stream is HTTP 200 with one error event.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from sagellm.engines.engine import (
    DEFAULT_PREFILL_TOKENS,
    Engine,
    ErrorReply,
    Generation,
    Limits,
    Settings,
    Token,
    Variable,
    read_int,
    version_key,
)

PINNED = "3.3.6"  # a redeploy never changes the server underneath an endpoint
FRAMEWORK = "huggingface-llm"
OLDEST = (2, 0, 0)  # the oldest version whose behaviour docs/containers.md describes

# TGI parses MAX_BATCH_PREFILL/TOTAL_TOKENS as u32 and compares the token caps with them as u32.
MAX_TOKENS = 2**32 - 1
# The router's tokio Semaphore::new(MAX_CONCURRENT_REQUESTS) panics above usize::MAX >> 3.
MAX_CONCURRENT_REQUESTS = 2**61 - 1
DEFAULT_MAX_CONCURRENT_REQUESTS = 128  # the launcher's default
# text-generation-launcher --payload-limit (PAYLOAD_LIMIT) default; axum answers 413 with this text.
PAYLOAD_LIMIT = 2_000_000
PAYLOAD_TOO_LARGE = "Failed to buffer the request body: length limit exceeded"

# TGI 1.x: the generation the planner's step-time constants were measured on (sagellm deploys 2.0 and newer).
TGI_1 = Generation("tgi-1", "TGI 1.x", "tgi-1", moe_dense_max_tokens=256, waiting_served_ratio=1.2)
TGI_3 = Generation("tgi-3", "TGI 2.x–3.x", "tgi-1", waiting_served_ratio=0.0)  # prefill chunking

# What QUANTIZE (HF_MODEL_QUANTIZE) takes: the launcher's `Quantization` enum as clap names its values
# (huggingface/text-generation-inference v3.3.6, efb94e0d, launcher/src/main.rs; kebab-case).
QUANTIZATIONS = frozenset({"awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin", "bitsandbytes",
                           "bitsandbytes-nf4", "bitsandbytes-fp4", "fp8"})

# Variables the server reads (docs/containers.md, with the source line of each).
READS = frozenset({
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
IGNORED = {
    "MAX_BATCH_TOTAL_TOKENS": "TGI ≥ 1.4 ignores it for flash-attention models: the KV budget is what is free "
                              "after warm-up",
}
# launcher/src/main.rs (MAX_INPUT_LENGTH is the legacy name of MAX_INPUT_TOKENS and the launcher refuses both
# at once) and sagemaker-entrypoint.sh (it copies HF_MODEL_ID, SM_NUM_GPUS, HF_MODEL_QUANTIZE,
# HF_MODEL_REVISION, HF_MODEL_TRUST_REMOTE_CODE over MODEL_ID, NUM_SHARD, QUANTIZE, REVISION, TRUST_REMOTE_CODE).
VARIABLES = (
    Variable("model id", ("HF_MODEL_ID", "MODEL_ID"), "model_id"),
    Variable("shard count", ("SM_NUM_GPUS", "NUM_SHARD"), "tensor_parallel"),
    Variable("quantization", ("HF_MODEL_QUANTIZE", "QUANTIZE"), "quantization"),
    Variable("max input tokens", ("MAX_INPUT_TOKENS", "MAX_INPUT_LENGTH"), "max_input_tokens"),
    Variable("max total tokens", ("MAX_TOTAL_TOKENS",), "max_total_tokens"),
    Variable("prefill budget", ("MAX_BATCH_PREFILL_TOKENS",), "max_batch_prefill_tokens"),
    Variable("batch size", ("MAX_BATCH_SIZE",), "max_batch_size"),
    Variable("admission limit", ("MAX_CONCURRENT_REQUESTS",), "max_concurrent_requests"),
    Variable("model revision", ("HF_MODEL_REVISION", "REVISION"), None),
    Variable("remote code", ("HF_MODEL_TRUST_REMOTE_CODE", "TRUST_REMOTE_CODE"), None),
)


def _version_3(version: str | None) -> bool:
    """TGI 3 and newer (None: the pinned version)."""
    return version_key(version or PINNED) >= (3,)


class Tgi(Engine):
    """Hugging Face TGI on NVIDIA GPUs."""

    kind = "tgi"
    label = "TGI"
    # huggingface/text-generation-inference README, 2025-12-11: "in maintenance mode" (docs/containers.md).
    unmaintained = "upstream TGI has been in maintenance mode since 2025-12-11"
    framework = FRAMEWORK
    pinned = PINNED
    oldest = OLDEST
    variables = VARIABLES
    quantizations = QUANTIZATIONS
    model_id_variables: tuple[str, ...] = ("HF_MODEL_ID",)
    queues = False
    payload_too_large = PAYLOAD_TOO_LARGE
    stream_content_type = "text/event-stream"  # server-sent events, `data:{...}` without a space
    # TGI 3.x's names. It has no TTFT histogram; tgi_request_mean_time_per_token_duration is inference time ÷
    # generated tokens, prefill included, so it is reported as time_per_token_ms, not as ITL.
    histograms: ClassVar[dict[str, tuple[str, ...]]] = {
        "e2e_latency_ms": ("tgi_request_duration",),
        "time_per_token_ms": ("tgi_request_mean_time_per_token_duration",),
        "queue_time_ms": ("tgi_request_queue_duration",),
    }
    counters: ClassVar[dict[str, tuple[str, ...]]] = {
        "requests": ("tgi_request_count",),
        "prompt_tokens": ("tgi_request_input_length_sum",),
        "generation_tokens": ("tgi_request_generated_tokens_sum",),
    }

    def generation(self, version: str | None) -> Generation:
        """TGI 1.x for 0.x and 1.x; TGI 3 otherwise (an unpinned TGI is the newest: TGI 3)."""
        return TGI_1 if (version or "3").split(".")[0] in ("0", "1") else TGI_3

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """TGI 3 chunks unless a batch-size limit turns chunking off (PREFILL_CHUNKING=0 beside MAX_BATCH_SIZE)."""
        return _version_3(version) and max_batch_size is None

    def environment(self, s: Settings) -> dict[str, str]:
        """The launcher's variables, through the SageMaker entrypoint's names where it has them."""
        env = {
            "HF_MODEL_ID": s.model_id,
            "SM_NUM_GPUS": str(s.tensor_parallel),
            "MAX_INPUT_TOKENS": str(s.max_input_tokens),
            "MAX_TOTAL_TOKENS": str(s.max_total_tokens),
            "MAX_BATCH_PREFILL_TOKENS": str(s.max_batch_prefill_tokens),
            "MAX_CONCURRENT_REQUESTS": str(s.max_concurrent_requests),
        }
        if s.quantization != "none":
            env["HF_MODEL_QUANTIZE"] = s.quantization
        if s.max_batch_size is not None:
            env["MAX_BATCH_SIZE"] = str(s.max_batch_size)
            if _version_3(s.version):
                env["PREFILL_CHUNKING"] = "0"  # TGI 3 ignores MAX_BATCH_SIZE while it chunks prefills
        return env

    def environment_errors(self, version: str, env: dict[str, str], where: Callable[[str], str]) -> list[str]:
        """Names TGI does not read (with near names), or reads without effect."""
        errors = []
        for name in env:
            if name in IGNORED:
                errors.append(f"{where(name)}: {IGNORED[name]} (TGI {version}); remove it")
            elif name not in READS:
                close = difflib.get_close_matches(name, sorted(READS), n=3, cutoff=0.85)
                hint = f"did you mean {', '.join(close)}?" if close else "see docs/containers.md for what it reads"
                errors.append(f"{where(name)}: TGI {version} does not read it; {hint}")
        return errors

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """TGI's limits, with that version's launcher defaults where a variable is unset."""
        return self._limits(env, kv_tokens, context, launcher_3=_version_3(version))

    def _limits(self, env: dict[str, str], kv: int, context: int, *, launcher_3: bool) -> Limits:
        # TGI 3 warm-up: max_total_tokens = min(KV cache, context); input = total - 1.
        total = read_int(env, "MAX_TOTAL_TOKENS", min(kv, context) if launcher_3 else context)
        max_input = read_int(env, "MAX_INPUT_TOKENS", read_int(env, "MAX_INPUT_LENGTH", total - 1))
        chunking = launcher_3 and env.get("PREFILL_CHUNKING", "1").lower() in ("1", "true")
        batch_size = read_int(env, "MAX_BATCH_SIZE", 0) or None
        # Launcher defaults: TGI 3 4096 within the context; TGI 2 max_input_tokens + 50 (× batch size if set).
        if launcher_3:
            prefill = min(DEFAULT_PREFILL_TOKENS, context)
        else:
            prefill = max_input * batch_size if batch_size else max_input + 50
        return Limits(
            max_input_tokens=max_input,
            max_total_tokens=total,
            max_batch_prefill_tokens=read_int(env, "MAX_BATCH_PREFILL_TOKENS", prefill),
            max_batch_total_tokens=kv,
            max_concurrent_requests=read_int(env, "MAX_CONCURRENT_REQUESTS", DEFAULT_MAX_CONCURRENT_REQUESTS),
            # The router ignores MAX_BATCH_SIZE while it chunks prefills (backends/v3/src/backend.rs).
            max_batch_size=None if chunking else batch_size,
        )

    def generate_body(self, text: str, details: dict[str, Any] | None, tokens: Sequence[Token], *,
                      invocations: bool) -> Any:
        """`{"generated_text", "details"}`; `/invocations` wraps it in a list, `/generate` does not."""
        out: dict[str, Any] = {"generated_text": text}
        if details is not None:
            out["details"] = {**details, "prefill": [], "tokens": [_token(t) for t in tokens]}
        return [out] if invocations else out

    def stream_token(self, index: int, token: Token) -> bytes:
        """One `/generate_stream` event for a token that is not the last."""
        # Rendered by hand: this runs once per token per stream, the emulator's hottest path.
        return (f'data:{{"index":{index + 1},"token":{{"id":{token.id},"text":{json.dumps(token.text)},'
                f'"logprob":{token.logprob},"special":false}},'
                f'"generated_text":null,"details":null,"top_tokens":null}}\n\n').encode()

    def stream_last(self, index: int, token: Token, text: str, details: dict[str, Any] | None) -> bytes:
        """The last `/generate_stream` event: the last token, the whole text, and `details` if asked for."""
        event = {"index": index + 1, "token": _token(token), "generated_text": text, "details": details,
                 "top_tokens": None}
        return f"data:{json.dumps(event, separators=(',', ':'))}\n\n".encode()

    def payload_limit(self, env: dict[str, str]) -> int | None:
        """PAYLOAD_LIMIT, or the launcher's 2 MB."""
        return read_int(env, "PAYLOAD_LIMIT", PAYLOAD_LIMIT)

    def error_reply(self, status: int, error_type: str, message: str) -> ErrorReply:
        """`{"error", "error_type"}`; a body over the payload limit gets axum's plain-text 413."""
        if status == 413:
            return ErrorReply(413, "text/plain", PAYLOAD_TOO_LARGE.encode())
        body = json.dumps({"error": message, "error_type": error_type}).encode()
        return ErrorReply(status, "application/json", body)

    def stream_refusal(self, status: int, error_type: str, message: str) -> ErrorReply:
        """HTTP 200 and one server-sent error event (the router refuses after the stream has begun)."""
        if status == 413:
            return self.error_reply(status, error_type, message)
        event = json.dumps({"error": message, "error_type": error_type}, separators=(",", ":"))
        return ErrorReply(200, "text/event-stream", f"data:{event}\n\n".encode())


def _token(token: Token) -> dict[str, Any]:
    return {"id": token.id, "text": token.text, "logprob": token.logprob, "special": False}


TGI = Tgi()

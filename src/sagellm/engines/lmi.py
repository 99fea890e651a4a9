"""AWS LMI (djl-serving) running vLLM: what it reads, how it batches and queues, what it answers.

LMI ≥ 0.33 runs vLLM through its async OpenAI service when told so; sagellm names that engine explicitly
instead of relying on LMI's auto-detection (which would also cap the batch at 32 sequences). Sources in
docs/containers.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from sagellm.engines.engine import (
    CUDA_GRAPH_CONSTANTS,
    Engine,
    ErrorReply,
    Generation,
    Limits,
    Settings,
    Token,
    Variable,
    read_int,
)
from sagellm.engines.vllm import COUNTERS, HISTOGRAMS
from sagellm.engines.vllm import memory_for_model_gb as vllm_memory_for_model_gb

# The newest LMI in the SDK's tables (sagemaker-core 2.27.0: 0.38.0-lmi29.0.0-cu130); a redeploy never changes
# the server underneath an endpoint. Its CUDA 13 image needs the CUDA 13 host AMI (Engine.inference_ami).
# The variables below are read as before: checked against djl-serving's newest published source of the CUDA 13
# line (deepjavalibrary/djl-serving branch 0.36.0-lmi27-dlc, commit 7e13b081: properties_manager/
# vllm_rb_properties.py maps tensor_parallel_degree, max_rolling_batch_size → max_num_seqs, quantize,
# max_rolling_batch_prefill_tokens → max_num_batched_tokens and passes max_model_len through to vLLM's engine
# arguments; lmi_vllm/vllm_async_service.py is still the async entry point; lmi.Dockerfile builds on CUDA 13.0).
PINNED = "0.38.0"
FRAMEWORK = "djl-lmi"
OLDEST = (0, 33, 0)  # the oldest version whose behaviour docs/containers.md describes

# The vLLM engine through the async OpenAI service (LMI's own choice for vLLM-capable models).
VLLM_ASYNC = {
    "OPTION_ENTRYPOINT": "djl_python.lmi_vllm.vllm_async_service",
    "OPTION_ASYNC_MODE": "true",
    "OPTION_ROLLING_BATCH": "disable",
}
# LMI's default rolling batch in async mode is 32 sequences (LmiConfigRecommender).
DEFAULT_ROLLING_BATCH_SIZE = 32
# LMI turns a generate body without max_new_tokens into a vLLM request of 30 (request_response_utils.py).
DEFAULT_NEW_TOKENS = 30

# What OPTION_QUANTIZE takes, from LMI's vLLM user guide (djl-serving 0.36.0-lmi27-dlc @7e13b081,
# serving/docs/lmi/user_guides/vllm_user_guide.md, "Quantization Support"): fp8 and bitsandbytes quantize at
# start-up; ahead-of-time methods (the guide names GPTQ, AWQ and FP8) are read from the checkpoint, and the option,
# passed through to vLLM's `quantization`, must then name the checkpoint's method.
QUANTIZATIONS = frozenset({"fp8", "bitsandbytes", "gptq", "awq"})

# vLLM queues every request and admits waiting prompts at every step, chunking long ones.
# Its memory is vLLM's: LMI passes gpu_memory_utilization through only when set (djl-serving
# djl_python/properties_manager/vllm_rb_properties.py@00db6305, extra engine args), so vLLM's default holds.
GENERATION = Generation("lmi", "LMI (vLLM)", CUDA_GRAPH_CONSTANTS, waiting_served_ratio=0.0,
                        replicates_kv_heads=True, memory_for_model_gb=vllm_memory_for_model_gb)

READS = frozenset({"HF_MODEL_ID", "HF_MODEL_REVISION", "HF_TOKEN", "TENSOR_PARALLEL_DEGREE",
                   "PIPELINE_PARALLEL_DEGREE"})
PREFIXES = ("OPTION_", "SERVING_")  # option.* (vLLM engine arguments pass through) and server settings
# djl-serving docs/lmi/lmi_environment_variable_instruction.md (HF_MODEL_ID = OPTION_MODEL_ID,
# TENSOR_PARALLEL_DEGREE = OPTION_TENSOR_PARALLEL_DEGREE).
VARIABLES = (
    Variable("model id", ("HF_MODEL_ID", "OPTION_MODEL_ID"), "model_id"),
    Variable("tensor parallel degree", ("OPTION_TENSOR_PARALLEL_DEGREE", "TENSOR_PARALLEL_DEGREE"),
             "tensor_parallel"),
    Variable("quantization", ("OPTION_QUANTIZE",), "quantization"),
    Variable("max model length", ("OPTION_MAX_MODEL_LEN",), "max_total_tokens"),
    Variable("rolling batch size", ("OPTION_MAX_ROLLING_BATCH_SIZE",), "max_batch_size"),
    Variable("prefill budget", ("OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS",), "max_batch_prefill_tokens"),
    Variable("remote code", ("HF_TRUST_REMOTE_CODE", "OPTION_TRUST_REMOTE_CODE"), None),
)


VLLM_BLOCK_TOKENS = 16  # vLLM's DEFAULT_BLOCK_SIZE (config/cache.py; the same in the vLLM LMI 0.36 pins, 0.23)


class Lmi(Engine):
    """AWS LMI with vLLM's async engine: queues instead of refusing; its rolling batch is the running limit."""

    kind = "lmi"
    label = "LMI"
    framework = FRAMEWORK
    pinned = PINNED
    oldest = OLDEST
    variables = VARIABLES
    quantizations = QUANTIZATIONS
    model_id_variables = ("HF_MODEL_ID", "OPTION_MODEL_ID")
    queues = True
    scheduling = "vllm"  # its engine is vLLM's (V1 scheduler: docs/planner.md)
    stream_content_type = "application/jsonlines"  # one JSON object per line, not server-sent events
    # vLLM's names (an http target's vLLM server too).
    histograms: ClassVar[dict[str, tuple[str, ...]]] = HISTOGRAMS
    counters: ClassVar[dict[str, tuple[str, ...]]] = COUNTERS

    def generation(self, version: str | None) -> Generation:
        """Every LMI version sagellm models is one generation."""
        return GENERATION

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """vLLM always chunks long prompts."""
        return True

    def environment(self, s: Settings) -> dict[str, str]:
        """The vLLM engine named explicitly, its limits as LMI options."""
        env = {
            "HF_MODEL_ID": s.model_id,
            **VLLM_ASYNC,
            "OPTION_TENSOR_PARALLEL_DEGREE": str(s.tensor_parallel),
            "OPTION_MAX_MODEL_LEN": str(s.max_total_tokens),
            "OPTION_MAX_ROLLING_BATCH_SIZE": str(s.max_batch_size or s.max_concurrent_requests),
            "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS": str(s.max_batch_prefill_tokens),
        }
        if s.quantization != "none":
            env["OPTION_QUANTIZE"] = s.quantization
        return env

    def environment_errors(self, version: str, env: dict[str, str], where: Callable[[str], str]) -> list[str]:
        """Names outside what LMI reads: its few plain names, OPTION_* and SERVING_*."""
        return [f"{where(name)}: LMI {version} does not read it (it reads HF_MODEL_ID, TENSOR_PARALLEL_DEGREE, "
                "OPTION_* and SERVING_*); see docs/containers.md"
                for name in env if name not in READS and not name.startswith(PREFIXES)]

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """vLLM's limits: the model length, the rolling batch; it never refuses for load."""
        total = read_int(env, "OPTION_MAX_MODEL_LEN", context)
        return Limits(max_input_tokens=total - 1, max_total_tokens=total,
                      max_batch_prefill_tokens=read_int(env, "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS", total),
                      max_batch_total_tokens=kv_tokens, max_concurrent_requests=None,
                      max_batch_size=read_int(env, "OPTION_MAX_ROLLING_BATCH_SIZE", DEFAULT_ROLLING_BATCH_SIZE),
                      kv_block_tokens=VLLM_BLOCK_TOKENS)

    def default_max_new_tokens(self) -> int | None:
        """LMI's 30 tokens for a generate body without max_new_tokens."""
        return DEFAULT_NEW_TOKENS

    def generate_body(self, text: str, details: dict[str, Any] | None, tokens: Sequence[Token], *,
                      invocations: bool) -> Any:
        """One object on every route (TGI wraps its `/invocations` reply in a list)."""
        out: dict[str, Any] = {"generated_text": text}
        if details is not None:
            out["details"] = {**details, "prefill": [], "tokens": [t._asdict() for t in tokens]}
        return out

    def stream_token(self, index: int, token: Token) -> bytes:
        """One line of the streamed reply for a token that is not the last."""
        line = {"index": index, "token": token._asdict(), "generated_text": None, "details": None}
        return json.dumps(line, separators=(",", ":")).encode() + b"\n"

    def stream_last(self, index: int, token: Token, text: str, details: dict[str, Any] | None) -> bytes:
        """The last line: the last token, the whole text and `details`."""
        line = {"index": index, "token": token._asdict(), "generated_text": text, "details": details}
        return json.dumps(line, separators=(",", ":")).encode() + b"\n"

    def error_reply(self, status: int, error_type: str, message: str) -> ErrorReply:
        """`{"error", "code"}`; vLLM's validation errors are 400s (TGI's 422s)."""
        status = 400 if status == 422 else status
        return ErrorReply(status, "application/json", json.dumps({"error": message, "code": status}).encode())


LMI = Lmi()

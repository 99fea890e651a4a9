"""AWS's SGLang image for SageMaker: `SM_SGLANG_*` variables become `sglang.launch_server` flags.

Its entrypoint (aws/deep-learning-containers e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0,
`scripts/docker/sglang/sagemaker_entrypoint.sh`) writes every `SM_SGLANG_*` variable as a flag, then adds
`--port 8080`, `--host 0.0.0.0` and `--model-path /opt/ml/model` where those are not set. SGLang's `/invocations`
takes only a chat completion body (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py,
`sagemaker_chat_completions`). Sources in docs/containers.md.
"""

from __future__ import annotations

from typing import ClassVar

from sagellm.engines.engine import CUDA_GRAPH_CONSTANTS, Generation
from sagellm.engines.openai_server import CHAT, OpenAiServer

PINNED = "0.5.20"  # the newest `sglang` image in sagemaker-core 2.27.0's tables
FRAMEWORK = "sglang"
OLDEST = (0, 5, 18)  # the oldest version whose behaviour docs/containers.md describes
PREFIX = "SM_SGLANG_"
# What `--quantization` takes: QUANTIZATION_CHOICES of sgl-project/sglang 0.5.20 (python/sglang/srt/arg_groups/
# choices.py, the flag's argparse choices; kept beside its flag list in tests/engines/data/sglang-0.5.20-flags.json,
# which tests/engines/test_openai_engines.py compares this with). eetq is not in it.
QUANTIZATIONS = frozenset({
    "awq", "fp8", "mxfp8", "gptq", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt", "modelopt_fp8",
    "modelopt_fp4", "nvfp4_online", "modelopt_mixed", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8",
    "mxfp4", "auto-round", "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
    "quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming",
})

# SGLang's scheduler admits waiting prompts at every step and chunks long ones, as vLLM does. It runs vLLM's step
# constants (planner.constants.VLLM_1): with them the published vLLM and SGLang levels show the same biases, so one
# set for both (docs/studies.md, "vLLM and SGLang step constants", round 5).
# By GPU memory (GiB, below): chunked_prefill_size and the decode CUDA-graph batch SGLang picks when unset
# (sglang 0.5.20 arg_groups/memory_hook.py:88-185): (below GiB, chunk, graph batch at TP < 4, at TP >= 4).
_MEMORY_TIERS = ((20, 2048, 8, 8), (35, 4096, 48, 48), (60, 4096, 32, 32), (90, 8192, 256, 512), (160, 8192, 256, 256))


def default_chunked_prefill(gpu_mib: float) -> int:
    """chunked_prefill_size SGLang picks for this GPU when unset."""
    return next((chunk for below, chunk, _, _ in _MEMORY_TIERS if gpu_mib / 1024 < below), 16384)


def mem_fraction_static(gpu_mib: float, tp: int) -> float:
    """SGLang's default share of the GPU for weights and KV (memory_hook.py:279-340): the GPU less a reserve for
    activations of a prefill chunk, TP buffers and CUDA graphs, at least 10 GiB above 60 GiB of GPU (MiB units)."""
    tier = next((t for t in _MEMORY_TIERS if gpu_mib / 1024 < t[0]), (0, 16384, 512, 512))
    graph_batch = tier[3] if tp >= 4 else tier[2]
    reserved = 512 + 1.5 * max(tier[1], 2048) + tp / 8 * 1024 + 2 * graph_batch
    if gpu_mib / 1024 > 60:
        reserved = max(reserved, 10240)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def memory_for_model_gb(gpu_mib: float, tp: int) -> float:
    """GB of each GPU SGLang gives weights and KV: `mem_fraction_static` of it (mem_cache/kv_cache_configurator.py
    2148-2180: the pool is about total × fraction − weights)."""
    return mem_fraction_static(gpu_mib, tp) * gpu_mib * 2**20 / 1e9


GENERATION = Generation("sglang", "SGLang 0.5 (AWS SageMaker image)", CUDA_GRAPH_CONSTANTS, waiting_served_ratio=0.0,
                        replicates_kv_heads=True, memory_for_model_gb=memory_for_model_gb)


class Sglang(OpenAiServer):
    """SGLang's server in AWS's SageMaker image: queues; `--max-running-requests` is the running limit."""

    kind = "sglang"
    label = "SGLang"
    framework = FRAMEWORK
    pinned = PINNED
    oldest = OLDEST
    prefix = PREFIX
    flags: ClassVar[dict[str, str]] = {
        "model_id": "--model-path",
        "tensor_parallel": "--tp-size",
        "quantization": "--quantization",
        "max_total_tokens": "--context-length",
        "max_batch_size": "--max-running-requests",
        "max_batch_prefill_tokens": "--chunked-prefill-size",
    }
    extra_flags = (("prefix caching off", "--disable-radix-cache"), ("model revision", "--revision"),
                   ("remote code", "--trust-remote-code"))
    # SGLang serves /metrics only when asked (its Prometheus names are the bench's server-side figures).
    always: ClassVar[dict[str, str]] = {"--enable-metrics": "true"}
    quantizations = QUANTIZATIONS
    reads = frozenset({"HF_TOKEN"})
    generation_ = GENERATION
    scheduling = "sglang"
    kv_block_tokens = 1  # page_size (sglang 0.5.20 fields/schedule.py:145: None → 1 on CUDA)
    default_running = None  # sized from the KV pool (server_args.py)
    default_prefill_tokens = 4096  # chunked_prefill_size: 2048 to 16384 by GPU memory; the plan always sets it
    # The CUDA 13 images (cu130) need the host AMI with NVIDIA driver 580 (SageMaker's InferenceAmiVersion).
    inference_ami_version = "al2023-ami-sagemaker-inference-gpu-4-1"
    invocations = (CHAT,)
    sagemaker_api = "chat"
    # sgl-project/sglang python/sglang/srt/observability/metrics_collector.py (0.5.20): counters carry `_total`
    # in their names; `inter_token_latency_seconds` replaced `time_per_output_token_seconds`, so both.
    histograms: ClassVar[dict[str, tuple[str, ...]]] = {
        "e2e_latency_ms": ("sglang:e2e_request_latency_seconds",),
        "ttft_ms": ("sglang:time_to_first_token_seconds",),
        "itl_ms": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "queue_time_ms": ("sglang:queue_time_seconds",),
    }
    counters: ClassVar[dict[str, tuple[str, ...]]] = {
        "requests": ("sglang:num_requests_total",),
        "prompt_tokens": ("sglang:prompt_tokens_total",),
        "generation_tokens": ("sglang:generation_tokens_total",),
    }


SGLANG = Sglang()

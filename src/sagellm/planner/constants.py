"""Every tuned constant of the performance model: what it means and how it was obtained.

The step-time constants are fitted per server generation (each engine's generation says whose set it
uses; MEASURED below says what each set was fitted on). TGI_1 was fitted with `python benchmarks/planner_accuracy.py --fit` (scipy least squares on the
log errors of ms/token and throughput of the 113 rows of benchmarks/data/calibration.csv: AWS JumpStart
Llama 2 7B sweeps on g5.2xlarge/g5.12xlarge/g5.48xlarge/p4d, and Hugging Face's TGI 1.0.3 Llama 2
7B/13B/70B fp16 + GPTQ benchmark), starting from and pulled toward the physics priors listed in that
script (method.md §4: 84 % of peak bandwidth, ~5 ms per step, ~4.4 ms per doubling of TP) with the prior weight
chosen by the held-out error (`--holdout`, leave-one-source-out over 198 levels: 9.6 % ms/token, 13.0 %
throughput). benchmarks/data/holdout.csv (FMBench, and the Hugging Face pilot) is left out of this fit so that it
stays a table these constants never saw: 6.5 % ms/token, 11.5 % throughput there (docs/studies.md). Those servers
are TGI 1.x without CUDA graphs; JumpStart's rows are replayed with the KV budgets its deployments ran with
(read off the sweeps, see the script). Efficiencies are relative to the catalog's peak figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class StepConstants:
    """The fitted constants of the step-time model (one set per measured server generation)."""

    # --- decode step ---
    # Fraction of peak HBM bandwidth that weight reads reach during decode.
    bandwidth_efficiency: float
    # Fixed host cost of one forward pass: scheduler, Python, sampling set-up, sync.
    step_overhead_s: float
    # Per running sequence per step: logits, sampling, stopping criteria, block bookkeeping.
    seq_overhead_s: float
    # Attention reads the KV cache at this fraction of an accelerator's peak bandwidth.
    kv_bandwidth_efficiency: float
    # A lone attention thread block (one head of one sequence) takes as long as streaming this many heads'
    # worth of that sequence's KV at full speed: the latency floor that sharding cannot divide.
    kv_latency_blocks: float
    # Model FLOPs utilisation of the batched decode matmuls once compute starts to matter.
    decode_mfu: float
    # --- tensor parallelism: all-reduces per layer per pass ---
    # Latency of one all-reduce per doubling of TP over PCIe without peer-to-peer (g5, g6, g6e).
    pcie_allreduce_latency_s: float
    # Host-memory bandwidth the PCIe ring shares: the bus carries 2(N-1) × message per all-reduce.
    pcie_host_bw_gbps: float
    # Latency of one all-reduce per doubling of TP over NVLink/NVSwitch (p4d, p5).
    nvlink_allreduce_latency_s: float
    # Effective NVLink bandwidth per GPU for all-reduce traffic (GB/s).
    nvlink_bw_gbps: float
    # Per forward pass per doubling of TP over NVLink, however deep the model (method.md §4's form): the
    # published p4d floor at TP 8 is ~20 ms for Llama 2 7B (32 layers) and 13B (40) alike.
    nvlink_pass_overhead_s: float
    # --- 4-bit weight-only kernels (GPTQ/AWQ) ---
    # 4-bit kernels reach this fraction of what fp16 weight reads reach (dequantisation in the GEMV).
    quant_bandwidth_efficiency: float
    # Per layer per pass when sharded: TGI's exllama kernel cannot split act-order rows over shards, so
    # row-parallel layers fall back to a launch-heavy Triton kernel.
    quant_sharded_layer_overhead_s: float
    # Prefill of a 4-bit model runs this many times slower than fp16 matmuls (dequantise-then-GEMM).
    quant_prefill_slowdown: float
    # --- prefill ---
    # Model FLOPs utilisation of a prefill pass, relative to the catalog's dense FP16 peak.
    prefill_mfu: float
    # --- today's engines (vLLM V1, SGLang); the defaults leave TGI_1's step times as they were fitted ---
    # Per prompt (chunk) in a pass: the engine's work on a request entering a pass (input processing, block tables,
    # output set-up); what makes a burst of short requests front-end bound.
    prompt_overhead_s: float = 0.0
    # FP8 checkpoints' weight reads reach this fraction of what 16-bit reads reach (scaled GEMVs).
    fp8_bandwidth_efficiency: float = 1.0
    # Time matmuls at each GPU's measured large-GEMM rate (GEMM_RATE below: its bf16 share of the datasheet peak,
    # FP8 tensor cores for FP8 checkpoints) instead of the datasheet's dense FP16 peak for every GPU.
    measured_gemm_rates: bool = False
    # Routed experts' matmuls run at this fraction of a dense matmul's rate (fused-MoE kernels: many small GEMMs).
    moe_compute_efficiency: float = 1.0
    # Per layer per pass, whatever the batch or TP: the ~15 kernels of a layer each take a few microseconds however
    # little they compute, and every TP rank runs all of them (under CUDA graphs this, not the host, is the floor).
    layer_overhead_s: float = 0.0
    # Per layer of a mixture-of-experts model per pass, beyond a dense layer's: routing, top-k, sorting tokens by
    # expert and the fused-MoE kernels' launch floor.
    moe_layer_overhead_s: float = 0.0
    # Time all-reduces over NVLink by the latency and bus bandwidth measured for each GPU and TP (ALLREDUCE below:
    # vLLM's custom all-reduce under CUDA graphs) instead of the per-doubling latency and nvlink_bw_gbps above.
    measured_allreduce: bool = False
    # FP8 checkpoints on GPUs without FP8 tensor cores (NO_FP8_TENSOR_CORES) run weight-only kernels (vLLM's Marlin
    # W8A16: weights dequantised to 16-bit inside the GEMM): once compute-bound (prefill, large decode batches) their
    # matmuls run this many times slower than 16-bit ones.
    weight_only_fp8_slowdown: float = 1.0
    # Per request, outside the GPU passes: the server's front end (HTTP, chat template, tokenising, the hand-over to
    # the engine core) before the scheduler sees a request. It adds to TTFT and delays a closed-loop client's next
    # request, never a pass (planner/simulate.py); `prompt_overhead_s` is the cost inside a pass.
    request_latency_s: float = 0.0
    # Routed experts' matmuls take this many times their time under balanced routing: real routers send more tokens
    # to some experts than others, and a fused-MoE pass lasts as long as its busiest expert.
    moe_routing_skew: float = 1.0


# TGI 1.x (SageMaker Hugging Face LLM DLC 0.8–1.4), fitted on 113 published SageMaker measurements.
TGI_1 = StepConstants(
    bandwidth_efficiency=0.95,  # fit (upper bound; traded against step_overhead_s)
    step_overhead_s=0.005134,  # fit (method.md §4: ~5 ms)
    seq_overhead_s=0.0001767,  # fit
    kv_bandwidth_efficiency=0.7643,  # fit
    kv_latency_blocks=71.04,  # fit: ~ one block per SM (A10G 80, A100 108)
    decode_mfu=0.5,  # not fitted: no calibration row is compute-bound in decode
    pcie_allreduce_latency_s=0.00002399,  # fit (the PCIe cost is in the bandwidth term)
    pcie_host_bw_gbps=17.07,  # fit: why g5.48xlarge (TP 8) degrades faster under load than g5.12xlarge
    nvlink_allreduce_latency_s=0.00003517,  # fit: what each of 70B's 80 layers adds on p4d beyond 13B's 40
    nvlink_pass_overhead_s=0.003671,  # fit (method.md §4: ~4.4 ms per doubling): 11 of 7B's 24 ms floor at TP 8 on p4d
    nvlink_bw_gbps=150.0,  # not identifiable (never the bottleneck): half of NVLink3's 300 GB/s per direction
    quant_bandwidth_efficiency=0.5677,  # fit on GPTQ rows at TP 1 (exllama kernel)
    quant_sharded_layer_overhead_s=0.0004043,  # fit
    quant_prefill_slowdown=2.438,  # fit on GPTQ slopes under load (prefill-dominated at 50 output tokens)
    prefill_mfu=0.6772,  # fit
)

# Large-GEMM rates measured by NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0,
# aiconfigurator_core/systems/data/<gpu>/gemm/vllm/0.24.0/gemm_perf.parquet; A100: vllm/0.14.0): the median over
# m >= 4096, 4096 <= n, k <= 16384 of 2mnk / latency, as a share of the catalog's dense FP16 peak, bf16 and
# block-scaled FP8 (the scheme of today's FP8 checkpoints: Qwen3-*-FP8, DeepSeek-R1, GLM-4.6-FP8). A GPU that is not
# listed keeps 16-bit rates at A100's share (A10G, L4: no vLLM GEMM table there; FP8 then runs as 16-bit).
# (bf16 share of FP16 peak, FP8 share of FP16 peak or None where FP8 tensor cores are absent)
GEMM_RATE: dict[str, tuple[float, float | None]] = {
    "A100-40GB": (0.89, None), "A100-80GB": (0.89, None),  # 278 TF/s of 312
    "H100-80GB": (0.78, 1.17),  # bf16 775 TF/s, fp8_block 1155 TF/s of 989
    "H200-141GB": (0.76, 1.15),  # 753, 1139 of 989
    "L40S": (0.59, 0.72),  # 214, 262 of 362
    "B200": (0.68, 1.00),  # 1537, 2242 of 2250
}
GEMM_RATE_DEFAULT = (0.89, None)

# GPUs of compute capability below 8.9 (Ampere): no FP8 tensor cores, so vLLM serves FP8 checkpoints there as
# weight-only FP8 through Marlin kernels (vllm/model_executor/layers/quantization/fp8.py: use_marlin where
# `not current_platform.has_device_capability(89)`; marlin_utils_fp8.py warns "Weight-only FP8 compression will be
# used leveraging the Marlin kernel"), SGLang likewise (fp8_utils.py can_auto_enable_marlin_fp8, the same warning).
NO_FP8_TENSOR_CORES = frozenset({"A10G", "A100-40GB", "A100-80GB"})

# All-reduces over NVLink measured by NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator-core 0.12.0,
# aiconfigurator_core/systems/data/<gpu>/comm/vllm/<version>/custom_allreduce_perf.parquet, backend vllm_graph: vLLM's
# tensor_model_parallel_all_reduce of a bf16 tensor under a CUDA graph, message_size in elements as its collector's
# get_input_shape_and_comm_size makes them; H100/H200: vllm 0.24.0, A100: 0.14.0). Per TP: (latency s, bus bandwidth
# GB/s) of latency + 2(TP-1)/TP x bytes / bus bandwidth, least squares on relative error over messages of 256 B to
# 128 MB (a decode step's rows to a prefill chunk's): mean error 4-8 % at TP 2, 8-12 % at TP 4, 13-19 % at TP 8 (the
# custom kernel's one-shot to two-shot switch). A100 40 GB shares A100 80 GB's NVLink3 fabric.
ALLREDUCE: dict[str, dict[int, tuple[float, float]]] = {
    "A100-40GB": {2: (4.96e-6, 169.0), 4: (5.62e-6, 164.0), 8: (6.61e-6, 167.0)},
    "A100-80GB": {2: (4.96e-6, 169.0), 4: (5.62e-6, 164.0), 8: (6.61e-6, 167.0)},
    "H100-80GB": {2: (4.25e-6, 242.0), 4: (4.84e-6, 273.0), 8: (5.35e-6, 329.0)},
    "H200-141GB": {2: (4.42e-6, 253.0), 4: (4.80e-6, 284.0), 8: (5.32e-6, 349.0)},
}

# vLLM V1 and SGLang under CUDA graphs (one set: the published levels show no engine difference once the replay is
# right, docs/studies.md "round 5"): physics priors whose values come from measurements of the kernels, checked, not
# fitted, on 108 published vLLM/SGLang levels (benchmarks/engine_accuracy.py), but for the front end's latency (the
# median TTFT left at closed loops of <= 4 in flight). Every source below is AIConfigurator 0.12.0's tables (PyPI
# aiconfigurator-core 0.12.0, aiconfigurator_core/systems/data/<gpu>/...) unless it says otherwise. vLLM, LMI and
# SGLang run it (engines/engine.py CUDA_GRAPH_CONSTANTS).
VLLM_1 = replace(
    TGI_1,
    # bf16 GEMVs of m <= 8 read weights at 0.69 (A100), 0.81 (H100), 0.74 (H200) of peak (gemm/vllm/*/gemm_perf)
    bandwidth_efficiency=0.8,
    step_overhead_s=0.0,  # under CUDA graphs the fixed cost is in the layers' kernels (layer_overhead_s)
    layer_overhead_s=50e-6,  # ~15 kernels a layer of a few us each: ~2 ms a pass for 40 layers (the decode floor)
    seq_overhead_s=30e-6,  # sampling and bookkeeping per sequence, batched on the GPU (not TGI's Python loop)
    kv_bandwidth_efficiency=0.5,
    # vLLM V1's FlashAttention splits a decode's KV over up to 16 blocks per head under CUDA graphs
    # (vllm/v1/attention/backends/flash_attn.py@0084b783, _DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH), FlashInfer alike
    kv_latency_blocks=0.0,
    decode_mfu=0.5,
    prefill_mfu=0.7,
    nvlink_allreduce_latency_s=2.2e-6,  # only where ALLREDUCE has no measurement (TP 16)
    nvlink_pass_overhead_s=0.0,  # TGI's per-pass cost without CUDA graphs
    measured_allreduce=True,  # ALLREDUCE: comm/vllm/*/custom_allreduce_perf, backend vllm_graph
    measured_gemm_rates=True,  # GEMM_RATE: gemm/vllm/*/gemm_perf
    fp8_bandwidth_efficiency=0.78,  # per-tensor FP8 GEMVs on H100 read 2,111 GB/s where bf16's read 2,701
    # 4-bit and weight-only FP8 run Marlin kernels: near the ideal 4x over FP16 at 1-32 tokens (IST-DASLab/marlin
    # README), 1.22x slower than FP16 once compute-bound (16k tokens: IST-DASLab/marlin#21, the author's answer:
    # beyond ~128 tokens weight-only quantization cannot be faster)
    quant_bandwidth_efficiency=0.9,
    quant_prefill_slowdown=1.22,
    weight_only_fp8_slowdown=1.22,
    quant_sharded_layer_overhead_s=0.0,  # TGI's exllama fallback under TP; Marlin shards as any layer
    # fused-MoE Triton kernels take 2.9-3.6x their roofline at 4k-16k tokens (moe/vllm/0.24.0/moe_perf, H100,
    # Qwen3-235B's experts at TP 4-8), plus a floor of 29-38 us a layer at 1-16 tokens (H100, H200; ~5 us of it a
    # dense MLP's); routing skew: power_law_1.01 against balanced at 1k-8k tokens, median 1.05 (H100), 1.08 (H200)
    moe_compute_efficiency=0.33,
    moe_layer_overhead_s=25e-6,
    moe_routing_skew=1.07,
    # HTTP, chat template, tokenising and the hand-over to the engine core: the median of measured minus predicted
    # TTFT over the 25 closed-loop levels of <= 4 in flight outside the study's hold-out (gpustack, ree2raz, varad;
    # engine_accuracy.fit_request_latency)
    request_latency_s=0.0132,
)

# What each measured generation's constants were fitted on (the `plan` output names it).
MEASURED: dict[str, tuple[StepConstants, str]] = {
    "tgi-1": (TGI_1, "113 published SageMaker measurements (AWS JumpStart, Hugging Face TGI 1.0.3)"),
    "vllm": (VLLM_1, "NVIDIA AIConfigurator 0.12.0's kernel tables, checked on 157 published vLLM and SGLang levels"),
}
# The generation a shape is predicted for when its caller names none: the measured one.
DEFAULT_GENERATION = "tgi-1"

# --- memory (not fitted) ----------------------------------------------------------------------
# Per-GPU memory the server cannot give to weights or KV cache: CUDA context, kernels, the allocator and
# the warm-up prefill's activations. Derived from a published figure: TGI 0.9.1 sized the KV cache of
# LLaMA-7B (fp16, 13.48 GB of weights) on one 24 GB A10 (23028 MiB = 24.15 GB) at 17,664 tokens ×
# 0.5 MiB = 9.26 GB (--max-batch-total-tokens 17664, OlivierDehaene in vllm-project/vllm#381,
# 2023-07-06): 24.15 − 13.48 − 9.26 = 1.41 GB. TGI 1.x then gives ALL the rest to the KV cache
# (CUDA_MEMORY_FRACTION 1.0; flash_causal_lm.warmup).
RESERVED_GB_PER_GPU = 1.41

# SageMaker real-time invocation timeout (not configurable for real-time endpoints).
INVOCATION_TIMEOUT_S = 60.0

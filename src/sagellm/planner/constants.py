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

from dataclasses import dataclass


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

# What each measured generation's constants were fitted on (the `plan` output names it).
MEASURED: dict[str, tuple[StepConstants, str]] = {
    "tgi-1": (TGI_1, "113 published SageMaker measurements (AWS JumpStart, Hugging Face TGI 1.0.3)"),
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

"""Every tuned constant of the performance model: what it means and how it was obtained.

Fitted with `python benchmarks/planner_accuracy.py --fit` (scipy least squares on the log errors of
ms/token and throughput of all 113 rows of ../shared/reference/calibration.csv: AWS JumpStart Llama 2 7B
sweeps on g5.2xlarge/g5.12xlarge/g5.48xlarge/p4d, and Hugging Face's TGI 1.0.3 Llama 2 7B/13B/70B
fp16 + GPTQ benchmark), starting from and weakly pulled toward the physics priors listed in that
script (method.md §4: 84 % of peak bandwidth, ~5 ms per step, ~4.4 ms per doubling of TP). The data are
TGI 1.x without CUDA graphs; newer servers (TGI 3, LMI/vLLM) are faster per step, so treat the
overheads as an upper bound there. Efficiencies are relative to the catalog's peak figures.
"""

# --- decode step -----------------------------------------------------------------------------
# Fraction of peak HBM bandwidth that weight reads reach during decode. Fit: 0.95 (the upper bound;
# the fit trades it against STEP_OVERHEAD_S — 0.84 with ~2 ms more overhead is nearly as good).
BANDWIDTH_EFFICIENCY = 0.95
# Fixed host cost of one forward pass: scheduler, Python, sampling set-up, sync. Fit: 8.0 ms
# (method.md §4: ~5 ms, with a lower bandwidth efficiency).
STEP_OVERHEAD_S = 0.00797
# Per running sequence per step: logits, sampling, stopping criteria, block bookkeeping. Fit: 0.10 ms.
SEQ_OVERHEAD_S = 0.000100
# Attention reads the KV cache at this fraction of ONE accelerator's bandwidth, whatever the TP degree:
# paged attention of TGI 1.x does not speed up with sharding (JumpStart 3840-token rows add the same
# seconds on 1, 4 and 8 A10Gs; a fitted TP exponent came out 0.00–0.02). Fit: 1.0 (upper bound).
KV_BANDWIDTH_EFFICIENCY = 1.0
# Running sequences at which attention reaches half that efficiency: one long sequence leaves most
# SMs idle (heads × sequences thread blocks). Explains why a lone 3840-token prompt costs ~3× more per
# KV byte than the same bytes spread over a busy batch. Fit: 2.4.
KV_HALF_BATCH = 2.42
# Model FLOPs utilisation of the batched decode matmuls once compute starts to matter (not fitted:
# no calibration row is compute-bound in decode).
DECODE_MFU = 0.5

# --- tensor parallelism: two all-reduces per layer per pass ------------------------------------
# Latency of one all-reduce per doubling of TP over PCIe without peer-to-peer (g5, g6, g6e). Fit: 6 µs
# (the PCIe cost is in the bandwidth term below).
PCIE_ALLREDUCE_LATENCY_S = 0.0000064
# Host-memory bandwidth the PCIe ring shares: the bus carries 2(N-1) × message per all-reduce, which is
# why g5.48xlarge (TP 8) degrades faster under load than g5.12xlarge (TP 4). Fit: 18.5 GB/s.
PCIE_HOST_BW_GBPS = 18.5
# Latency of one all-reduce per doubling of TP over NVLink/NVSwitch (p4d, p5). Fit: 60 µs — the p4d
# batch-1 floor (~20 ms for 7B at TP 8) sits above its weight-read time; the fit puts it here.
NVLINK_ALLREDUCE_LATENCY_S = 0.0000601
# Effective NVLink bandwidth per GPU for all-reduce traffic (GB/s); not identifiable from the data
# (never the bottleneck), set to half of NVLink3's 300 GB/s per direction.
NVLINK_BW_GBPS = 150.0

# --- 4-bit weight-only kernels (GPTQ/AWQ) ----------------------------------------------------
# 4-bit kernels reach this fraction of what fp16 weight reads reach (dequantisation in the GEMV).
# Fit: 0.64 (on GPTQ rows at TP 1, where TGI uses the exllama kernel).
QUANT_BANDWIDTH_EFFICIENCY = 0.638
# Per layer per pass when sharded (TP > 1): TGI's exllama kernel cannot split act-order rows over
# shards, so row-parallel layers fall back to a launch-heavy Triton kernel. Fit: 0.39 ms per layer.
QUANT_SHARDED_LAYER_OVERHEAD_S = 0.000392
# Prefill of a 4-bit model runs this many times slower than fp16 matmuls (dequantise-then-GEMM).
# Fit: 3.2 (from GPTQ slopes under load, which are prefill-dominated at 50 output tokens).
QUANT_PREFILL_SLOWDOWN = 3.17

# --- prefill ---------------------------------------------------------------------------------
# Model FLOPs utilisation of a prefill pass, relative to the catalog's dense FP16 peak. Fit: 0.9 (upper
# bound) — the catalog's 70 TFLOPS for A10G is likely conservative (A10 lists 125 dense FP16 tensor).
PREFILL_MFU = 0.9

# --- server scheduling (TGI router defaults, method.md §2; not fitted) -------------------------
# Decode steps before waiting requests are forced into the batch (MAX_WAITING_TOKENS).
MAX_WAITING_TOKENS = 20
# Waiting ÷ running ratio that triggers a prefill earlier (WAITING_SERVED_RATIO).
WAITING_SERVED_RATIO = 0.3

# --- memory (not fitted; reproduces method.md §4's ~28 sequences at 512 tokens on an A10G within 10 %) -
# GPU memory the serving stack may use (TGI/vLLM leave headroom for fragmentation).
MEMORY_UTILIZATION = 0.90
# Per-GPU memory kept for the CUDA context, activations and the prefill workspace (GB).
RESERVED_GB_PER_GPU = 1.5

# SageMaker real-time invocation timeout (not configurable for real-time endpoints).
INVOCATION_TIMEOUT_S = 60.0

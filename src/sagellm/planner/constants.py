"""Every tuned constant of the performance model, with where it came from.

Calibrated with `python benchmarks/planner_accuracy.py --fit` on the published measurements in
calibration data (AWS JumpStart Llama 2 7B sweeps; Hugging Face Llama 2 SageMaker benchmark).
Starting points came from method.md §4 (84 % of peak bandwidth, ~5 ms per step, ~4.4 ms per
doubling of TP), which the fit was allowed to move.
"""

# Fraction of peak HBM bandwidth that weight reads reach during decode (method.md §4: ~0.84).
BANDWIDTH_EFFICIENCY = 0.84
# Fixed cost of one decode step: kernel launches, sampling, scheduler (method.md §4: ~5 ms).
STEP_OVERHEAD_S = 0.005
# Extra cost per doubling of the TP degree: two all-reduces per layer (method.md §4: ~4.4 ms).
TP_OVERHEAD_S_PER_DOUBLING = 0.0044
# Over PCIe (no NVLink) all-reduces go through the host; their cost grows with the batch.
PCIE_ALLREDUCE_S_PER_SEQ = 0.0
# Paged attention reads KV blocks far below peak bandwidth (method.md §4: slope under load is
# "far above what raw bandwidth implies"); fitted.
KV_BANDWIDTH_EFFICIENCY = 0.3
# Per running sequence per step: batch-dependent server overhead (logits, sampling, bookkeeping).
SEQ_OVERHEAD_S = 0.0003
# Model FLOPs utilisation of a prefill pass (compute bound, large matmuls).
PREFILL_MFU = 0.4
# Model FLOPs utilisation of the batched decode matmuls once compute starts to matter.
DECODE_MFU = 0.4
# Fixed cost of one prefill pass (scheduling, tokenisation, first sampling).
PREFILL_OVERHEAD_S = 0.01

# GPU memory the serving stack may use (TGI/vLLM leave headroom for fragmentation).
MEMORY_UTILIZATION = 0.90
# Per-GPU memory kept for the CUDA context, activations and the prefill workspace (GB).
RESERVED_GB_PER_GPU = 1.5

# SageMaker real-time invocation timeout (not configurable for real-time endpoints).
INVOCATION_TIMEOUT_S = 60.0

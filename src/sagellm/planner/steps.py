"""Step-time model: how long one decode step and one prefill pass take on a copy."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property

from sagellm.catalog import Instance, Model
from sagellm.engines import Generation, generation
from sagellm.planner.constants import (
    ALLREDUCE,
    GEMM_RATE,
    GEMM_RATE_DEFAULT,
    MEASURED,
    NO_FP8_TENSOR_CORES,
    StepConstants,
)
from sagellm.planner.shape import Shape

_ACT_BYTES = 2.0  # activations travel between shards in 16-bit


def matmul_flops_per_accel(instance: Instance, quantization: str, k: StepConstants) -> float:
    """FLOP/s one accelerator's matmuls run at before MFU: the datasheet's dense FP16 peak, or (constants that ask
    for it) the GEMM rate measured on that GPU, at FP8 for FP8 checkpoints where it has FP8 tensor cores."""
    peak = instance.tflops_per_accel * 1e12
    if not k.measured_gemm_rates:
        return peak
    bf16, fp8 = GEMM_RATE.get(instance.accelerator, GEMM_RATE_DEFAULT)
    return peak * (fp8 if quantization == "fp8" and fp8 is not None else bf16)


def weight_only_slowdown(instance: Instance, quantization: str, k: StepConstants) -> float:
    """How many times slower than 16-bit matmuls a compute-bound matmul runs (decode and prefill): FP8 checkpoints
    on GPUs without FP8 tensor cores dequantise in the GEMM (1 elsewhere; 4-bit prefill has its own term)."""
    if quantization == "fp8" and instance.accelerator in NO_FP8_TENSOR_CORES:
        return k.weight_only_fp8_slowdown
    return 1.0


def measured_allreduce(instance: Instance, tp: int, k: StepConstants) -> tuple[float, float] | None:
    """(latency s, bus bandwidth bytes/s) of one all-reduce over NVLink measured for this GPU and TP, where the
    constants ask for measured all-reduces and one was measured (else None: the per-doubling form)."""
    if not k.measured_allreduce or instance.interconnect == "pcie":
        return None
    measured = ALLREDUCE.get(instance.accelerator, {}).get(tp)
    return None if measured is None else (measured[0], measured[1] * 1e9)


def routed_active_b(model: Model) -> float:
    """Billions of routed-expert parameters one token multiplies through (0 for a dense model)."""
    if model.n_experts <= 1:
        return 0.0
    share = model.experts_per_token / model.n_experts
    return (model.params_b - model.active_b) / (1 - share) * share


def weight_read_efficiency(quantization: str, k: StepConstants) -> float:
    """Fraction of peak bandwidth weight reads reach: 4-bit kernels dequantise on the fly, FP8 GEMVs rescale."""
    if quantization in ("gptq", "awq"):
        return k.bandwidth_efficiency * k.quant_bandwidth_efficiency
    if quantization == "fp8":
        return k.bandwidth_efficiency * k.fp8_bandwidth_efficiency
    return k.bandwidth_efficiency


@dataclass(frozen=True)
class StepModel:
    """Decode-step and prefill times of one model copy, from bandwidth, FLOPS, links and fitted overheads.

    A calibration (fitted from measured runs) scales three terms: the batch-independent floor of a decode
    step, what the running sequences add to it, and a prefill pass.
    """

    shape: Shape

    @cached_property
    def k(self) -> StepConstants:
        """The fitted constants this shape's server generation uses."""
        return MEASURED[self.generation.constants_from][0]

    @cached_property
    def generation(self) -> Generation:
        """The server generation (what it does differently)."""
        return generation(self.shape.generation)

    @cached_property
    def inputs(self) -> tuple[Hashable, ...]:
        """Everything the step times below read, and nothing else (not the server's or the instance type's name, nor
        its price): step models with equal inputs time every pass alike, so the simulator's runs can be shared.
        Whatever a step time comes to read must be added here. The accelerator's name only where the constants read
        its measured GEMM rate or all-reduce (matmul_flops_per_accel, measured_allreduce): otherwise GPUs alike in bandwidth and FLOPs share runs."""
        s, i = self.shape, self.shape.instance
        return (self.k, self.generation.moe_dense_max_tokens, s.model, s.tensor_parallel, s.quantization, s.calibration,
                i.bw_per_accel_gbps, i.tflops_per_accel, i.interconnect,
                i.accelerator if self.k.measured_gemm_rates or self.k.measured_allreduce else None)

    @property
    def _bw(self) -> float:
        """Aggregate HBM bandwidth of a copy, bytes/s."""
        return self.shape.instance.bw_per_accel_gbps * 1e9 * self.shape.tensor_parallel

    @property
    def _flops(self) -> float:
        """Aggregate matmul FLOP/s of a copy (before MFU; weight-only FP8 kernels slower)."""
        s = self.shape
        return (matmul_flops_per_accel(s.instance, s.quantization, self.k) * s.tensor_parallel
                / weight_only_slowdown(s.instance, s.quantization, self.k))

    @property
    def _quantized(self) -> bool:
        """Weight-only 4-bit kernels (GPTQ/AWQ): dequantize inside the matmul."""
        return self.shape.quantization in ("gptq", "awq")

    def _all_experts(self, tokens: int) -> bool:
        """Whether a pass of `tokens` rows computes every expert (TGI 1.x's dense MoE path)."""
        return self.shape.model.n_experts > 1 and tokens <= self.generation.moe_dense_max_tokens

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes one pass over `tokens` rows reads: MoE touches more experts as the rows grow."""
        m, q = self.shape.model, self.shape.quantization
        total = m.weight_bytes(q)
        if m.n_experts <= 1 or self._all_experts(tokens):
            return total
        active = total * m.active_b / m.params_b
        share = m.experts_per_token / m.n_experts
        # Probability an expert is hit by at least one of the rows, beyond the always-active share.
        touched = 1 - (1 - share) ** max(1, tokens)
        return active + (total - active) * (touched - share) / (1 - share)

    def _params_computed(self, tokens: int) -> float:
        """Parameters each row multiplies through (every expert on the dense MoE path), in billions, the routed
        experts' weighted by how much slower fused-MoE kernels multiply than dense ones."""
        m = self.shape.model
        if self._all_experts(tokens):
            return m.params_b
        return m.active_b + routed_active_b(m) * (self.k.moe_routing_skew / self.k.moe_compute_efficiency - 1)

    def _allreduce_s(self, rows: int) -> float:
        """The all-reduces of one forward pass over `rows` token rows (one per layer with parallel attention);
        over NVLink the pass also pays a cost per doubling of TP however deep the model."""
        tp = self.shape.tensor_parallel
        if tp <= 1:
            return 0.0
        m, k = self.shape.model, self.k
        size = rows * m.hidden_size * _ACT_BYTES
        per_layer = 1 if m.parallel_attention else 2
        measured = measured_allreduce(self.shape.instance, tp, k)
        if measured is not None:  # one all-reduce's measured latency and bus bandwidth, nothing per pass
            latency_s, bus_bps = measured
            return per_layer * m.n_layers * (latency_s + size * 2 * (tp - 1) / tp / bus_bps)
        if self.shape.instance.interconnect == "pcie":
            # No peer-to-peer on these PCIe boxes: the ring goes through host memory, whose bus carries
            # every GPU's 2(N-1)/N share at once, so the bus sees 2(N-1) × size per all-reduce.
            latency = k.pcie_allreduce_latency_s
            transfer = size * 2 * (tp - 1) / (k.pcie_host_bw_gbps * 1e9)
            per_pass = 0.0
        else:
            latency = k.nvlink_allreduce_latency_s
            transfer = size * 2 * (tp - 1) / tp / (k.nvlink_bw_gbps * 1e9)
            per_pass = k.nvlink_pass_overhead_s
        return per_layer * m.n_layers * (latency * math.log2(tp) + transfer) + per_pass * math.log2(tp)

    def _fixed_s(self) -> float:
        """Per forward pass, whatever the batch: launches, scheduler, sampling set-up, TP latency."""
        s, k = self.shape, self.k
        # TGI's exllama 4-bit kernel cannot split act-order rows over shards: with TP > 1 the
        # row-parallel layers fall back to a launch-heavy Triton kernel.
        triton = k.quant_sharded_layer_overhead_s if self._quantized and s.tensor_parallel > 1 else 0.0
        per_layer = triton + k.layer_overhead_s + (k.moe_layer_overhead_s if s.model.n_experts > 1 else 0.0)
        return k.step_overhead_s + per_layer * s.model.n_layers + self._allreduce_s(0)

    def _weights_s(self, tokens: int) -> float:
        """Streaming the weights once: 4-bit and FP8 kernels reach less of the bandwidth."""
        return self.weight_bytes_read(tokens) / (self._bw * weight_read_efficiency(self.shape.quantization, self.k))

    def _kv_read_s(self, batch: int, context_tokens: int) -> float:
        """Attention over the KV cache during one decode step.

        Paged attention runs one thread block per query head and sequence, each streaming its sequence's
        context alone: a lone long sequence leaves most SMs idle, and sharding it does not speed that block
        up (JumpStart 3840-token rows: the same extra seconds on 1, 4 and 8 A10Gs). So a step pays a latency
        floor — one sequence's context as if `kv_latency_blocks` blocks shared the bandwidth — plus the KV
        bytes this accelerator holds (its own KV heads, replicated where there are fewer than shards).
        """
        s, m, k = self.shape, self.shape.model, self.k
        kv_heads = math.ceil(m.cached_kv_heads / s.tensor_parallel)
        per_token_head = m.kv_bytes_per_token(_ACT_BYTES) / m.cached_kv_heads  # one head's K and V (or latent), all layers
        floor = context_tokens / max(1, batch) * k.kv_latency_blocks
        held = context_tokens * kv_heads
        return (floor + held) * per_token_head / (s.instance.bw_per_accel_gbps * 1e9 * k.kv_bandwidth_efficiency)

    def decode_floor_s(self) -> float:
        """The batch-independent part of a decode step: fixed cost and one read of the weights."""
        return self._fixed_s() + self._weights_s(1)

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """One decode step for `batch` running sequences holding `context_tokens` KV tokens in all."""
        if batch <= 0:
            return 0.0
        s, k = self.shape, self.k
        weights = self._weights_s(batch)
        compute = batch * 2 * self._params_computed(batch) * 1e9 / (self._flops * k.decode_mfu)
        # Weight reads and matmuls overlap: the step is bound by the slower of the two.
        matmul = max(weights, compute)
        per_seq = batch * k.seq_overhead_s
        comm = self._allreduce_s(batch) - self._allreduce_s(0)
        floor = self.decode_floor_s()
        load = self._fixed_s() + matmul + self._kv_read_s(batch, context_tokens) + per_seq + comm - floor
        cal = s.calibration
        if cal is None:
            return floor + load
        return cal.decode_floor * floor + cal.decode_per_sequence * load

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        """One prefill pass over `tokens` prompt tokens in all, split over `sequences` prompts (compute bound; pauses
        decoding of the running batch); `prior_pairs`: query-key pairs of chunks with earlier tokens of their prompt
        already in the KV cache (a chunk of n after s: n·s), which attention pays too."""
        if tokens <= 0:
            return 0.0
        m, k = self.shape.model, self.k
        seqs = max(1, sequences)
        linear = tokens * 2 * self._params_computed(tokens) * 1e9
        # Attention scores and values per prompt: 2 matmuls of len² × heads × head_dim per layer
        # (× 2 FLOPs, ÷ 2 for the causal mask); a chunk's queries also meet the tokens before it (× 4 per pair).
        per_len = tokens / seqs
        attention = (seqs * 2 * per_len * per_len + 4 * prior_pairs) * m.n_heads * m.head_dim * m.n_layers
        mfu = k.prefill_mfu / (k.quant_prefill_slowdown if self._quantized else 1.0)
        compute = (linear + attention) / (self._flops * mfu)
        weights = self._weights_s(tokens)
        entering = k.prompt_overhead_s * seqs
        total = self._fixed_s() + max(compute, weights) + self._allreduce_s(tokens) - self._allreduce_s(0) + entering
        cal = self.shape.calibration
        return total if cal is None else cal.prefill * total

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        """One forward pass over `prompt_tokens` of `prompts` prompt chunks (`prior_pairs`: see prefill_s) and
        `batch` decoding sequences holding `context_tokens` KV tokens (vLLM's steps): the pass pays the prompts'
        prefill and what the decodes add to a step beyond its floor, as the fixed cost and the weight reads are
        shared."""
        if prompt_tokens <= 0:
            return self.decode_step_s(batch, context_tokens)
        if batch <= 0:
            return self.prefill_s(prompt_tokens, prompts, prior_pairs)
        floor = self.decode_floor_s()
        cal = self.shape.calibration
        return self.prefill_s(prompt_tokens, prompts, prior_pairs) + self.decode_step_s(batch, context_tokens) - (
            floor if cal is None else cal.decode_floor * floor)

"""Step-time model: how long one decode step and one prefill pass take on a copy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sagellm.planner import constants as k
from sagellm.planner.shape import Shape

_ACT_BYTES = 2.0  # activations travel between shards in 16-bit


@dataclass(frozen=True)
class StepModel:
    """Decode-step and prefill times of one model copy, from bandwidth, FLOPS, links and fitted overheads."""

    shape: Shape

    @property
    def _bw(self) -> float:
        """Aggregate HBM bandwidth of a copy, bytes/s."""
        return self.shape.instance.bw_per_accel_gbps * 1e9 * self.shape.tp_degree

    @property
    def _flops(self) -> float:
        """Aggregate dense FP16 FLOP/s of a copy."""
        return self.shape.instance.tflops_per_accel * 1e12 * self.shape.tp_degree

    @property
    def _quantized(self) -> bool:
        """Weight-only 4-bit kernels (GPTQ/AWQ): dequantize inside the matmul."""
        return self.shape.quantization in ("gptq", "awq")

    def weight_bytes_read(self, batch: int) -> float:
        """Weight bytes one step reads: MoE touches more experts as the batch grows."""
        m, q = self.shape.model, self.shape.quantization
        total = m.weight_bytes(q)
        if m.n_experts <= 1:
            return total
        active = total * m.active_b / m.params_b
        share = m.experts_per_token / m.n_experts
        # Probability an expert is hit by at least one of `batch` tokens, beyond the always-active share.
        touched = 1 - (1 - share) ** max(1, batch)
        return active + (total - active) * (touched - share) / (1 - share)

    def _allreduce_s(self, rows: int) -> float:
        """The two all-reduces per layer of one forward pass over `rows` token rows."""
        tp = self.shape.tp_degree
        if tp <= 1:
            return 0.0
        m = self.shape.model
        size = rows * m.hidden_size * _ACT_BYTES
        if self.shape.instance.interconnect == "pcie":
            # No peer-to-peer on these PCIe boxes: the ring goes through host memory, whose bus carries
            # every GPU's 2(N-1)/N share at once, so the bus sees 2(N-1) × size per all-reduce.
            latency = k.PCIE_ALLREDUCE_LATENCY_S
            transfer = size * 2 * (tp - 1) / (k.PCIE_HOST_BW_GBPS * 1e9)
        else:
            latency = k.NVLINK_ALLREDUCE_LATENCY_S
            transfer = size * 2 * (tp - 1) / tp / (k.NVLINK_BW_GBPS * 1e9)
        return 2 * m.n_layers * (latency * math.log2(tp) + transfer)

    def _fixed_s(self) -> float:
        """Per forward pass, whatever the batch: launches, scheduler, sampling set-up, TP latency."""
        s = self.shape
        # TGI's exllama 4-bit kernel cannot split act-order rows over shards: with TP > 1 the
        # row-parallel layers fall back to a launch-heavy Triton kernel.
        triton = k.QUANT_SHARDED_LAYER_OVERHEAD_S if self._quantized and s.tp_degree > 1 else 0.0
        return k.STEP_OVERHEAD_S + triton * s.model.n_layers + self._allreduce_s(0)

    def _weights_s(self, batch: int) -> float:
        """Streaming the weights once: 4-bit kernels dequantise on the fly and reach less of the bandwidth."""
        eff = k.BANDWIDTH_EFFICIENCY * (k.QUANT_BANDWIDTH_EFFICIENCY if self._quantized else 1.0)
        return self.weight_bytes_read(batch) / (self._bw * eff)

    def _kv_read_s(self, batch: int, context_tokens: int) -> float:
        """Attention over the KV cache during one decode step.

        Paged attention of this era parallelises over heads × sequences and barely speeds up with more
        shards (JumpStart 3840-token rows: same extra seconds on 1, 4 and 8 A10Gs), so it reads at one
        accelerator's bandwidth (a fitted TP exponent came out at 0.00–0.02). A lone long sequence
        leaves most SMs idle: the efficiency climbs with the batch, half its peak at KV_HALF_BATCH.
        """
        s = self.shape
        bw = s.instance.bw_per_accel_gbps * 1e9
        eff = k.KV_BANDWIDTH_EFFICIENCY * batch / (batch + k.KV_HALF_BATCH)
        return context_tokens * s.kv_bytes_per_token / (bw * eff)

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """One decode step for `batch` running sequences holding `context_tokens` KV tokens in all."""
        if batch <= 0:
            return 0.0
        s = self.shape
        weights = self._weights_s(batch)
        compute = batch * 2 * s.model.active_b * 1e9 / (self._flops * k.DECODE_MFU)
        # Weight reads and matmuls overlap: the step is bound by the slower of the two.
        matmul = max(weights, compute)
        per_seq = batch * k.SEQ_OVERHEAD_S
        comm = self._allreduce_s(batch) - self._allreduce_s(0)
        return self._fixed_s() + matmul + self._kv_read_s(batch, context_tokens) + per_seq + comm

    def prefill_s(self, tokens: int, sequences: int = 1) -> float:
        """One prefill pass over `tokens` prompt tokens in all, split over `sequences` prompts
        (compute bound; pauses decoding of the running batch)."""
        if tokens <= 0:
            return 0.0
        m = self.shape.model
        seqs = max(1, sequences)
        linear = tokens * 2 * m.active_b * 1e9
        # Attention scores and values per prompt: 2 matmuls of len² × heads × head_dim per layer
        # (× 2 FLOPs, ÷ 2 for the causal mask).
        per_len = tokens / seqs
        attention = seqs * 2 * per_len * per_len * m.n_heads * m.head_dim * m.n_layers
        mfu = k.PREFILL_MFU / (k.QUANT_PREFILL_SLOWDOWN if self._quantized else 1.0)
        compute = (linear + attention) / (self._flops * mfu)
        weights = self._weights_s(tokens)
        return self._fixed_s() + max(compute, weights) + self._allreduce_s(tokens) \
            - self._allreduce_s(0)

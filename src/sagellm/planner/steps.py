"""Step-time model: how long one decode step and one prefill pass take on a copy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sagellm.planner import constants as k
from sagellm.planner.shape import Shape


@dataclass(frozen=True)
class StepModel:
    """Decode-step and prefill times of one model copy, from bandwidth, FLOPS and fitted overheads."""

    shape: Shape

    @property
    def _bw(self) -> float:
        """Aggregate HBM bandwidth of a copy, bytes/s."""
        return self.shape.instance.bw_per_accel_gbps * 1e9 * self.shape.tp_degree

    @property
    def _flops(self) -> float:
        """Aggregate dense FP16 FLOP/s of a copy."""
        return self.shape.instance.tflops_per_accel * 1e12 * self.shape.tp_degree

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

    def _fixed_s(self) -> float:
        return k.STEP_OVERHEAD_S + k.TP_OVERHEAD_S_PER_DOUBLING * math.log2(self.shape.tp_degree)

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """One decode step for `batch` running sequences holding `context_tokens` KV tokens in all."""
        if batch <= 0:
            return 0.0
        s = self.shape
        weights = self.weight_bytes_read(batch) / (self._bw * k.BANDWIDTH_EFFICIENCY)
        kv = context_tokens * s.kv_bytes_per_token / (self._bw * k.KV_BANDWIDTH_EFFICIENCY)
        compute = batch * 2 * s.model.active_b * 1e9 / (self._flops * k.DECODE_MFU)
        per_seq = batch * k.SEQ_OVERHEAD_S
        if s.instance.interconnect == "pcie" and s.tp_degree > 1:
            per_seq += batch * k.PCIE_ALLREDUCE_S_PER_SEQ * math.log2(s.tp_degree)
        # Weight reads and matmuls overlap: the step is bound by the slower of the two.
        return self._fixed_s() + max(weights, compute) + kv + per_seq

    def prefill_s(self, tokens: int) -> float:
        """One prefill pass over `tokens` prompt tokens (compute bound; pauses decoding)."""
        if tokens <= 0:
            return 0.0
        s = self.shape
        linear = tokens * 2 * s.model.active_b * 1e9
        # Attention scores and values: 2 matmuls of tokens² × hidden per layer (causal: half).
        attention = 2 * tokens * tokens * s.model.n_heads * s.model.head_dim * s.model.n_layers
        compute = (linear + attention) / (self._flops * k.PREFILL_MFU)
        weights = self.weight_bytes_read(tokens) / (self._bw * k.BANDWIDTH_EFFICIENCY)
        return k.PREFILL_OVERHEAD_S + self._fixed_s() + max(compute, weights)

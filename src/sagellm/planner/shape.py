"""What the planner reasons about: a serving shape and a payload (it knows nothing of profiles)."""

from __future__ import annotations

from dataclasses import dataclass

from sagellm.catalog import BYTES_PER_PARAM, Instance, Model
from sagellm.engines import generation
from sagellm.engines.tgi import DEFAULT_PREFILL_TOKENS
from sagellm.planner import constants as k


@dataclass(frozen=True)
class Payload:
    """The expected request: prompt tokens in, generated tokens out."""

    input_tokens: int = 256
    output_tokens: int = 256

    @property
    def total_tokens(self) -> int:
        """Tokens one sequence holds in the KV cache at its end."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Calibration:
    """Multipliers on the step-time terms, fitted from measured runs of one model × instance × container."""

    decode_floor: float = 1.0  # × the batch-independent part of a decode step (fixed cost, weight reads)
    decode_per_sequence: float = 1.0  # × what the running sequences add (KV reads, per-sequence work)
    prefill: float = 1.0  # × a prefill pass
    source: str = ""  # where it came from, for the "calibrated" line

    def describe(self) -> str:
        """One line: the three factors and where they came from."""
        text = (f"decode floor ×{self.decode_floor:.2f} · per sequence ×{self.decode_per_sequence:.2f} · "
                f"prefill ×{self.prefill:.2f}")
        return f"{text} ({self.source})" if self.source else text


@dataclass(frozen=True)
class Shape:
    """One serving shape: a model on an instance, split into copies of `tensor_parallel` accelerators."""

    model: Model
    instance: Instance
    tensor_parallel: int
    copies: int = 1
    instance_count: int = 1
    quantization: str = "none"
    max_concurrent_requests: int | None = None  # per copy; None = no admission limit
    max_batch_total_tokens: int | None = None  # per copy; None = what memory allows (TGI ≥ 1.4, vLLM)
    max_batch_size: int | None = None  # running sequences per copy; None = the KV budget decides
    max_batch_prefill_tokens: int | None = None  # prompt tokens per prefill pass; None = TGI 3's default
    generation: str = k.DEFAULT_GENERATION  # server generation (sagellm.engines): which constants, what physics
    calibration: Calibration | None = None  # measured correction for this model × instance × container

    def __post_init__(self) -> None:
        generation(self.generation)  # an unknown generation is a bug in the caller: fail here, not later

    @property
    def total_copies(self) -> int:
        """Model copies behind the endpoint (per instance × instances)."""
        return self.copies * self.instance_count

    @property
    def weight_gb_per_gpu(self) -> float:
        """Weights each accelerator of a copy holds."""
        return self.model.weight_bytes(self.quantization) / self.tensor_parallel / 1e9

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes per token (KV stays in 16-bit under weight-only quantization)."""
        return self.model.kv_bytes_per_token(2.0)

    @property
    def usable_gb_per_gpu(self) -> float:
        """Accelerator memory for weights and KV cache, by the engine's own rule (vLLM's gpu_memory_utilization,
        SGLang's mem_fraction_static), else what the driver reports less the reserve measured on TGI."""
        rule = generation(self.generation).memory_for_model_gb
        if rule is None:
            return self.instance.device_mem_gb - k.RESERVED_GB_PER_GPU
        return rule(self.instance.device_mem_mib, self.tensor_parallel)

    @property
    def memory_shortfall_gb(self) -> float:
        """GB per accelerator missing for the weights alone (0 when they fit)."""
        return max(0.0, self.weight_gb_per_gpu - self.usable_gb_per_gpu)

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens one copy can hold: free memory over all its GPUs ÷ bytes per token (method.md §4)."""
        return self.kv_tokens_in(self.usable_gb_per_gpu - self.weight_gb_per_gpu)

    def kv_tokens_in(self, free_gb_per_gpu: float) -> int:
        """KV tokens a copy holds with this much memory free on each GPU: where TP exceeds the KV heads (a server
        that replicates them), each GPU holds one head of every token; MLA's latent is held whole by every GPU. (A
        single KV head, MQA, keeps the sharded sum, as calibrated on TGI.)"""
        kv_heads = self.model.cached_kv_heads
        if kv_heads < self.tensor_parallel and (kv_heads > 1 or self.model.compressed_kv):
            return max(0, int(free_gb_per_gpu * 1e9 / (self.kv_bytes_per_token / kv_heads)))
        return max(0, int(free_gb_per_gpu * self.tensor_parallel * 1e9 / self.kv_bytes_per_token))

    @property
    def batch_token_budget(self) -> int:
        """Token budget of the running batch: the configured one, never above what memory allows."""
        if self.max_batch_total_tokens is None:
            return self.kv_capacity_tokens
        return min(self.max_batch_total_tokens, self.kv_capacity_tokens)

    @property
    def prefill_budget(self) -> int:
        """Prompt tokens one prefill pass takes: the configured budget, else TGI 3's launcher default
        (4096 within the context)."""
        return self.max_batch_prefill_tokens or min(DEFAULT_PREFILL_TOKENS, self.model.max_context)

    def max_sequences(self, payload: Payload) -> int:
        """Concurrent sequences one copy can run: budget ÷ tokens reserved per sequence, capped by admission
        and by the batch-size limit (beyond either, requests wait in the server's queue)."""
        seqs = self.batch_token_budget // max(1, payload.total_tokens)
        for cap in (self.max_concurrent_requests, self.max_batch_size):
            if cap is not None:
                seqs = min(seqs, cap)
        return seqs


def bytes_per_param(quantization: str) -> float:
    """Bytes per weight at a quantization (re-exported for error messages)."""
    return BYTES_PER_PARAM[quantization]

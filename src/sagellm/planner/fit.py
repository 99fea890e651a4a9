"""Where a model fits: the tensor-parallel degrees a server can shard it at, and whether memory holds it."""

from __future__ import annotations

from sagellm.catalog import Instance, Model
from sagellm.planner.shape import Payload, Shape


def valid_tp(model: Model, gpus: int) -> list[int]:
    """TP degrees the server can shard this model at on this instance (divisors of GPUs and heads)."""
    out = []
    for tp in range(1, gpus + 1):
        if gpus % tp or model.n_heads % tp:
            continue
        if model.n_kv_heads > 1 and (tp > model.n_kv_heads or model.n_kv_heads % tp):
            continue
        out.append(tp)
    return out


def fits(model: Model, instance: Instance, tp: int, quant: str, payload: Payload) -> bool:
    """Whether the weights fit at this TP and the KV cache still holds one sequence of the payload."""
    shape = Shape(model, instance, tp, quantization=quant)
    return shape.memory_shortfall_gb == 0 and shape.max_sequences(payload) >= 1


def fitting_tps(model: Model, instance: Instance, quant: str, payload: Payload) -> list[int]:
    """The TP degrees at which the model fits on the instance (empty: it does not fit)."""
    return [tp for tp in valid_tp(model, instance.n_accelerators) if fits(model, instance, tp, quant, payload)]

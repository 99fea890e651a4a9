"""Where a model fits: the tensor-parallel degrees a server can shard it at, and whether memory holds it."""

from __future__ import annotations

from sagellm.catalog import Instance, Model
from sagellm.engines import generation
from sagellm.planner import constants as k
from sagellm.planner.shape import Payload, Shape


def valid_tp(model: Model, gpus: int, gen: str = k.DEFAULT_GENERATION) -> list[int]:
    """TP degrees the server (its generation `gen`) can shard this model at on this instance: divisors of the GPUs
    and the attention heads, and of the KV heads, or their multiples where the server replicates KV heads."""
    replicates = generation(gen).replicates_kv_heads
    out = []
    for tp in range(1, gpus + 1):
        if gpus % tp or model.n_heads % tp:
            continue
        kv = model.n_kv_heads
        if kv > 1 and kv % tp and not (replicates and tp % kv == 0):
            continue
        out.append(tp)
    return out


def fits(model: Model, instance: Instance, tp: int, quant: str, payload: Payload,
         gen: str = k.DEFAULT_GENERATION) -> bool:
    """Whether the weights fit at this TP and the KV cache still holds one sequence of the payload."""
    shape = Shape(model, instance, tp, quantization=quant, generation=gen)
    return shape.memory_shortfall_gb == 0 and shape.max_sequences(payload) >= 1


def fitting_tps(model: Model, instance: Instance, quant: str, payload: Payload,
                gen: str = k.DEFAULT_GENERATION) -> list[int]:
    """The TP degrees at which the model fits on the instance (empty: it does not fit)."""
    return [tp for tp in valid_tp(model, instance.n_accelerators, gen)
            if fits(model, instance, tp, quant, payload, gen)]

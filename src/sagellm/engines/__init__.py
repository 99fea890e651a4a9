"""Serving engines, one module each (tgi, lmi, tgi_neuron, vllm, sglang, vllm_neuronx): pinned images, the variables each
version reads, its environment, how it batches and admits, its wire format; and the one lookup from a container
to them.

Engines take plain settings and return environments and behaviour: no plan or profile type comes in.
"""

from __future__ import annotations

import re

from sagellm.engines import images, lmi, sglang, tgi, vllm, vllm_neuronx
from sagellm.engines.engine import (
    CompiledShape,
    Engine,
    ErrorReply,
    Generation,
    Limits,
    Settings,
    Token,
    Variable,
)
from sagellm.engines.lmi import LMI
from sagellm.engines.sglang import SGLANG
from sagellm.engines.tgi import TGI
from sagellm.engines.tgi_neuron import TGI_NEURON
from sagellm.engines.vllm import VLLM
from sagellm.engines.vllm_neuronx import VLLM_NEURONX
from sagellm.errors import InputError

# By the profile's container.kind: every kind's engine (its GPU one; vllm-neuronx runs on Inferentia only), and
# the one on Inferentia where the kind has an image there. TGI stays the Inferentia default (docs/containers.md).
ENGINES: dict[str, Engine] = {"tgi": TGI, "lmi": LMI, "vllm": VLLM, "sglang": SGLANG, "vllm-neuronx": VLLM_NEURONX}
NEURON_ENGINES: dict[str, Engine] = {"tgi": TGI_NEURON, "vllm-neuronx": VLLM_NEURONX}
# Every generation the planner knows, the measured one (TGI 1.x) included.
GENERATIONS: dict[str, Generation] = {g.name: g for g in (tgi.TGI_1, tgi.TGI_3, lmi.GENERATION, vllm.GENERATION,
                                                             sglang.GENERATION, vllm_neuronx.GENERATION)}

__all__ = [
    "ENGINES", "GENERATIONS", "NEURON_ENGINES", "CompiledShape", "Engine", "ErrorReply", "Generation", "Limits", "Settings",
    "Token", "Variable", "compiling_engine", "engine_for", "engine_option", "generation", "generation_of", "kind_of_image", "kinds_on", "variable_names",
]


def engine_for(kind: str, *, neuron: bool = False) -> Engine:
    """The engine of a container kind on GPUs, or on Inferentia (InputError where it has no image there)."""
    engines = NEURON_ENGINES if neuron else {k: e for k, e in ENGINES.items() if e.gpu}
    if kind not in engines:
        where = "on Inferentia" if neuron else "on GPUs"
        raise InputError(f"no {kind!r} engine {where} (known: {', '.join(engines)})")
    return engines[kind]


def compiling_engine(kind: str, instance_type: str, *, neuron: bool, where_kind: str,
                     errors: list[str]) -> Engine | None:
    """The engine of `kind` that serves compiled shapes on an Inferentia instance (None on a GPU); an error where the
    kind has no image for the instance type."""
    if not neuron:
        if not ENGINES[kind].gpu:
            errors.append(f"{where_kind}: {kind} runs on Inferentia only, not on {instance_type}; "
                          "use an ml.inf2 instance type or another engine")
        return None
    if kind not in NEURON_ENGINES:
        there = " or ".join(f"{{kind: {k}}} ({e.label})" for k, e in NEURON_ENGINES.items())
        errors.append(f"{where_kind}: {kind} has no image for {instance_type} (Inferentia); "
                      f"use container: {there} or a GPU instance type")
        return None
    return NEURON_ENGINES[kind]


def engine_option(kind: str | None, flag: str = "--engine") -> str | None:
    """A container kind given on the command line or as CDK context, checked (InputError naming the known ones)."""
    if kind is not None and kind not in ENGINES:
        raise InputError(f"{flag}: unknown engine {kind!r} (known: {', '.join(ENGINES)})")
    return kind


def kinds_on(kinds: tuple[str, ...], *, neuron: bool) -> tuple[str, ...]:
    """Those of `kinds` that have an image on an instance type: a GPU one, or Inferentia."""
    return tuple(k for k in kinds if (k in NEURON_ENGINES if neuron else k in ENGINES and ENGINES[k].gpu))


def kind_of_image(image: str) -> str | None:
    """The container kind whose image tables hold an image (`repository:tag` or `repository@digest`, registry left
    out, as a run records it); None: no registered engine's."""
    repository = re.split(r"[:@]", image, maxsplit=1)[0]
    for engines in (ENGINES, NEURON_ENGINES):
        for kind, engine in engines.items():
            if any(entry["repository"] == repository for entry in images.table(engine.framework)["versions"].values()):
                return kind
    return None


def variable_names(setting: str) -> tuple[str, ...]:
    """Every registered engine's environment names for a Settings field (`tensor_parallel`: SM_NUM_GPUS, …)."""
    return tuple(dict.fromkeys(name for engine in ENGINES.values() for v in engine.variables if v.sets == setting
                               for name in v.names))


def generation(name: str) -> Generation:
    """A generation by name (ValueError naming the known ones)."""
    try:
        return GENERATIONS[name]
    except KeyError:
        raise ValueError(f"unknown server generation {name!r} (known: {', '.join(GENERATIONS)})") from None


def generation_of(kind: str, version: str | None = None) -> str:
    """The generation of a pinned container: its kind and image version (None: the newest, as TGI 3)."""
    return ENGINES[kind].generation(version).name

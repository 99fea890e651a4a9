"""Server generations: what each one does differently, and which measured constants its predictions use.

A prediction is only as good as the measurements its constants were fitted on. Those come from TGI 1.x;
TGI 2–3 (CUDA graphs, fused MoE kernels, its own KV sizing) and LMI (vLLM) have none of their own yet, so
their predictions reuse TGI 1.x's constants (an extrapolation, and `plan` says so) until `sagellm calibrate`
corrects them from a bench run. Behaviour that is known from the servers' source goes here as physics.
"""

from __future__ import annotations

from dataclasses import dataclass

from sagellm.planner import constants as k


@dataclass(frozen=True)
class Generation:
    """One server generation: its label, the constants it uses, and what it does differently."""

    name: str  # "tgi-1"
    label: str  # "TGI 1.x"
    constants_from: str  # the generation whose fitted constants it uses (itself when it has measurements)
    # Passes of up to this many token rows compute EVERY expert of a mixture-of-experts layer (0: none).
    # TGI 1.x's Mixtral (flash_mixtral_modeling.py, v1.3.4–v1.4.5) runs `dense_forward` — a bmm over all
    # experts — unless more than 256 tokens are in the pass; TGI 2.0+ and vLLM use a fused MoE kernel that
    # reads only the experts the tokens were routed to.
    moe_dense_max_tokens: int = 0
    # Router: prompts wait until floor(ratio × running) of them are queued, or `max_waiting_tokens` decode
    # steps have passed since the last prefill (TGI's WAITING_SERVED_RATIO / MAX_WAITING_TOKENS). TGI's
    # launcher defaults the ratio to 1.2 up to v1.4 (whole waves in a closed loop). TGI 3 chunks prefills
    # by default for flash-attention models and then ignores both: waiting prompts join the batch at every
    # step (backends/v3/src/backend.rs, v3.3.6), as vLLM does (0). Only a profile that turns chunking off
    # (PREFILL_CHUNKING=0, beside MAX_BATCH_SIZE) gets TGI 3's ratio of 0.3, which the planner does not model.
    waiting_served_ratio: float = 0.3
    max_waiting_tokens: int = 20

    @property
    def calibrated(self) -> bool:
        """Whether this generation's constants were fitted on measurements of this generation."""
        return self.constants_from == self.name


GENERATIONS: dict[str, Generation] = {
    g.name: g for g in (
        Generation("tgi-1", "TGI 1.x", "tgi-1", moe_dense_max_tokens=256, waiting_served_ratio=1.2),
        Generation("tgi-3", "TGI 2.x–3.x", "tgi-1", waiting_served_ratio=0.0),  # prefill chunking
        Generation("lmi", "LMI (vLLM)", "tgi-1", waiting_served_ratio=0.0),
    )
}
# What each measured generation's constants were fitted on (the `plan` output names it).
MEASURED: dict[str, tuple[k.StepConstants, str]] = {
    "tgi-1": (k.TGI_1, "113 published SageMaker measurements (AWS JumpStart, Hugging Face TGI 1.0.3)"),
}
DEFAULT_GENERATION = "tgi-1"


def generation(name: str) -> Generation:
    """A generation by name (ValueError naming the known ones)."""
    try:
        return GENERATIONS[name]
    except KeyError:
        raise ValueError(f"unknown server generation {name!r} (known: {', '.join(GENERATIONS)})") from None


def constants_of(name: str) -> k.StepConstants:
    """The step-time constants a generation's predictions use."""
    return MEASURED[generation(name).constants_from][0]


def generation_of(container: str, version: str | None = None) -> str:
    """The generation of a pinned container: kind ('tgi', 'tgi-neuron', 'lmi') and image version.

    An unpinned TGI (`None`: the newest in the SageMaker SDK's tables) is TGI 3.
    """
    if container == "lmi":
        return "lmi"
    major = (version or "3").split(".")[0]
    return "tgi-1" if major in ("0", "1") else "tgi-3"

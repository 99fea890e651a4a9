"""A shape's measured correction: multipliers on the step-time terms (fitted in `calibration`)."""

from __future__ import annotations

from dataclasses import dataclass


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

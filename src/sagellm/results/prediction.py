"""Where a measurement departs from its prediction by more than the report lets pass without a word."""

from __future__ import annotations

from dataclasses import dataclass

from sagellm.results.schema import Level, Run

FLAG = 0.25  # a prediction this far off a measurement is flagged beside it, with what it assumed


@dataclass(frozen=True)
class Departure:
    """One metric of one level whose measurement is more than FLAG off its prediction."""

    load: str  # the level's name
    metric: str  # as the report's tables name it
    measured: float
    predicted: float

    @property
    def off(self) -> float:
        """Measured relative to predicted: +0.73 is 73 % above the prediction."""
        return self.measured / self.predicted - 1

    def describe(self) -> str:
        return (f"{self.metric} at {self.load}: {self.measured:,.4g} measured vs {self.predicted:,.4g} predicted "
                f"({self.off:+.0%})")


def _pairs(level: Level) -> list[tuple[str, float | None, float]]:
    """(metric, measured, predicted) for every metric the report shows a prediction beside."""
    p = level.predicted
    assert p is not None
    return [("tokens/s", level.throughput_tokens_per_s, p.throughput_tokens_per_s),
            ("requests/s", level.requests_per_s, p.requests_per_s),
            ("ms/token p50", level.latency_ms_per_token.p50, p.ms_per_token),
            ("ms/token p90", level.latency_ms_per_token.p90, p.ms_per_token_p90 or 0.0),
            ("TTFT p50 ms", level.ttft_ms.p50, p.ttft_ms),
            ("TTFT p90 ms", level.ttft_ms.p90, p.ttft_ms_p90 or 0.0),
            ("ITL p50 ms", level.itl_ms.p50, p.itl_ms),
            ("e2e p50 s", level.e2e_s.p50, p.e2e_s)]


def departures(level: Level) -> list[Departure]:
    """The metrics of a level more than FLAG off their prediction (none without one, and none where the target
    runs the predicted engine: the emulator agrees by construction)."""
    if level.predicted is None or level.predicted.same_engine or level.ok == 0:
        return []
    return [Departure(level.load, metric, measured, predicted) for metric, measured, predicted in _pairs(level)
            if measured is not None and predicted > 0 and abs(measured / predicted - 1) > FLAG]


def flag(level: Level, metric: str) -> str:
    """The mark beside a predicted figure that is more than FLAG off (empty when it is not)."""
    off = next((d.off for d in departures(level) if d.metric == metric), None)
    return "" if off is None else f" ⚠ {off:+.0%}"


def assumed(run: Run) -> str:
    """What the prediction assumed: the instance type and count and the engine (container) it was made for."""
    where = f"{run.instance_type} × {run.instance_count}" if run.instance_type else "no instance"
    return f"{where}, {run.container or 'the profile’s engine'}"

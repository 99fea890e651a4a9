"""What is read off a measured sweep: usable levels, the knee, the max-throughput point, the SLO pick, cost."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from sagellm.planner.curve import knee_index, usd_per_1m_tokens
from sagellm.results.schema import (
    Cost,
    Failure,
    GateVerdict,
    Level,
    LevelSummary,
    Pick,
    RampRecord,
    Results,
    Run,
    Slo,
    SweepRecord,
    Teardown,
)

# A level is "usable" (may be the knee, the max-throughput point or the best under an SLO) when none of
# its requests hit the invocation timeout and at most this fraction of them failed: the same fraction that
# stops the sweep (load.StopRule), so the last level a sweep keeps going past is usable. Requests refused
# for want of a copy do not count: they are a scale-to-zero endpoint's cold start, reported as such
# (ramp.cold_start_s), not what the endpoint serves once a copy is up.
MAX_ERROR_RATE = 0.05

KNEE_DEFINITION = "maximum of throughput ÷ p50 ms/token among usable levels"


def max_definition(max_error_rate: float = MAX_ERROR_RATE) -> str:
    """How the max-throughput point was picked, for the report."""
    return f"highest throughput among levels with no timeouts and error rate ≤ {max_error_rate:.0%}"


L = TypeVar("L", bound=LevelSummary)


def serving_error_rate(level: LevelSummary) -> float:
    """The level's error rate without the requests refused for want of a copy (a cold start's refusals)."""
    refused = level.refused_no_capacity / level.requests if level.requests else 0.0
    return level.error_rate - refused


def is_usable(level: LevelSummary, max_error_rate: float = MAX_ERROR_RATE) -> bool:
    """No timeouts, error rate (a cold start's refusals aside) within the limit, measured, not over-saturated."""
    return (
        getattr(level, "over_saturated", None) is None  # its latencies are of a queue still growing
        and level.errors.get("timeout", 0) == 0
        and serving_error_rate(level) <= max_error_rate
        and level.throughput_tokens_per_s > 0
        and level.latency_ms_per_token.p50 is not None
    )


def _usable_sorted(levels: Sequence[L], max_error_rate: float) -> list[L]:
    return sorted((lv for lv in levels if is_usable(lv, max_error_rate)), key=lambda lv: lv.load_value)


def knee(levels: Sequence[L], *, max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The measured knee: maximum of throughput ÷ p50 ms/token among usable levels (as the planner's)."""
    usable = _usable_sorted(levels, max_error_rate)
    i = knee_index([lv.throughput_tokens_per_s for lv in usable],
                   [lv.latency_ms_per_token.p50 or 0.0 for lv in usable])
    return None if i is None else usable[i]


def _best(levels: list[L], key: Callable[[L], float]) -> L | None:
    # max() keeps the first of equal keys: the lowest load, since the list is sorted.
    return max(levels, key=key, default=None)


def max_throughput(levels: Sequence[L], *, max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The highest-throughput usable level (no timeouts, error rate ≤ max_error_rate)."""
    return _best(_usable_sorted(levels, max_error_rate), lambda lv: lv.throughput_tokens_per_s)


def best_under_slo(levels: Sequence[L], slo_ms_per_token: float, *,
                   max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The highest-throughput usable level whose p50 ms/token is within the SLO."""
    within = [lv for lv in _usable_sorted(levels, max_error_rate)
              if (lv.latency_ms_per_token.p50 or math.inf) <= slo_ms_per_token]
    return _best(within, lambda lv: lv.throughput_tokens_per_s)


def usd_per_h(price_per_instance_h: float | None, instance_count: int) -> float | None:
    """Endpoint $/h = catalog on-demand price × instance count."""
    return None if price_per_instance_h is None else price_per_instance_h * instance_count


def _pick(level: LevelSummary | None, definition: str) -> Pick | None:
    if level is None:
        return None
    return Pick(concurrency=level.concurrency, request_rate=level.request_rate,
                throughput_tokens_per_s=level.throughput_tokens_per_s,
                ms_per_token_p50=level.latency_ms_per_token.p50 or 0.0, definition=definition)


def make_results(run: Run, levels: Sequence[Level], *, usd_per_h: float | None, teardown: Teardown,
                 slo_ms_per_token: float | None = None, stopped_reason: str | None = None,
                 gate: GateVerdict | None = None, max_error_rate: float = MAX_ERROR_RATE, sweep: SweepRecord | None = None,
                 ramp: RampRecord | None = None, failure: Failure | None = None) -> Results:
    """Assemble results: knee, max-throughput point, SLO pick and cost derived from the levels."""
    best = max_throughput(levels, max_error_rate=max_error_rate)
    slo = None
    if slo_ms_per_token is not None:
        slo = Slo(ms_per_token=slo_ms_per_token, best=_pick(
            best_under_slo(levels, slo_ms_per_token, max_error_rate=max_error_rate),
            f"highest throughput with p50 ≤ {slo_ms_per_token:g} ms/token among usable levels"))
    return Results(
        run=run,
        levels=sorted(levels, key=lambda lv: lv.load_value),
        knee=_pick(knee(levels, max_error_rate=max_error_rate), KNEE_DEFINITION),
        max_throughput=_pick(best, max_definition(max_error_rate)),
        slo=slo,
        cost=Cost(usd_per_h=usd_per_h,
                  usd_per_1m_tokens=usd_per_1m_tokens(best.throughput_tokens_per_s, usd_per_h)
                  if best else None,
                  at_concurrency=best.concurrency if best else None,
                  at_request_rate=best.request_rate if best else None),
        teardown=teardown,
        gate=gate,
        stopped_reason=stopped_reason,
        failure=failure,
        ramp=ramp,
        sweep=sweep,
    )


def knee_at_top(results: Results) -> bool:
    """Whether the knee is the highest load measured and nothing else placed it: the sweep never reached
    saturation, so the true knee may lie higher. An adaptive sweep that ended as planned did place it (its
    prediction confirmed at the predicted knee and max, or the knee bracketed, at the admission limit when it is
    the top), even from a single level: one that was cut short (budget, safety net, failure) did not."""
    if results.knee is None or not results.levels:
        return False
    sweep = results.sweep
    if sweep is not None and sweep.method == "adaptive" and results.stopped_reason is None and results.failure is None:
        return False
    return max(results.levels, key=lambda lv: lv.load_value).load == results.knee.load

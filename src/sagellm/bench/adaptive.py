"""The planner-guided sweep: which concurrency to measure next, given the prediction and what was measured.

It starts at the predicted knee and max-throughput concurrency, then follows what it measures. With b the
measured level a pick falls on, a side of b is **closed** when the nearest measured level on that side
lies within 10 % of b in concurrency (at least one step: for b = 5, levels 4 and 6), or b is the end of
the range on that side (1, or the limit: the admission limit, above which every level is refused).

- **Knee** (highest throughput ÷ p50 ms/token among usable levels, as `results.sweep`): bracketed when
  both its sides are closed.
- **Max throughput** (highest throughput among usable levels): in a closed loop throughput does not fall
  as load rises until the endpoint fails (errors, timeouts), so only the side above needs closing. It is
  also closed by a usable level above (no higher throughput there, hence none between), or, below a
  failing level, when the throughput any level between could reach is within 10 % of the max: on the line
  through the level below the max (or zero load) and the max, throughput being concave in load. With
  latency that does not fall as load rises, that line through zero load is Little's law: the 10 % in
  concurrency and the 10 % in throughput are then the same bound.

The sweep is done when the knee and the max are both bracketed. Until then, the next level is on the
first open side of the first pick not bracketed: when b is a predicted level, a probe 10 % out (the
prediction says the pick is here); otherwise, with no measured level on that side, a probe 25 % out (the
curve departed from the prediction: search faster), and with a measured level too far away, the
geometric midpoint of the gap (bisection). Levels that failed bound the search like any other.

`next_level` is a pure function of the plan and the measured levels, so it is tested and simulated
without a server (tests/bench/test_adaptive.py, benchmarks/adaptive_sweep.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sagellm.planner import Point, knee_index

TOLERANCE = 0.10  # a pick is bracketed when its measured neighbours are this close in concurrency
NEAR_STEP = 1.10  # first probe beside a predicted level
FAR_STEP = 1.25  # probe beside a level the prediction did not point at
MAX_LEVELS = 24  # a safety net: a curve that keeps surprising stops here


@dataclass(frozen=True)
class Measured:
    """What the chooser needs of one measured level."""

    concurrency: int
    throughput_tokens_per_s: float
    ms_per_token: float | None  # p50
    usable: bool  # no timeouts, error rate within the limit (results.sweep.is_usable)
    endpoint_minutes: float  # what measuring it cost: wall time × instances

    @property
    def power(self) -> float:
        """Throughput ÷ ms/token: the knee is its maximum."""
        return self.throughput_tokens_per_s / self.ms_per_token if self.ms_per_token else 0.0


@dataclass(frozen=True)
class Plan:
    """Where to start and what bounds the search."""

    knee: int  # predicted knee concurrency
    max: int  # predicted max-throughput concurrency
    limit: int  # highest concurrency the sweep may measure
    required: tuple[int, ...] = ()  # levels measured whatever the curve (thresholds name them)
    budget_minutes: float | None = None  # endpoint-minutes the sweep may spend


@dataclass(frozen=True)
class Next:
    """The chooser's answer: a level to measure and why, or None and why the sweep is done."""

    concurrency: int | None
    reason: str


def plan_from_prediction(predict: Callable[[int], Point], limit: int, *, required: Sequence[int] = (),
                         budget_minutes: float | None = None) -> Plan:
    """The plan from a predicted curve, evaluated at every concurrency on a 2.5 % grid up to `limit`."""
    grid = sorted({max(1, round(1.025 ** i)) for i in range(int(math.log(limit, 1.025)) + 1)} | {limit})
    points = [predict(c) for c in grid]
    usable = [p for p in points if p.within_timeout and not p.rejected]
    if not usable:
        return Plan(1, 1, limit, tuple(required), budget_minutes)
    i = knee_index([p.throughput_tokens_per_s for p in usable], [p.ms_per_token for p in usable])
    knee = usable[i].concurrency if i is not None else 1
    top = max(p.throughput_tokens_per_s for p in usable)
    best = next(p for p in usable if p.throughput_tokens_per_s >= top * (1 - 1e-9))
    return Plan(knee, best.concurrency, limit, tuple(sorted(set(required))), budget_minutes)


def measured_knee(levels: Sequence[Measured]) -> Measured | None:
    """The measured knee: the highest throughput ÷ ms/token among usable levels (lowest load on ties)."""
    usable = sorted((m for m in levels if m.usable and m.power > 0), key=lambda m: m.concurrency)
    return max(usable, key=lambda m: m.power, default=None)


def measured_max(levels: Sequence[Measured]) -> Measured | None:
    """The measured max: the highest throughput among usable levels (lowest load on ties)."""
    usable = sorted((m for m in levels if m.usable and m.throughput_tokens_per_s > 0), key=lambda m: m.concurrency)
    return max(usable, key=lambda m: m.throughput_tokens_per_s, default=None)


def _close_enough(best: int, other: int) -> bool:
    return abs(other - best) <= max(1.0, TOLERANCE * best)


def _max_bound(best: Measured, levels: Sequence[Measured], above: int) -> float:
    """The most throughput any concurrency up to `above` could reach, if throughput is concave in load
    (batching gives diminishing returns): the line through the nearest usable level below the max (or
    through zero load: Little's law with latency that does not fall as load rises) and the max."""
    below = [m for m in levels if m.usable and m.concurrency < best.concurrency]
    lower = max(below, key=lambda m: m.concurrency, default=None)
    c0, t0 = (lower.concurrency, lower.throughput_tokens_per_s) if lower else (0, 0.0)
    slope = max(0.0, (best.throughput_tokens_per_s - t0) / (best.concurrency - c0))
    return best.throughput_tokens_per_s + slope * (above - best.concurrency)


def _side(best: Measured, levels: Sequence[Measured], up: bool, *, is_max: bool, seeds: set[int],
          limit: int) -> int | None:
    """The level to measure on one side of a pick, or None when that side is closed."""
    b = best.concurrency
    if b == (limit if up else 1):
        return None
    step = NEAR_STEP if b in seeds else FAR_STEP
    probe = min(max(max(b + 1, round(b * step)) if up else min(b - 1, round(b / step)), 1), limit)
    beyond = [m for m in levels if (m.concurrency > b if up else m.concurrency < b)]
    if not beyond:  # open: probe outward
        return probe
    near = min(beyond, key=lambda m: abs(m.concurrency - b))
    if _close_enough(b, near.concurrency):
        return None
    if is_max and (near.usable or _max_bound(best, levels, near.concurrency) <= (1 + TOLERANCE)
                   * best.throughput_tokens_per_s):
        return None
    if b in seeds and abs(probe - b) < abs(near.concurrency - b):
        return probe  # the prediction says the pick is here: look next to it before bisecting a wide gap
    mid = round(math.sqrt(b * near.concurrency))
    return mid if mid not in (b, near.concurrency) else None


def next_level(plan: Plan, levels: Sequence[Measured]) -> Next:
    """The next concurrency to measure, or None with why the sweep is done."""
    spent = sum(m.endpoint_minutes for m in levels)
    if plan.budget_minutes is not None and spent >= plan.budget_minutes:
        return Next(None, f"budget reached: {spent:.2f} of {plan.budget_minutes:g} endpoint-minutes spent "
                          f"after {len(levels)} level(s)")
    measured = {m.concurrency for m in levels}
    for c, why in [(plan.knee, "predicted knee"), (plan.max, "predicted max throughput"),
                   *((c, "named by a threshold") for c in plan.required)]:
        if c not in measured:
            return Next(c, why)
    if len(levels) >= MAX_LEVELS:
        return Next(None, f"stopped after {MAX_LEVELS} levels without bracketing the knee and the max")
    seeds = {plan.knee, plan.max}
    for name, best, is_max in (("knee", measured_knee(levels), False), ("max throughput", measured_max(levels), True)):
        if best is None:
            lowest = min(measured)
            if lowest == 1:
                return Next(None, "no usable level down to concurrency 1")
            return Next(lowest // 2, f"no usable level yet: halving below {lowest}")
        for up in ((True,) if is_max else (False, True)):
            probe = _side(best, levels, up, is_max=is_max, seeds=seeds, limit=plan.limit)
            if probe is not None and probe not in measured:
                return Next(probe, f"bracketing the {name} ({'above' if up else 'below'} {best.concurrency})")
    return Next(None, f"knee and max throughput bracketed within {TOLERANCE:.0%} after {len(levels)} level(s)")

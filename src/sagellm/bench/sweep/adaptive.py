"""The planner-guided sweep: which concurrency to measure next, given the prediction and what was measured.

**Predict, measure, refit.** It measures the predicted knee, then the max-throughput target (the lowest
load predicted to reach 95 % of the max: on a plateau the cheaper level). When each agrees with the
prediction within 8 % (throughput and p50 ms/token; a level of the default length reads them only to a
few per cent: the emulator, replaying the planner, reads 2–8 % off it), the sweep is done. As soon as a
level departs, the prediction's step-time factors are refitted to every level so far (as `sagellm
calibrate` does) and the sweep goes on with the refit's targets, so the next level both tests the refit
out of sample and measures where it points. A target counts as measured when a level lies within 10 % of
it in load, or already reaches 95 % of what the prediction gives there (the knee's throughput ÷ ms/token,
the max throughput): measuring the target itself would move the answer by less than the 10 % sought. A
refit whose targets were all measured already is tested on one more level. A level that failed caps the
targets below it (no prediction sees timeouts coming). A refit confirmed the same way ends the sweep;
after two refits, with nothing to refit (no usable level, or no prediction), or once throughput has
stopped rising (a level within 2 % of a lower one's: the endpoint saturated where the prediction did not,
a queue or a KV cache smaller than predicted, which refitting step times cannot describe), bracketing
takes over.

**Bracketing.** With b the measured level a pick falls on, a side of b is **closed** when the nearest
measured level on that side lies within 10 % of b in concurrency (at least one step: for b = 5, levels 4
and 6), or b is the end of the range on that side (1, or the limit: the admission limit, above which
every level is refused).

- **Knee** (highest throughput ÷ p50 ms/token among usable levels, as `results.picks`): bracketed when
  both its sides are closed. A side is also closed in value: in a closed loop neither throughput nor
  ms/token falls as load rises (up to failure), so no load between a lower level a and the knee b beats
  b's power by more than ms(b) ÷ ms(a), nor between b and a higher level d by more than thr(d) ÷ thr(b).
- **Max throughput** (highest throughput among usable levels): throughput does not fall as load rises
  until the endpoint fails (errors, timeouts), so only the side above needs closing. It is also closed
  by a usable level above (no higher throughput there, hence none between), or, below a failing level
  or the limit, when the throughput any level between could reach is within 10 % of the max: on the line
  through the level below the max (or zero load) and the max, throughput being concave in load. With
  latency that does not fall as load rises, that line through zero load is Little's law: the 10 % in
  concurrency and the 10 % in throughput are then the same bound.

Until both are bracketed, the next level is on the first open side of the first pick not bracketed: when
b is a predicted level, a probe 10 % out (the prediction says the pick is here); otherwise, with no
measured level on that side, a probe 25 % out (the curve departed from the prediction: search faster),
and with a measured level too far away, the geometric midpoint of the gap (bisection). Levels that failed
bound the search like any other.

`next_level` is a pure function of the plan and the measured levels (the refit rounds are replayed from
them), so it is tested and simulated without a server (tests/bench/sweep/test_adaptive.py,
benchmarks/adaptive_sweep.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sagellm.planner import Point, knee_index

TOLERANCE = 0.10  # a pick is bracketed when its measured neighbours are this close in concurrency
AGREE = 0.08  # a measured level confirms a prediction when throughput and ms/token are each this close
REFITS = 2  # refits tried after departures before bracketing takes over
COVER = 0.95  # a measured level covers a target it reaches this share of in value (knee power, max throughput)
# The max-throughput target: the lowest load predicted to reach this share of the max. The share a level
# needs to cover the max: aiming higher buys nothing the sweep counts, and costs (load grows fastest there).
NEAR_MAX = COVER
PLATEAU = 0.02  # throughput within this of a lower level's: the endpoint has saturated
NEAR_STEP = 1.10  # first probe beside a predicted level
FAR_STEP = 1.25  # probe beside a level the prediction did not point at
MAX_LEVELS = 24  # a safety net: a curve that keeps surprising stops here


@dataclass(frozen=True)
class Measured:
    """What the chooser needs of one measured level."""

    concurrency: int
    throughput_tokens_per_s: float
    ms_per_token: float | None  # p50
    usable: bool  # no timeouts, error rate within the limit (results.picks.is_usable)
    endpoint_minutes: float  # what measuring it cost: wall time × instances

    @property
    def power(self) -> float:
        """Throughput ÷ ms/token: the knee is its maximum."""
        return self.throughput_tokens_per_s / self.ms_per_token if self.ms_per_token else 0.0


Predictor = Callable[[int], Point]
Refit = Callable[[Sequence[Measured]], Predictor | None]


@dataclass(frozen=True)
class Targets:
    """Where a predicted curve says to measure, and what it predicts there."""

    knee: int  # the knee's concurrency
    max: int  # the lowest load predicted to reach NEAR_MAX of the max (on a plateau, the cheaper level)
    knee_power: float  # throughput ÷ ms/token at the knee
    top: float  # the max throughput (tokens/s)


@dataclass(frozen=True)
class Plan:
    """Where to start and what bounds the search."""

    knee: int  # predicted knee concurrency
    max: int  # max-throughput target: the lowest load predicted to reach NEAR_MAX of the max
    limit: int  # highest concurrency the sweep may measure
    required: tuple[int, ...] = ()  # levels measured whatever the curve (thresholds name them)
    budget_minutes: float | None = None  # endpoint-minutes the sweep may spend
    predict: Predictor | None = None  # the predicted curve the plan was made from
    refit: Refit | None = None  # the prediction refitted to measured levels (None when none can be used)


@dataclass(frozen=True)
class Next:
    """The chooser's answer: a level to measure and why, or None and why the sweep is done."""

    concurrency: int | None
    reason: str


def targets(predict: Predictor, limit: int) -> Targets:
    """A predicted curve's knee and max-throughput target, evaluated on a 2.5 % grid up to `limit`."""
    grid = sorted({max(1, round(1.025 ** i)) for i in range(int(math.log(limit, 1.025)) + 1)} | {limit})
    points = [predict(c) for c in grid]
    usable = [p for p in points if p.within_timeout and not p.rejected]
    if not usable:
        return Targets(1, 1, 0.0, 0.0)
    i = knee_index([p.throughput_tokens_per_s for p in usable], [p.ms_per_token for p in usable])
    knee = usable[i] if i is not None else usable[0]
    top = max(p.throughput_tokens_per_s for p in usable)
    near = next(p for p in usable if p.throughput_tokens_per_s >= NEAR_MAX * top)
    power = knee.throughput_tokens_per_s / knee.ms_per_token if knee.ms_per_token > 0 else 0.0
    return Targets(knee.concurrency, max(near.concurrency, knee.concurrency), power, top)


def plan_from_prediction(predict: Predictor, limit: int, *, required: Sequence[int] = (),
                         budget_minutes: float | None = None, refit: Refit | None = None) -> Plan:
    """The plan from a predicted curve: its targets, and the prediction itself to check measured levels against."""
    goal = targets(predict, limit)
    return Plan(goal.knee, goal.max, limit, tuple(sorted(set(required))), budget_minutes, predict, refit)


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


def _power_bounded(best: Measured, near: Measured) -> bool:
    """No load between the knee and a usable neighbour can beat the knee's power by more than TOLERANCE. In
    a closed loop, throughput and ms/token do not fall as load rises (up to failure), so between a lower
    level a and the knee b power ≤ thr(b) ÷ ms(a), and between b and a higher level d power ≤ thr(d) ÷ ms(b)."""
    if not near.usable or not near.ms_per_token or not best.ms_per_token:
        return False
    if near.concurrency < best.concurrency:
        return best.ms_per_token <= (1 + TOLERANCE) * near.ms_per_token
    return near.throughput_tokens_per_s <= (1 + TOLERANCE) * best.throughput_tokens_per_s


def _side(best: Measured, levels: Sequence[Measured], up: bool, *, is_max: bool, seeds: set[int],
          limit: int) -> int | None:
    """The level to measure on one side of a pick, or None when that side is closed."""
    b = best.concurrency
    if b == (limit if up else 1):
        return None
    step = NEAR_STEP if b in seeds else FAR_STEP
    probe = min(max(max(b + 1, round(b * step)) if up else min(b - 1, round(b / step)), 1), limit)
    beyond = [m for m in levels if (m.concurrency > b if up else m.concurrency < b)]
    if not beyond:  # open: probe outward, unless the concave bound already caps the max up to the limit
        if is_max and _max_bound(best, levels, limit) <= (1 + TOLERANCE) * best.throughput_tokens_per_s:
            return None
        return probe
    near = min(beyond, key=lambda m: abs(m.concurrency - b))
    if _close_enough(b, near.concurrency) or (not is_max and _power_bounded(best, near)):
        return None
    if is_max and (near.usable or _max_bound(best, levels, near.concurrency) <= (1 + TOLERANCE)
                   * best.throughput_tokens_per_s):
        return None
    if b in seeds and abs(probe - b) < abs(near.concurrency - b):
        return probe  # the prediction says the pick is here: look next to it before bisecting a wide gap
    mid = round(math.sqrt(b * near.concurrency))
    return mid if mid not in (b, near.concurrency) else None


def _agrees(m: Measured, predict: Predictor) -> bool:
    """The level measured what the prediction says, within AGREE on throughput and on ms/token."""
    p = predict(m.concurrency)
    return (m.usable and m.ms_per_token is not None and p.within_timeout and not p.rejected
            and abs(m.throughput_tokens_per_s / p.throughput_tokens_per_s - 1) <= AGREE
            and abs(m.ms_per_token / p.ms_per_token - 1) <= AGREE)


def _cover(target: int, levels: Sequence[Measured]) -> Measured | None:
    """The measured level nearest the target, if one is within TOLERANCE of it in concurrency."""
    near = [m for m in levels if _close_enough(target, m.concurrency)]
    return min(near, key=lambda m: abs(m.concurrency - target), default=None)


def _covering(goal: Targets, levels: Sequence[Measured]) -> list[tuple[int, Measured | None]]:
    """Each target with the measured level that covers it, if any: one within TOLERANCE of it in load, else
    one that already reaches COVER of the predicted value there (the knee's power, the max throughput)."""
    usable = [m for m in levels if m.usable]
    knee = _cover(goal.knee, levels) or max((m for m in usable if m.power >= COVER * goal.knee_power),
                                            key=lambda m: m.power, default=None)
    top = _cover(goal.max, levels) or min((m for m in usable if m.throughput_tokens_per_s >= COVER * goal.top),
                                          key=lambda m: m.concurrency, default=None)
    return [(goal.knee, knee), (goal.max, top)]


def _plateau(levels: Sequence[Measured]) -> bool:
    """Throughput has stopped rising: a usable level within PLATEAU of a lower usable level's throughput."""
    usable = sorted((m for m in levels if m.usable), key=lambda m: m.concurrency)
    return any(b.throughput_tokens_per_s <= (1 + PLATEAU) * a.throughput_tokens_per_s
               for a, b in itertools.pairwise(usable))


def _check(goal: Targets, levels: Sequence[Measured], limit: int) -> int | None:
    """A level to test a refitted prediction out of sample when every target it names was measured
    already: below the knee (cheaper), else between the knee and the max, else above the max."""
    knee, top = goal.knee, goal.max
    for c in (round(knee / FAR_STEP), round(math.sqrt(knee * top)), min(limit, round(top * FAR_STEP))):
        if c >= 1 and _cover(c, levels) is None:
            return c
    return None


def _guided(plan: Plan, levels: Sequence[Measured]) -> tuple[Next | None, set[int]]:
    """The prediction phase: measure the predicted targets one at a time; as soon as a level departs from
    the prediction, refit it to every level so far and go on with the refit's targets (when levels already
    cover them all, one more level tests the refit out of sample). Returns the next step (None: bracketing
    takes over) and the targets tried (bracketing looks next to them first).

    It replays the refits from the levels in the order measured, so it stays a pure function of them."""
    assert plan.predict is not None
    predict, seen, fitted, refits, tried = plan.predict, 0, 0, 0, set()
    while True:
        limit = _cap(plan, levels[:seen])
        goal = targets(predict, limit)
        covering = _covering(goal, levels[:seen])
        tried |= {goal.knee, goal.max}
        todo = _todo(goal, covering, levels[:seen], limit, testing_refit=bool(refits) and seen == fitted)
        if not todo:
            return _confirmed(covering, levels[fitted:seen], predict, seen, fitted, refits), tried
        if seen == len(levels):
            return _to_measure(todo[0], goal, fitted, refits), tried
        seen += 1
        if not _agrees(levels[seen - 1], predict):  # a departure: refit now, before measuring further
            refitted = _refit(plan, levels[:seen], refits)
            if refitted is None:
                return None, tried
            predict, fitted, refits = refitted, seen, refits + 1


def _cap(plan: Plan, measured: Sequence[Measured]) -> int:
    """The highest level worth targeting: a level that failed caps the targets below it (the prediction
    cannot see timeouts or errors coming)."""
    return max(1, min([plan.limit, *(m.concurrency - 1 for m in measured if not m.usable)]))


def _todo(goal: Targets, covering: list[tuple[int, Measured | None]], measured: Sequence[Measured], limit: int,
          *, testing_refit: bool) -> list[int]:
    """The targets no measured level covers yet; a refit whose targets are all covered gets one check level."""
    todo = list(dict.fromkeys(t for t, m in covering if m is None))
    if not todo and testing_refit:
        todo = [c for c in (_check(goal, measured, limit),) if c is not None]
    return todo


def _confirmed(covering: list[tuple[int, Measured | None]], since_fit: Sequence[Measured], predict: Predictor,
               seen: int, fitted: int, refits: int) -> Next | None:
    """Done when the levels at the targets, and every level since the last fit, agree with the prediction;
    None when they do not (the refit does not describe the levels it was fitted to: bracket)."""
    judged = [m for _, m in covering] + list(since_fit)
    if not all(m is not None and _agrees(m, predict) for m in judged):
        return None
    how = "the prediction" if not refits else f"the prediction refitted to {fitted} level(s)"
    return Next(None, f"{how} confirmed within {AGREE:.0%} at its knee and max after {seen} level(s)")


def _to_measure(level: int, goal: Targets, fitted: int, refits: int) -> Next:
    """The next target to measure, named as the prediction (or its refit) names it."""
    what = "predicted" if not refits else f"refitted to {fitted} level(s):"
    which = "knee" if level == goal.knee else "max throughput" if level == goal.max else "check"
    return Next(level, f"{what} {which}")


def _refit(plan: Plan, measured: Sequence[Measured], refits: int) -> Predictor | None:
    """The prediction refitted after a departure; None after REFITS refits, on a plateau (which refitting
    step times cannot describe), or when nothing can be refitted."""
    refit = plan.refit if refits < REFITS and not _plateau(measured) else None
    return refit(measured) if refit is not None else None


def next_level(plan: Plan, levels: Sequence[Measured]) -> Next:
    """The next concurrency to measure, or None with why the sweep is done."""
    spent = sum(m.endpoint_minutes for m in levels)
    if plan.budget_minutes is not None and spent >= plan.budget_minutes:
        return Next(None, f"budget reached: {spent:.2f} of {plan.budget_minutes:g} endpoint-minutes spent "
                          f"after {len(levels)} level(s)")
    measured = {m.concurrency for m in levels}
    seeds = {plan.knee, plan.max}
    if plan.predict is not None:
        step, seeds = _guided(plan, levels)
        if step is not None:  # a guided level; or confirmed, and what thresholds name is still measured
            rest = [c for c in plan.required if c not in measured]
            return Next(rest[0], "named by a threshold") if rest and step.concurrency is None else step
    # Without a prediction to check, the plan's seeds come first; with one, the guided phase chose them.
    starts = [(plan.knee, "predicted knee"), (plan.max, "predicted max throughput")] if plan.predict is None else []
    for c, why in [*starts, *((c, "named by a threshold") for c in plan.required)]:
        if c not in measured:
            return Next(c, why)
    if len(levels) >= MAX_LEVELS:
        return Next(None, f"stopped after {MAX_LEVELS} levels without bracketing the knee and the max")
    return _bracket(plan, levels, measured, seeds)


def _bracket(plan: Plan, levels: Sequence[Measured], measured: set[int], seeds: set[int]) -> Next:
    """The bracketing phase: the first open side of the first pick not yet bracketed."""
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

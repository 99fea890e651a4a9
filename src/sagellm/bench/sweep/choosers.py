"""Which levels a bench measures: the doubling list, or the planner-guided (adaptive) choice; and what
measuring them cost in endpoint-minutes.

Endpoint-minutes of a level = its wall time (first request sent to last one back, warm-up included; the
emulator's simulated time under --time-scale) × the endpoint's instances. The budget (--budget-minutes)
is checked between levels: a level started under it runs to its end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.measured import levels_of
from sagellm.bench.sweep.adaptive import Measured, Plan, Predictor, Refit, next_level, plan_from_prediction
from sagellm.clock import Clock
from sagellm.errors import InputError
from sagellm.planner import (
    DEFAULT_CONCURRENCY,
    Observation,
    Payload,
    Point,
    Shape,
    fit_calibration,
    predict_point,
)
from sagellm.results.gate import load_thresholds
from sagellm.results.picks import is_usable
from sagellm.results.schema import Results, SweepRecord, parse_load

SWEEPS = ("auto", "adaptive", "doubling")
TIMEOUT_LEVEL_S = 120.0  # a level past the timeout: the warm-up request times out, then the first measured one


def _method_problems(method: str) -> list[str]:
    return [] if method in SWEEPS else [f"Sweep.method: {method!r} must be adaptive or doubling"]


@dataclass(frozen=True)
class Sweep:
    """How a bench chooses its levels: `doubling` measures the load's list in order; `adaptive` starts at the
    predicted knee and max and refines where the measurement departs; `auto` is adaptive where there is a
    prediction to start from (closed loop). Either stops once it has spent `budget_minutes` endpoint-minutes."""

    method: str = "auto"  # auto | adaptive | doubling
    budget_minutes: float | None = None

    def __post_init__(self) -> None:
        errors = _method_problems(self.method)
        if self.budget_minutes is not None and not 0 < self.budget_minutes < math.inf:
            errors.append(f"Sweep.budget_minutes: {self.budget_minutes:g} must be a positive number of endpoint-minutes")
        if errors:
            raise InputError(errors)


def sweep_method(sweep: str, *, predicted: bool, open_loop: bool) -> str:
    """`adaptive` or `doubling`: `auto` is adaptive where there is a prediction to start from (closed loop)."""
    if problems := _method_problems(sweep):
        raise InputError(problems)
    if sweep == "adaptive" and not predicted:
        raise InputError("Sweep.method adaptive: needs a prediction to start from: give ServingSpec.profile and "
                         "ServingSpec.model (or Sweep.method doubling)")
    if sweep == "adaptive" and open_loop:
        raise InputError("Sweep.method adaptive: closed loop only (the planner predicts concurrency levels); drop "
                         "Open.request_rate or use Sweep.method doubling")
    if sweep == "auto":
        return "adaptive" if predicted and not open_loop else "doubling"
    return sweep


def level_minutes(runs: Sequence[LevelResult], clock: Clock, instances: int) -> float:
    """Endpoint-minutes the runs of a level took."""
    return clock.simulated_s(sum(r.ended_s - r.started_s for r in runs)) / 60 * instances


@dataclass
class Chooser:
    """Feeds the sweep its next level from what was measured (run_sweep's `choose`)."""

    method: str  # adaptive | doubling
    levels: tuple[float, ...]  # doubling: the list in order (the plan holds the adaptive's)
    clock: Clock
    emulated: bool
    instances: int
    budget_minutes: float | None = None
    plan: Plan | None = None  # adaptive
    outcome: str | None = None  # why the sweep ended, once it has
    cut_short: bool = False  # the budget or the safety net ended it, not the plan
    measured: list[Measured] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # level names in the order measured

    def __call__(self, results: list[LevelResult]) -> float | None:
        self.measured = measured(results, self.clock, self.emulated, self.instances)
        self.order = list(dict.fromkeys(r.load for r in results))
        level, reason = self._next(results)
        if level is None:
            self.outcome = reason
            self.cut_short = not reason.startswith(("knee and max", "the prediction", "every level"))
        return level

    def _next(self, results: list[LevelResult]) -> tuple[float | None, str]:
        if self.plan is not None:
            step = next_level(self.plan, self.measured)
            return step.concurrency, step.reason
        spent = self.spent
        over = [r.request_rate for r in results if r.over_saturated is not None and r.request_rate is not None]
        if results and results[-1].stopped_reason and results[-1].over_saturated is None:
            return None, "every level measured up to the first that failed"
        if self.budget_minutes is not None and spent >= self.budget_minutes:
            return None, (f"budget reached: {spent:.2f} of {self.budget_minutes:g} endpoint-minutes spent "
                          f"after {len(self.measured)} level(s)")
        done = {r.request_rate if r.request_rate is not None else r.concurrency for r in results}
        # A rate above an over-saturated one is over-saturated too (arrivals outpace completions all the more):
        # it would cost endpoint-minutes to say so again, so the list goes on below it only.
        rest = [lv for lv in self.levels if lv not in done and not any(lv > o for o in over)]
        if not rest and over:
            return None, f"every level measured up to the first over-saturated one ({min(over):g}/s)"
        return (rest[0], "next in the list") if rest else (None, "every level measured")

    @property
    def measured_concurrency(self) -> list[int] | None:
        """The levels an adaptive sweep measured (its sweep, in the results' run); None for a list."""
        return sorted(m.concurrency for m in self.measured) if self.plan is not None else None

    @property
    def spent(self) -> float:
        return sum(m.endpoint_minutes for m in self.measured)

    def describe(self) -> str:
        """What the sweep sets out to measure, for the progress line."""
        budget = f", at most {self.budget_minutes:g} endpoint-minutes" if self.budget_minutes else ""
        if self.plan is not None:
            return (f"adaptive sweep from the predicted knee {self.plan.knee} and max {self.plan.max} "
                    f"(up to {self.plan.limit}){budget}")
        levels = ", ".join(f"{lv:g}/s" if isinstance(lv, float) else str(lv) for lv in self.levels)
        return f"levels {levels}{budget}"

    def stopped_reason(self, levels: Sequence[LevelResult]) -> str | None:
        """Why the sweep ended before its plan was through: the budget, or (doubling) a failing level. An
        adaptive sweep measures failing levels on purpose: they bound the search."""
        if self.cut_short:
            return self.outcome
        if self.plan is not None:
            return None
        return next((lv.stopped_reason for lv in levels if lv.stopped_reason), None)


def threshold_levels(path: Path | None) -> list[int]:
    """The concurrency levels a thresholds file names (an adaptive sweep measures them too)."""
    if path is None:
        return []
    keys = [parse_load(rule.where) for rule in load_thresholds(path).rules if rule.where not in (None, "knee", "max")]
    return [key for key in keys if isinstance(key, int)]


def make_chooser(method: str, sweep: Sweep, levels: tuple[float, ...], shape: Shape | None, payload: Payload,
                 instances: int, *, clock: Clock, emulated: bool, baseline: Results | None = None) -> Chooser:
    """The chooser of a bench: its list of `levels`, or (adaptive) its plan from the prediction, which measures
    the levels too. An adaptive sweep also measures the levels a baseline run has, so that the two have levels
    in common to compare."""
    plan = None
    if method == "adaptive":
        assert shape is not None  # sweep_method: adaptive needs a prediction
        again = [lv.concurrency for lv in baseline.levels if lv.concurrency] if baseline else []
        plan = adaptive_plan(shape, payload, [*(int(lv) for lv in levels), *again], sweep.budget_minutes)
    return Chooser(method, levels, clock, emulated, instances, sweep.budget_minutes, plan)


def sweep_block(chooser: Chooser, shape: Shape | None, payload: Payload, *,
                requests: int | Callable[[float], int] | None, duration_s: float | None, warmup: int) -> SweepRecord:
    """The results' account of the sweep; an adaptive one estimates what the doubling sweep would have spent."""
    estimate = None
    if chooser.plan is not None and shape is not None and chooser.measured:
        def minutes(point: Point) -> float:
            count = requests(point.concurrency) if callable(requests) else requests
            return predicted_minutes(point, count, duration_s, warmup, chooser.instances)
        estimate = doubling_estimate(chooser.measured, lambda c: predict_point(shape, payload, c), minutes)
    return sweep_record(chooser, estimate=estimate)


def measured(results: list[LevelResult], clock: Clock, emulated: bool, instances: int) -> list[Measured]:
    """What the chooser needs of the levels measured so far (repeats together), in the order measured; a
    level without a measured request counts as failed (so it is never chosen again)."""
    summaries = {lv.load: lv for lv in levels_of(results, clock=clock, emulated=emulated,
                                                 predict=lambda *_: None, lags={})}
    out = []
    for load in dict.fromkeys(r.load for r in results):
        runs = [r for r in results if r.load == load]
        minutes = level_minutes(runs, clock, instances)
        level = summaries.get(load)
        if level is None:
            out.append(Measured(runs[0].concurrency or 0, 0.0, None, False, minutes))
        else:
            out.append(Measured(level.concurrency or 0, level.throughput_tokens_per_s,
                                level.latency_ms_per_token.p50, is_usable(level), minutes))
    return out


def adaptive_plan(shape: Shape, payload: Payload, required: Sequence[int],
                  budget_minutes: float | None) -> Plan:
    """The adaptive plan of a shape: start at its predicted knee and max, up to its admission limit."""
    admit = shape.max_concurrent_requests
    limit = max(DEFAULT_CONCURRENCY) if admit is None else admit * shape.total_copies
    return plan_from_prediction(lambda c: predict_point(shape, payload, c), limit, required=required,
                                budget_minutes=budget_minutes, refit=refit_for(shape, payload))


def refit_for(shape: Shape, payload: Payload) -> Refit:
    """Refits the shape's step-time factors to measured levels (as `sagellm calibrate` does to runs)."""
    base = replace(shape, calibration=None)

    def refit(levels: Sequence[Measured]) -> Predictor | None:
        seen = [Observation(base, payload, m.concurrency, ms_per_token=m.ms_per_token,
                            throughput_tokens_per_s=m.throughput_tokens_per_s)
                for m in levels if m.usable and m.ms_per_token]
        try:
            fit = fit_calibration(seen, source="this sweep")
        except ValueError:  # no level the fit can use (none usable, or all where the model refuses)
            return None
        fitted = replace(base, calibration=fit.calibration)
        return lambda c: predict_point(fitted, payload, c)
    return refit


def predicted_minutes(point: Point, requests: int | None, duration_s: float | None, warmup: int,
                      instances: int) -> float:
    """Endpoint-minutes a level would take if the prediction held."""
    if not point.within_timeout:
        return TIMEOUT_LEVEL_S / 60 * instances
    if point.rejected:  # refused at once: the level stops; the admitted warm-up requests finish
        return point.e2e_s / 60 * instances
    measured_s = duration_s if duration_s is not None else (requests or 0) / point.requests_per_s
    return (measured_s + warmup * point.e2e_s) / 60 * instances


def doubling_estimate(levels: Sequence[Measured], predict: Callable[[int], Point],
                      minutes: Callable[[Point], float]) -> float:
    """Endpoint-minutes a doubling sweep (1, 2, 4, … 512) would have spent up to and including its first
    failing level. A level the adaptive sweep measured counts what it took; any other, its predicted time
    scaled by measured ÷ predicted time at the nearest measured level (in log concurrency). A level fails
    if the prediction says so, or if a level at or below it failed, unless a usable level at or above it
    was measured."""
    by_c = {m.concurrency: m for m in levels}
    failed = [m.concurrency for m in levels if not m.usable]
    worked = [m.concurrency for m in levels if m.usable]
    total = 0.0
    for c in DEFAULT_CONCURRENCY:
        point = predict(c)
        if c in by_c:
            total += by_c[c].endpoint_minutes
            usable = by_c[c].usable
        else:
            ref = min(levels, key=lambda m: abs(math.log(m.concurrency / c)), default=None)
            ratio = ref.endpoint_minutes / minutes(predict(ref.concurrency)) if ref else 1.0
            total += minutes(point) * ratio
            usable = (not any(f <= c for f in failed) and
                      (any(w >= c for w in worked) or (point.within_timeout and not point.rejected)))
        if not usable:
            break
    return total


def sweep_record(chooser: Chooser, *, estimate: float | None) -> SweepRecord:
    """The results' account of the sweep."""
    plan = chooser.plan
    return SweepRecord(method=chooser.method,  # type: ignore[arg-type]
                 order=chooser.order,
                 endpoint_minutes=round(chooser.spent, 3),
                 doubling_endpoint_minutes=None if estimate is None else round(estimate, 3),
                 budget_minutes=chooser.budget_minutes, predicted_knee=plan.knee if plan else None,
                 predicted_max=plan.max if plan else None, outcome=chooser.outcome)

"""The planner-guided sweep: the chooser on synthetic curves, and `sagellm bench --sweep adaptive` end to end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import FakeTransport, bench_args, results_of, sagellm
from sagellm import bench
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.bottleneck import LOOP_LAG_MS
from sagellm.bench.load.level import LevelResult
from sagellm.bench.sweep.adaptive import (
    AGREE,
    COVER,
    MAX_LEVELS,
    NEAR_MAX,
    TOLERANCE,
    Measured,
    Plan,
    next_level,
    plan_from_prediction,
)
from sagellm.bench.sweep.choosers import Chooser, doubling_estimate, measured, refit_for, sweep_method
from sagellm.bench.sweep.run import run_sweep
from sagellm.clock import REAL, Clock
from sagellm.errors import InputError
from sagellm.planner import Calibration, Payload, Point, Shape, knee_of, predict, predict_point
from sagellm.planner.constants import RESERVED_GB_PER_GPU
from sagellm.profiles import design_for

Curve = Callable[[int], Measured]


def curve(floor: float = 20.0, per_seq: float = 0.5, capacity: int = 64, fails_above: int | None = None,
          minutes: float = 1.0) -> Curve:
    """A closed loop over a batching server: step time floor + per_seq × running (ms), at most `capacity`
    running, the rest queue. Knee (max throughput ÷ latency) at min(floor ÷ per_seq, capacity), throughput
    flat from `capacity` on; every level above `fails_above` fails."""
    def measure(c: int) -> Measured:
        running = min(c, capacity)
        step = floor + per_seq * running
        throughput = running / step * 1000  # tokens/s
        ms_per_token = step * c / running  # queued requests wait their turn
        usable = fails_above is None or c <= fails_above
        return Measured(c, throughput, ms_per_token, usable, minutes * (1 + c / 64))
    return measure


def sweep(plan: Plan, truth: Curve) -> tuple[list[Measured], str]:
    levels: list[Measured] = []
    while (step := next_level(plan, levels)).concurrency is not None:
        assert step.concurrency not in {m.concurrency for m in levels}, "a level is measured twice"
        assert 1 <= step.concurrency <= plan.limit
        levels.append(truth(step.concurrency))
    return levels, step.reason


def truth_picks(truth: Curve, limit: int) -> tuple[Measured, Measured]:
    """The dense curve's knee and max (results.picks' definitions: lowest load on ties)."""
    dense = [m for m in (truth(c) for c in range(1, limit + 1)) if m.usable]
    return max(dense, key=lambda m: m.power), max(dense, key=lambda m: m.throughput_tokens_per_s)


def test_an_exact_prediction_is_confirmed_with_three_levels() -> None:
    truth = curve(floor=20, per_seq=0.5, capacity=40)  # knee = max = 40
    levels, reason = sweep(Plan(knee=40, max=40, limit=512), truth)

    assert [m.concurrency for m in levels] == [40, 36, 44]
    assert reason.startswith("knee and max throughput bracketed within 10%")


@pytest.mark.parametrize("error", [0.7, 1.3])
def test_a_prediction_off_by_30_percent_still_brackets_the_true_knee_and_max(error: float) -> None:
    truth = curve(floor=20, per_seq=0.4, capacity=80)  # knee 50 (floor ÷ per_seq), max 80 (capacity)
    knee_t, max_t = truth_picks(truth, 512)
    assert (knee_t.concurrency, max_t.concurrency) == (50, 80)

    levels, reason = sweep(Plan(knee=round(50 * error), max=round(80 * error), limit=512), truth)
    knee = max(sorted(levels, key=lambda m: m.concurrency), key=lambda m: m.power)
    top = max(levels, key=lambda m: m.throughput_tokens_per_s)

    assert reason.startswith("knee and max throughput bracketed")
    # Bracketed in value: no load between the knee's measured neighbours can beat its power by 10 %.
    assert knee.power >= knee_t.power / (1 + TOLERANCE) and abs(knee.concurrency - 50) <= TOLERANCE * 50
    assert top.throughput_tokens_per_s == pytest.approx(max_t.throughput_tokens_per_s, rel=TOLERANCE)
    assert len(levels) < 12


def test_a_knee_is_bracketed_in_value_by_neighbours_further_than_10_percent_in_load() -> None:
    # Levels 40 and 60 around a knee at 50: ms/token at 40 within 10 % of the knee's, throughput at 60 within
    # 10 %: no load between them can beat the knee's power by 10 %, so neither gap needs a level.
    at = {40: (1000.0, 38.0), 50: (1200.0, 40.0), 60: (1300.0, 48.0), 61: (1300.0, 49.0)}
    levels = [Measured(c, thr, ms, True, 1.0) for c, (thr, ms) in at.items()]
    assert next_level(Plan(knee=50, max=60, limit=61), levels).reason.startswith("knee and max throughput bracketed")
    slower_below = [replace(levels[0], ms_per_token=35.0), *levels[1:]]  # 40/35 > 1.1: the gap below is open
    assert next_level(Plan(knee=50, max=60, limit=61), slower_below).concurrency == 45


def as_point(m: Measured, output_tokens: int = 100) -> Point:
    """A synthetic level as the planner's Point, to serve as a prediction."""
    assert m.ms_per_token is not None
    return Point(m.concurrency, m.ms_per_token, 0.0, m.ms_per_token, m.ms_per_token * output_tokens / 1000,
                 m.throughput_tokens_per_s, m.throughput_tokens_per_s / output_tokens, 0.0, 0.0, False, m.usable)


def planner_truth(shape: Shape, payload: Payload) -> Curve:
    """The planner's curve for a shape, as levels that each cost one endpoint-minute."""
    def measure(c: int) -> Measured:
        p = predict_point(shape, payload, c)
        return Measured(c, p.throughput_tokens_per_s, p.ms_per_token, p.within_timeout and not p.rejected, 1.0)
    return measure


LLAMA2_13B = ("max-throughput", "meta-llama/Llama-2-13b-hf", "ml.g5.12xlarge")


def guided(truth_shape: Callable[[Shape], Shape]) -> tuple[list[Measured], str, Curve]:
    """An adaptive sweep steered by the planner's prediction, against the planner's shape changed by `truth_shape`."""
    design = design_for(*LLAMA2_13B)
    shape, payload = design.shape(), design.payload
    truth = planner_truth(truth_shape(shape), payload)
    plan = plan_from_prediction(lambda c: predict_point(shape, payload, c), 128, refit=refit_for(shape, payload))
    return (*sweep(plan, truth), truth)


def test_a_prediction_the_first_two_levels_confirm_ends_the_sweep_there() -> None:
    levels, reason, _ = guided(lambda s: s)
    assert len(levels) == 2
    assert reason == f"the prediction confirmed within {AGREE:.0%} at its knee and max after 2 level(s)"


@pytest.mark.parametrize("factors", [(1.2, 1.3, 1.4), (0.6, 1.4, 0.8)])
def test_step_times_off_by_up_to_40_percent_are_refitted_and_the_refit_is_tested_out_of_sample(
        factors: tuple[float, float, float]) -> None:
    levels, reason, truth = guided(lambda s: replace(s, calibration=Calibration(*factors)))
    knee_t, max_t = truth_picks(truth, 128)
    # The premise: the first level departs from the prediction (errors that cancel there are confirmed, rightly).
    design = design_for(*LLAMA2_13B)
    first = predict_point(design.shape(), design.payload, levels[0].concurrency)
    assert levels[0].ms_per_token is not None
    assert abs(levels[0].ms_per_token / first.ms_per_token - 1) > AGREE, "these factors cancel at the first level"
    knee = max(levels, key=lambda m: m.power)
    top = max(levels, key=lambda m: m.throughput_tokens_per_s)

    # Refitted to the levels before the departure's; confirmed on at least one level measured after the refit.
    fitted = int(reason.removeprefix("the prediction refitted to ").split(" ")[0])
    assert reason.startswith("the prediction refitted to") and f"confirmed within {AGREE:.0%}" in reason
    assert fitted < len(levels) <= 4
    assert knee.power >= 0.9 * knee_t.power and top.throughput_tokens_per_s >= 0.9 * max_t.throughput_tokens_per_s


def test_a_failing_max_target_caps_the_next_targets_below_it() -> None:
    # Every level above 60 fails (say the endpoint times out there): the prediction cannot see that coming.
    design = design_for(*LLAMA2_13B)
    shape, payload = design.shape(), design.payload
    fine = planner_truth(shape, payload)

    def truth(c: int) -> Measured:
        return replace(fine(c), usable=c <= 60)
    plan = plan_from_prediction(lambda c: predict_point(shape, payload, c), 128, refit=refit_for(shape, payload))
    levels, _ = sweep(plan, truth)
    failed = [m.concurrency for m in levels if not m.usable]
    usable_max = max(fine(c).throughput_tokens_per_s for c in range(1, 61))

    # The predicted max target fails first; every later level stays below the lowest failure before it.
    assert failed[0] == plan.max > 60
    after = levels.index(truth(plan.max)) + 1
    assert next_level(plan, levels[:after]).reason.endswith("max throughput")  # a refitted target, not bracketing
    for i, m in enumerate(levels):
        assert all(m.concurrency < f.concurrency for f in levels[:i] if not f.usable)
    assert max(m.throughput_tokens_per_s for m in levels if m.usable) >= 0.9 * usable_max


def test_less_kv_cache_than_predicted_still_gives_knee_and_max_within_10_percent() -> None:
    # 70 % less KV cache: the max moves from 87 to 46 running sequences, the knee stays.
    def less_kv(s: Shape) -> Shape:
        free_gb = s.usable_gb_per_gpu - s.weight_gb_per_gpu
        mib = round((s.weight_gb_per_gpu + 0.3 * free_gb + RESERVED_GB_PER_GPU) * 1e9 / 2**20)
        return replace(s, instance=replace(s.instance, device_mem_mib=mib),
                       max_batch_total_tokens=s.max_batch_total_tokens and round(0.3 * s.max_batch_total_tokens))
    levels, reason, truth = guided(less_kv)
    knee_t, max_t = truth_picks(truth, 128)

    assert reason.startswith("the prediction refitted") and len(levels) <= 4
    assert max(m.power for m in levels) >= 0.9 * knee_t.power
    assert max(m.throughput_tokens_per_s for m in levels) >= 0.9 * max_t.throughput_tokens_per_s


def test_a_departure_nothing_can_refit_is_bracketed() -> None:
    design = design_for(*LLAMA2_13B)
    shape, payload = design.shape(), design.payload
    truth = planner_truth(replace(shape, calibration=Calibration(1.2, 1.3, 1.4)), payload)
    levels, reason = sweep(plan_from_prediction(lambda c: predict_point(shape, payload, c), 128), truth)
    knee_t, max_t = truth_picks(truth, 128)

    assert reason.startswith("knee and max throughput bracketed within 10%")
    assert max(m.power for m in levels) >= 0.9 * knee_t.power
    assert max(m.throughput_tokens_per_s for m in levels) >= 0.9 * max_t.throughput_tokens_per_s


def test_a_level_that_already_reaches_95_percent_of_the_predicted_max_covers_the_max_target() -> None:
    # An endpoint 5 % cheaper per running sequence than predicted: it reaches the predicted max sooner.
    design = design_for(*LLAMA2_13B)
    shape, payload = design.shape(), design.payload
    truth = planner_truth(replace(shape, calibration=Calibration(1.0, 0.95, 1.0)), payload)
    plan = plan_from_prediction(lambda c: predict_point(shape, payload, c), 128, refit=refit_for(shape, payload))
    top = max(predict_point(shape, payload, c).throughput_tokens_per_s for c in range(1, 129))
    reaches = min(c for c in range(1, 129) if truth(c).throughput_tokens_per_s >= COVER * top)
    assert plan.knee < reaches < (1 - TOLERANCE) * plan.max  # further below the max target than 10 %

    # That level already reads the max within 5 %: measuring the target would move the answer by less than 10 %.
    assert next_level(plan, [truth(plan.knee), truth(reaches)]).reason.startswith("the prediction confirmed")
    # One level lower reaches less: the target is measured.
    assert next_level(plan, [truth(plan.knee), truth(reaches - 1)]).concurrency == plan.max


def test_throughput_that_stops_rising_where_the_prediction_did_not_is_bracketed_not_refitted() -> None:
    # The endpoint runs 30 sequences where the prediction says 80 (a smaller KV cache, say): step times
    # agree, so refitting them cannot move the plateau; two levels on it send the sweep to bracketing.
    predicted, truth = curve(floor=20, per_seq=0.4, capacity=80), curve(floor=20, per_seq=0.4, capacity=30)
    fitted: list[list[int]] = []

    def refit(levels: Sequence[Measured]) -> Callable[[int], Point]:
        fitted.append([m.concurrency for m in levels])
        return lambda c: as_point(predicted(c))
    plan = plan_from_prediction(lambda c: as_point(predicted(c)), 512, refit=refit)
    levels, reason = sweep(plan, truth)
    knee_t, max_t = truth_picks(truth, 512)

    assert 30 < plan.knee < plan.max  # the predicted knee and max: both on the plateau
    assert [m.concurrency for m in levels][:2] == [plan.knee, plan.max]
    assert {tuple(f) for f in fitted} == {(51,)}  # refitted after the first departure only
    assert reason.startswith("knee and max throughput bracketed")
    assert max(m.power for m in levels) >= 0.9 * knee_t.power
    assert max(m.throughput_tokens_per_s for m in levels) >= 0.9 * max_t.throughput_tokens_per_s


def test_levels_that_fail_bound_the_max_from_above() -> None:
    # Throughput still rises at 100, where every request starts to fail: the max is the last usable level.
    truth = curve(floor=20, per_seq=0.1, capacity=400, fails_above=100)
    levels, reason = sweep(Plan(knee=200, max=400, limit=512), truth)
    _, max_t = truth_picks(truth, 512)
    top = max((m for m in levels if m.usable), key=lambda m: m.throughput_tokens_per_s)
    failed = [m.concurrency for m in levels if not m.usable]

    assert reason.startswith("knee and max throughput bracketed")
    assert top.throughput_tokens_per_s >= (1 - TOLERANCE) * max_t.throughput_tokens_per_s
    # The first failing level above the max is close enough that no level between could do 10 % better.
    assert min(c for c in failed if c > top.concurrency) <= top.concurrency * (1 + TOLERANCE) + 1 or \
        top.throughput_tokens_per_s >= max_t.throughput_tokens_per_s / (1 + TOLERANCE)


def test_a_plateau_closes_the_max_without_walking_up_to_the_limit() -> None:
    truth = curve(floor=20, per_seq=0.5, capacity=40)
    levels, _ = sweep(Plan(knee=40, max=40, limit=512), truth)
    assert max(m.concurrency for m in levels) < 60  # 512 is never needed: more load only queues


def test_the_budget_stops_the_sweep_after_the_level_that_reaches_it() -> None:
    truth = curve(floor=20, per_seq=0.4, capacity=80, minutes=1.0)
    levels, reason = sweep(Plan(knee=20, max=30, limit=512, budget_minutes=3.0), truth)
    spent = sum(m.endpoint_minutes for m in levels)

    assert reason.startswith("budget reached:") and f"{spent:.2f} of 3 endpoint-minutes" in reason
    assert spent >= 3.0 and spent - levels[-1].endpoint_minutes < 3.0


def test_levels_a_threshold_names_are_measured_too() -> None:
    levels, _ = sweep(Plan(knee=40, max=40, limit=512, required=(4,)), curve(capacity=40))
    assert 4 in {m.concurrency for m in levels}


def test_no_usable_level_halves_down_to_one_then_gives_up() -> None:
    levels, reason = sweep(Plan(knee=32, max=64, limit=512), curve(fails_above=0))
    assert [m.concurrency for m in levels] == [32, 64, 16, 8, 4, 2, 1]
    assert reason == "no usable level down to concurrency 1"


def test_a_curve_that_keeps_rising_stops_at_the_safety_net() -> None:
    rising = curve(floor=1e6, per_seq=1e-9, capacity=10**7)  # knee and max always further out
    levels, reason = sweep(Plan(knee=100, max=200, limit=10**6), rising)
    assert len(levels) == MAX_LEVELS
    assert reason == f"stopped after {MAX_LEVELS} levels without bracketing the knee and the max"


def test_the_plan_starts_at_the_planners_knee_and_max() -> None:
    design = design_for("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge")
    shape, payload = design.shape(), Payload(256, 256)
    plan = plan_from_prediction(lambda c: predict_point(shape, payload, c), 128)
    grid = tuple(sorted({max(1, round(1.025 ** i)) for i in range(200)} & set(range(1, 129))))
    curve_ = predict(shape, payload, grid)
    top = max(p.throughput_tokens_per_s for p in curve_.points)
    knee = knee_of(curve_.points)

    assert knee is not None and plan.knee == knee.concurrency
    # The max target is the lowest load predicted to reach 95 % of the max: on a plateau, the cheaper level.
    near = min(p.concurrency for p in curve_.points if p.throughput_tokens_per_s >= NEAR_MAX * top)
    assert plan.max == max(near, plan.knee)
    assert plan.limit == 128


def test_the_doubling_estimate_uses_measured_levels_and_stops_at_the_first_failure() -> None:
    # Measured: 4 and 8 (2 minutes each, twice the prediction), 16 failed: the doubling would measure
    # 1, 2 (predicted 1 minute, scaled ×2 from the nearest measured level), 4, 8, then fail at 16.
    levels = [Measured(4, 100, 10, True, 2.0), Measured(8, 150, 12, True, 2.0), Measured(16, 0, 0, False, 0.5)]
    point = predict_point(design_for("max-throughput", "llama2-7b", "ml.g5.2xlarge").shape(), Payload(), 1)

    def minutes(p: object) -> float:
        return 1.0

    assert doubling_estimate(levels, lambda c: point, minutes) == pytest.approx(2 + 2 + 2 + 2 + 0.5)


def run_chooser(transport: FakeTransport, chooser: Chooser) -> list[LevelResult]:
    return asyncio.run(run_sweep(
        transport, workload=Workload(WorkloadOptions(), Payload(16, 4)), requests_per_level=8,
        duration_per_level_s=None, warmup=0, on_record=lambda r: None, choose=chooser))


def test_a_doubling_sweep_stops_at_the_budget_and_says_so() -> None:
    chooser = Chooser("doubling", (1, 2, 4, 8, 16), clock=REAL, emulated=False, instances=2,
                      budget_minutes=1e-9)
    results = run_chooser(FakeTransport(), chooser)

    assert [r.concurrency for r in results] == [1]  # the first level crosses the tiny budget
    assert chooser.outcome is not None and chooser.outcome.startswith("budget reached:")
    assert chooser.stopped_reason(results) == chooser.outcome
    # Endpoint-minutes: the level's wall time × 2 instances.
    assert chooser.spent == pytest.approx((results[0].ended_s - results[0].started_s) / 60 * 2)


def test_a_doubling_sweep_ends_at_the_first_failing_level() -> None:
    chooser = Chooser("doubling", (1, 2, 4, 8), clock=REAL, emulated=False, instances=1)
    results = run_chooser(FakeTransport(admit=2), chooser)  # 4 in flight: half refused

    assert [r.concurrency for r in results] == [1, 2, 4]
    assert chooser.stopped_reason(results) == results[-1].stopped_reason is not None
    assert not chooser.cut_short


def test_an_adaptive_sweep_measures_in_its_own_order_and_goes_on_past_failing_levels() -> None:
    plan = Plan(knee=4, max=8, limit=64)
    chooser = Chooser("adaptive", (), clock=REAL, emulated=False, instances=1, plan=plan)
    results = run_chooser(FakeTransport(admit=6), chooser)  # 8 fails: too many refused
    loads = [r.concurrency for r in results]

    assert loads[:2] == [4, 8] and results[1].stopped_reason is not None  # the max seed failed ...
    assert len(loads) > 2 and loads != sorted(loads)  # ... and the sweep went on, below it
    assert chooser.outcome is not None and chooser.stopped_reason(results) is None
    assert chooser.order == [str(c) for c in loads]


def test_a_level_with_no_measured_request_counts_as_failed_and_is_not_chosen_again() -> None:
    empty = LevelResult(concurrency=4, records=[], started_s=0.0, ended_s=30.0, window_start_s=0.0,
                        window_end_s=30.0, ramp_excluded=False, window_output_tokens=0.0)
    [level] = measured([empty], clock=Clock(0.5), emulated=True, instances=2)
    assert level == Measured(4, 0.0, None, False, 30 / 0.5 / 60 * 2)
    assert next_level(Plan(knee=4, max=4, limit=64), [level]).concurrency == 2  # halving, not 4 again


def test_sweep_method_resolves_auto_and_refuses_adaptive_without_a_prediction() -> None:
    assert sweep_method("auto", predicted=True, open_loop=False) == "adaptive"
    assert sweep_method("auto", predicted=False, open_loop=False) == "doubling"
    assert sweep_method("auto", predicted=True, open_loop=True) == "doubling"
    for kwargs, text in [({"predicted": False, "open_loop": False}, "give ServingSpec.profile and ServingSpec.model"),
                         ({"predicted": True, "open_loop": True}, "^Sweep.method adaptive: closed loop only")]:
        with pytest.raises(InputError, match=text):
            sweep_method("adaptive", **kwargs)
    with pytest.raises(InputError, match="^Sweep.method: 'fast' must be adaptive or doubling"):
        sweep_method("fast", predicted=True, open_loop=False)


@pytest.mark.integration  # ~60 s here: a local deploy and four levels or so
def test_bench_adaptive_measures_fewer_levels_than_doubling_and_reports_knee_and_max(tmp_path: Path) -> None:
    out = tmp_path / "run"
    thresholds = tmp_path / "gates.yaml"
    thresholds.write_text("rules:\n  - {metric: error_rate, where: 2, max: 0.05}\n")
    # 128 output tokens and a warm-up: at 32 the window of a level this short is too noisy to steer by.
    args = [*bench_args(out, requests=None, warmup="1"), "--output-tokens", "128"]
    args.remove("--concurrency"), args.remove("1,4")
    # Time scale 0.1, not 0.05: on a busy 2-core machine the emulator falls behind its clock at 40 streams
    # and the curve it then reports is not the one it replays (levels go astray, the sweep brackets longer).
    args[args.index("--time-scale") + 1] = "0.1"
    ran = sagellm(*args, "--thresholds", str(thresholds), "--budget-minutes", "30", timeout=300)
    assert ran.returncode == 0, ran.stderr
    results = results_of(out)
    sweep_ = results["sweep"]
    loads = [lv["concurrency"] for lv in results["levels"]]

    # The emulator replays the planner, but levels this short measure it with noise: confirmed or refitted.
    assert sweep_["method"] == "adaptive" and sweep_["outcome"].startswith(
        ("the prediction confirmed", "the prediction refitted", "knee and max throughput bracketed")), sweep_
    assert loads == sorted(loads) and sorted(map(int, sweep_["order"])) == loads  # stored by load
    # The predicted knee first; then the predicted max, or a refitted target if the knee departed.
    assert sweep_["order"][0] == str(sweep_["predicted_knee"])
    assert 2 in loads  # named by the thresholds
    assert results["knee"]["concurrency"] in loads and results["max_throughput"]["concurrency"] in loads
    assert 0 < sweep_["endpoint_minutes"] < sweep_["doubling_endpoint_minutes"], sweep_
    assert results["run"]["concurrency"] == loads
    assert results["stopped_reason"] is None
    report = (out / "report.md").read_text()
    assert "adaptive" in report
    json.dumps(results)
    # How few levels it takes depends on the curve measured being the one the emulator replays. Where the bench says
    # its load generator was the bottleneck, or the emulator's own loop lagged as much, that curve is this machine's
    # (beside four CPU-bound jobs: knee 21 measured for 26 replayed, and nine levels), so a long sweep is reported then.
    distorted = [lv["concurrency"] for lv in results["levels"]
                 if lv["client_bottleneck"] or (lv["server_loop_lag_ms"] or 0.0) > LOOP_LAG_MS]
    if len(loads) >= 9 and distorted:
        pytest.xfail(f"the load generator or the emulator lagged at {distorted}: the sweep measured {loads}, "
                     f"{sweep_['outcome']}; the level count is reported, not judged")
    # Doubling to the first error would measure 1, 2, 4, …, 128 and 256 (above the profile's admission limit).
    assert len(loads) < 9, sweep_


@pytest.mark.slow
def test_a_bad_sweep_is_one_line_and_exit_2(tmp_path: Path) -> None:
    args = [a for a in bench_args(tmp_path / "out") if a not in ("--concurrency", "1,4")]
    ran = sagellm(*args, "--sweep", "fast")
    assert ran.returncode == 2, ran.stderr
    assert "--sweep: 'fast' must be adaptive or doubling" in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize(("parts", "message"), [
    (lambda: {"sweep": bench.Sweep("doubling", budget_minutes=0.0)},
     "Sweep.budget_minutes: 0 must be a positive number of endpoint-minutes"),
    (lambda: {"sweep": bench.Sweep("adaptive"), "load": bench.Open((1.0,))}, "Sweep.method adaptive: closed loop only"),
])
def test_bad_sweep_options_are_refused_before_anything_runs(tmp_path: Path, parts: Any, message: str) -> None:
    served = bench.ServingSpec(profile="max-throughput", model="llama2-7b", instance="ml.g5.2xlarge")
    with pytest.raises(InputError) as exc:
        bench.run(bench.Bench(**{"serving": served, "output": bench.Output(tmp_path / "o"), **parts()}))
    assert message in str(exc.value)
    assert not (tmp_path / "o" / "results.json").exists()

"""`bench --ramp`: the steps, one continuous schedule, the ramp block's figures, and a local ramp that scales out."""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import MODEL, FakeTransport, results_of, sagellm
from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from results_helpers import RUN
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.sweep.ramp import ramp_rates, ramp_steps, run_ramp
from sagellm.bench.sweep.ramp_figures import cold_start_s, ramp_block
from sagellm.errors import InputError
from sagellm.planner import Payload, predict
from sagellm.profiles import design_for
from sagellm.results.picks import make_results
from sagellm.results.records import RequestRecord
from sagellm.results.report import render_markdown
from sagellm.results.schema import Level, Results, Teardown
from sagellm.results.summary import summarize


def test_the_default_steps_rise_from_below_one_instances_knee_to_above_the_fleets_maximum() -> None:
    design = design_for("autoscale", MODEL, "ml.g5.2xlarge", payload=Payload(256, 256))
    assert design.scaling is not None
    one = predict(design.shape(instance_count=1), design.payload, tuple(2**i for i in range(13)), design.region)
    assert one.knee is not None and one.max_throughput is not None
    rates = ramp_rates(design, steps=6)
    assert len(rates) == 6 and list(rates) == sorted(rates)
    assert rates[0] < one.knee.requests_per_s
    assert rates[-1] > design.scaling.max_capacity * one.max_throughput.requests_per_s


def test_a_plan_with_autoscaling_ramps_by_default_and_no_ramp_or_a_fixed_profile_sweeps() -> None:
    autoscale = design_for("autoscale", MODEL, "ml.g5.2xlarge", payload=Payload(256, 256))
    fixed = design_for("max-throughput", MODEL, "ml.g5.2xlarge", payload=Payload(256, 256))
    assert ramp_steps(None, (), autoscale) == ramp_rates(autoscale)
    assert ramp_steps(False, (), autoscale) == ()
    assert ramp_steps(None, (1.0, 2.0), fixed) == ()
    assert ramp_steps(True, (1.0, 2.0), fixed) == (1.0, 2.0)
    with pytest.raises(InputError, match="--ramp: give --request-rate steps"):
        ramp_steps(True, (), None)


def test_the_steps_run_back_to_back_on_one_schedule_without_draining_between_them() -> None:
    # Requests last 40–60 ms; steps last 100 ms: a sweep would wait for each level's requests to return.
    transport = FakeTransport(duration_s=(0.04, 0.06))
    records: list[RequestRecord] = []
    loop = OpenLoop((100.0, 200.0, 300.0), max_in_flight=256)
    cpu_wait = CpuWait()
    levels = asyncio.run(run_ramp(transport, workload=Workload(WorkloadOptions(), Payload(8, 4)), loop=loop,
                                  step_s=0.1, on_record=records.append))
    assert [lv.request_rate for lv in levels] == [100.0, 200.0, 300.0]
    assert [len(lv.records) for lv in levels] == [10, 20, 30]
    windows = [t for lv in levels for t in (lv.window_start_s, lv.window_end_s)]
    assert windows == pytest.approx([0, 0.1, 0.1, 0.2, 0.2, 0.3])
    # The second step starts on time while the first step's requests are still in flight.
    first_of_second = min(r.start_s for r in levels[1].records)
    last_end_of_first = max(r.end_s for r in levels[0].records)
    assert 0.1 - 1e-3 <= first_of_second < last_end_of_first
    assert len(records) == 60
    # How soon after its due time it went out is the event loop's wake-up, which needs a CPU to be on time.
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"the second step's first request sent at "
                                                        f"{first_of_second * 1000:.0f} ms (due at 100 ms)")
    assert first_of_second == pytest.approx(0.1, abs=0.02)


def record(start_s: float, e2e_s: float = 1.0, ok: bool = True) -> RequestRecord:
    return RequestRecord(concurrency=None, request_rate=1.0, worker=None, start_s=start_s, ok=ok, e2e_s=e2e_s,
                         output_tokens=20 if ok else 0, ttft_s=0.1 if ok else None)


def scaling_state(offset: float) -> dict[str, Any]:
    """The emulator's /autoscaling reply: its clock runs `offset` s ahead of the ramp's."""
    policy = {"metric": "SageMakerVariantConcurrentRequestsPerModelHighResolution", "target": 60.0, "min_capacity": 1, "max_capacity": 2,
              "scale_out_cooldown_s": 60.0, "scale_in_cooldown_s": 300.0, "period_s": 60.0, "out_datapoints": 3,
              "in_datapoints": 15, "in_period_s": 60.0, "metric_delay_s": 60.0,
              "instance_startup_s": 120.0}
    events = [(100.0, "breach", 1, 1), (280.0, "alarm-high", 1, 1), (280.0, "scale-out", 2, 1),
              (400.0, "in-service", 2, 2)]
    return {"simulated": True, "now_s": 900.0, "policy": policy,
            "events": [{"t_s": t + offset, "kind": k, "desired": d, "in_service": n, "detail": ""}
                       for t, k, d, n in events]}


def test_the_ramp_block_puts_scaling_on_the_ramps_clock_and_adds_up_its_figures() -> None:
    # One request every 10 s for 600 s; 100 ms/token (2 s e2e) while one instance serves, 40 ms/token after.
    records = [record(t, e2e_s=2.0 if t < 400 else 0.8) for t in range(0, 600, 10)]
    records[30] = record(300.0, ok=False)  # one failure while scaling out
    ramp = ramp_block(records, rates=[0.1, 0.1], step_s=300.0, scaling=scaling_state(offset=50.0),
                      scaling_offset_s=50.0, initial_instances=1, slo_ms_per_token=50.0, usd_per_instance_h=6.0,
                      interval_s=60.0)
    assert ramp.scaling == "simulated" and ramp.policy is not None and ramp.policy.instance_startup_s == 120.0
    assert (ramp.first_breach_s, ramp.first_scale_out_s, ramp.first_in_service_s) == (100.0, 280.0, 400.0)
    assert ramp.breach_to_in_service_s == 300.0
    assert [iv.instances_in_service for iv in ramp.intervals] == [1, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert [iv.instances_desired for iv in ramp.intervals] == [1, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert all(iv.requests == 6 and iv.offered_rps == pytest.approx(0.1) for iv in ramp.intervals)
    assert ramp.intervals[5].errors == 1
    assert ramp.intervals[0].ms_per_token.p50 == pytest.approx(100.0)
    assert ramp.intervals[7].ms_per_token.p50 == pytest.approx(40.0)
    assert (ramp.slo_violated_s, ramp.slo_recovered_s) == (0.0, 420.0)  # 360–420 still has four slow requests
    # Sent while scaling out (280–400): 280 … 390, twelve requests, one failed, the other eleven above the SLO.
    assert (ramp.requests_while_scaling, ramp.failed_while_scaling, ramp.above_slo_while_scaling) == (12, 1, 11)
    # One instance for 400 s, two for the last 200 s (the ramp ends at 600 s): 800 instance-seconds.
    assert ramp.instance_minutes == pytest.approx(800 / 60)
    assert ramp.cost_usd == pytest.approx(800 / 3600 * 6.0)


def test_without_simulated_scaling_the_ramp_says_so_and_counts_the_fixed_fleet() -> None:
    records = [record(t) for t in range(0, 120, 10)]
    ramp = ramp_block(records, rates=[0.1], step_s=120.0, scaling=None, scaling_offset_s=0.0,
                      initial_instances=3, slo_ms_per_token=None, usd_per_instance_h=None, interval_s=60.0)
    assert (ramp.scaling, ramp.policy, ramp.events) == ("none", None, [])
    assert [iv.instances_in_service for iv in ramp.intervals] == [None, None]
    assert (ramp.first_breach_s, ramp.breach_to_in_service_s, ramp.slo_violated_s) == (None, None, None)
    assert ramp.above_slo_while_scaling is None and ramp.cost_usd is None
    assert ramp.instance_minutes == pytest.approx(3 * 2.0)


def refused(start_s: float) -> RequestRecord:
    """A request SageMaker refused for want of a copy, as the transport records it."""
    return RequestRecord(request_rate=1.0, start_s=start_s, ok=False, e2e_s=0.05, status=400,
                         error_kind="validation", error="HTTP 400 ValidationError: Inference Component has no capacity "
                                                        "to process this request. ApplicationAutoScaling may be …")


def test_a_component_ramp_reports_copies_instances_and_the_cold_start_after_zero_copies() -> None:
    # Scaled to zero at 200 s; the requests at 300 and 310 s are refused, the one at 320 s gets its first token
    # 0.1 s later: the first caller after zero waited 20.1 s. The instance stays until released at 1400 s.
    records = [record(0.0), refused(300.0), refused(310.0), record(320.0)]
    events = [(200.0, "scale-in", 0, 0, 1), (300.0, "alarm-no-capacity", 0, 0, 1), (300.0, "scale-out", 1, 0, 1),
              (315.0, "in-service", 1, 1, 1), (500.0, "scale-in", 0, 0, 1), (560.0, "instance-released", 0, 0, 0)]
    state = {**scaling_state(0.0), "instances": 1,
             "events": [{"t_s": t, "kind": k, "desired": d, "in_service": n, "instances": i, "detail": ""}
                        for t, k, d, n, i in events]}
    ramp = ramp_block(records, rates=[0.01, 0.1], step_s=300.0, scaling=state, scaling_offset_s=0.0,
                      initial_instances=1, slo_ms_per_token=None, usd_per_instance_h=None, interval_s=60.0)
    assert ramp.capacity == "copies"
    assert ramp.cold_start_s == pytest.approx(20.1)
    assert [iv.instances_running for iv in ramp.intervals] == [None, None, None, 1, 1, 1, 1, 1, 1, 0]
    # Instance-minutes count the instance held while idle, not the copies: one instance until 560 s.
    assert ramp.instance_minutes == pytest.approx(560 / 60)


def test_the_cold_start_comes_from_the_records_alone_on_any_target() -> None:
    # No scaling read at all (e.g. an endpoint whose scaling events are not read): the bench's own records tell.
    records = [record(0.0), record(100.0, ok=False), refused(300.0), refused(310.0), record(320.0)]
    ramp = ramp_block(records, rates=[0.01, 0.1], step_s=300.0, scaling=None, scaling_offset_s=0.0,
                      initial_instances=1, slo_ms_per_token=None, usd_per_instance_h=None, interval_s=60.0)
    assert ramp.scaling == "none" and ramp.cold_start_s == pytest.approx(20.1)
    # A failure that is not SageMaker's no-capacity error starts no cold start; nothing served after: none.
    assert cold_start_s([record(0.0), record(100.0, ok=False), record(200.0)]) is None
    assert cold_start_s([record(0.0), refused(300.0)]) is None


def test_a_scale_to_zero_ramps_headline_is_the_step_served_after_the_cold_start_not_the_idle_one() -> None:
    # The user's ramp: one request in a 45-minute idle step, then a step whose first requests are refused while the
    # copy starts (3 of 30 here: over the 5 % that makes a level unusable). The refusals are the cold start.
    idle = [replace(record(0.0), request_rate=0.0003)]
    refusals = [replace(refused(2700.0 + 10 * i), request_rate=0.1) for i in range(3)]
    served = [replace(record(2730.0 + 10 * i), request_rate=0.1) for i in range(27)]

    def headline(busy: list[RequestRecord]) -> Results:
        levels = [Level(**summarize(idle, window_start_s=0, window_end_s=2700).model_dump()),
                  Level(**summarize(busy, window_start_s=2700, window_end_s=3000).model_dump())]
        return make_results(RUN, levels, usd_per_h=1.13, teardown=Teardown(status="destroyed"))

    results = headline(refusals + served)
    assert results.levels[1].refused_no_capacity == 3 and results.levels[1].error_rate == pytest.approx(0.1)
    assert results.knee is not None and results.max_throughput is not None
    assert (results.knee.request_rate, results.max_throughput.request_rate, results.cost.at_request_rate) == (
        0.1, 0.1, 0.1)
    # $/1M tokens at the served step's 1.8 tokens/s, not at the idle step's 0.007.
    assert results.cost.usd_per_1m_tokens == pytest.approx(1.13 / (1.8 * 3600) * 1e6, rel=0.01)
    report = render_markdown(results)
    assert "- Knee: request rate **0.1/s**" in report
    assert "validation 3 (3 refused for want of a copy: the cold start" in report
    # Only the refusals are set aside: the same step failing for another reason is still unusable.
    overloaded = [replace(r, error="HTTP 429", error_kind="overloaded") for r in refusals]
    assert headline(overloaded + served).knee.request_rate == 0.0003  # type: ignore[union-attr]


def test_scaling_observed_on_an_endpoint_puts_its_copies_and_instances_on_the_ramps_clock() -> None:
    events = [{"t_s": 50.0, "kind": "observed", "desired": 1, "in_service": 1, "instances": 1},
              {"t_s": 250.0, "kind": "activity", "desired": 2, "in_service": 1, "instances": 2,
               "detail": "Successful: Setting desired copy count to 2."},
              {"t_s": 260.0, "kind": "observed", "desired": 2, "in_service": 1, "instances": 2},
              {"t_s": 450.0, "kind": "observed", "desired": 2, "in_service": 2, "instances": 2}]
    state = {"observed": True, "now_s": 500.0, "desired": 2, "in_service": 2, "instances": 2, "events": events}
    ramp = ramp_block([record(t) for t in range(0, 600, 10)], rates=[0.1, 0.1], step_s=300.0, scaling=state,
                      scaling_offset_s=50.0, initial_instances=1, slo_ms_per_token=None, usd_per_instance_h=None,
                      interval_s=60.0)
    assert (ramp.scaling, ramp.policy, ramp.capacity) == ("observed", None, "copies")
    assert [e.t_s for e in ramp.events] == [0.0, 200.0, 210.0, 400.0]
    assert [iv.instances_in_service for iv in ramp.intervals] == [1, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    assert [iv.instances_running for iv in ramp.intervals][:4] == [1, 1, 1, 2]
    assert ramp.requests_while_scaling == 20  # sent from 200 s (desired 2 > current 1) to 400 s


@pytest.mark.parametrize(("extra", "message"), [
    (["--ramp", "--request-rate", "1,2", "--requests-per-level", "5"], "--requests-per-level: a ramp's steps"),
    (["--request-rate", "1,2", "--instance-startup", "0"], "--instance-startup: 0 must be > 0 seconds"),
    (["--request-rate", "1,2", "--repeats", "2"], "--repeats: a ramp runs once"),
    (["--ramp", "--concurrency", "1,2"], "--ramp/--concurrency: a ramp is open loop"),
])
@pytest.mark.slow
def test_bad_ramp_options_are_one_line_and_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    ran = sagellm("bench", "--profile", "autoscale", "--model", MODEL, "--instance", "ml.g5.2xlarge",
                  "--out", str(tmp_path / "out"), *extra)
    assert ran.returncode == 2, ran.stderr
    assert message in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()


# The autoscale profile, sized so that a few requests a second breach its target (4 requests in flight per
# instance; 3 req/s of 96-token replies hold ~6 or more) and one instance may become two, while 0.5 req/s
# (~1 in flight) does not: the standard target (the planner's knee, 32 in flight) would need far more load.
SMALL_AUTOSCALE = """\
name: autoscale-small
extends: autoscale
initial_instance_count: 1
autoscaling:
  min_capacity: 1
  max_capacity: 2
  target_value: 4
  scale_out_cooldown_s: 60
"""


@pytest.mark.integration
def test_a_local_ramp_of_the_autoscale_profile_scales_out_and_reports_the_delay_and_the_latency(
        tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "autoscale-small.yaml").write_text(SMALL_AUTOSCALE)
    out = tmp_path / "out"
    # 96-token replies at time scale 0.1: one instance then runs about twice the sequences two do, a
    # latency gap of ~25 % (10 ms/token). With 32 tokens at 0.05 the gap was ~10 %, and one busy-machine
    # run in four saw the emulator's lag invert it.
    ran = sagellm("bench", "--profile", "autoscale-small", "--profiles-dir", str(profiles), "--model", MODEL,
                  "--instance", "ml.g5.2xlarge", "--time-scale", "0.1", "--output-tokens", "96",
                  "--request-rate", "0.5,3,3.5,4", "--duration-per-level", "120", "--instance-startup", "60",
                  "--slo-ms-per-token", "40", "--out", str(out), timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    ramp = results_of(out)["ramp"]
    assert ramp["scaling"] == "simulated" and ramp["rates"] == [0.5, 3.0, 3.5, 4.0]
    kinds = [e["kind"] for e in ramp["events"]]
    assert "scale-out" in kinds and kinds.index("in-service") > kinds.index("scale-out")
    # The measured delay is the simulation's, end to end through the bench: from the breaching 10 s datapoint,
    # whole datapoints until three in a row are above the target, 60 s to act on the third, then 60 s of instance
    # start-up: on the datapoint grid, and at least 2 × 10 + 60 + 60 s.
    delay = ramp["breach_to_in_service_s"]
    extra = (delay - (60 + 60)) / 10
    assert extra >= 2 - 0.05 and abs(extra - round(extra)) < 0.05, delay
    assert ramp["policy"]["metric"] == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    assert ramp["first_scale_out_s"] < ramp["first_in_service_s"] <= 480
    # One instance before the new one is in service, two after; the load kept coming meanwhile.
    ivs = ramp["intervals"]
    before = [iv for iv in ivs if 150 <= iv["start_s"] and iv["start_s"] + 30 <= ramp["first_in_service_s"]]
    after = [iv for iv in ivs if iv["start_s"] >= ramp["first_in_service_s"] and iv["start_s"] + 30 <= 480]
    assert before and after
    assert {iv["instances_in_service"] for iv in before} == {1}
    assert {iv["instances_in_service"] for iv in after} == {2}
    assert ramp["requests_while_scaling"] > 0 and ramp["above_slo_while_scaling"] is not None
    report = (out / "report.md").read_text()
    assert "## Ramp" in report and "breach → new instance InService" in report and "| scale-out |" in report
    assert (out / "ramp.png").stat().st_size > 10_000
    assert ramp["cost_usd"] > 0 and ramp["instance_minutes"] > 8  # 1 instance × 8 minutes at least
    # Its header says ramp, with the instance-minutes it kept (it said "Sweep: doubling, 0.00 endpoint-minutes").
    assert f"- Ramp: 4 steps of 120 s back to back, {ramp['instance_minutes']:.2f} endpoint-minutes" in report
    assert "Sweep:" not in report
    sweep = results_of(out)["sweep"]
    assert sweep["method"] == "ramp" and sweep["order"] == ["0.5/s", "3/s", "3.5/s", "4/s"]
    assert sweep["endpoint_minutes"] >= 8  # 480 simulated seconds × 1 instance, and the drain
    # Every step says whether the load generator kept up; one that did not is said on stderr too.
    steps = results_of(out)["levels"]
    assert all("client_bottleneck" in lv and lv["client_loop_lag_ms"] is not None for lv in steps)
    flagged = [lv["request_rate"] for lv in steps if lv["client_bottleneck"]]
    assert ran.stderr.count("sagellm: the load generator was the bottleneck") == len(flagged)
    # Past one instance's knee the latency is higher than once two instances share the load. A load generator
    # that could not keep its schedule (a busy machine) sent late and in bursts, which no stamp undoes: then the
    # comparison is reported, not judged, as the bench itself says of such a level.
    slow = statistics.mean(iv["ms_per_token"]["p50"] for iv in before)
    fast = statistics.mean(iv["ms_per_token"]["p50"] for iv in after)
    if flagged:
        pytest.xfail(f"the load generator was the bottleneck at {flagged}/s: ms/token p50 {slow:.1f} on one instance "
                     f"and {fast:.1f} on two is reported, not judged")
    assert slow > fast
    # The three datapoints in a row from the first breach: a datapoint dips below the target only when fewer
    # requests were in flight than the rate gives (a client or an emulator short of CPU, in the suite's parallel
    # workers): then the longer delay is reported, not judged.
    if delay > 2 * 10 + 60 + 60 + 0.5:
        pytest.xfail(f"breach → in service took {delay:.0f} s: a datapoint after the breach fell below the target "
                     "(fewer requests in flight than the rate gives on a busy machine)")


@pytest.mark.integration
def test_a_local_scale_to_zero_ramp_reports_the_cold_start_after_zero_copies(tmp_path: Path) -> None:
    # One request, then idle: the copy scales in to zero (15 idle one-minute datapoints and the metric delay, ~17 min)
    # and its idle instance is released 20 min later; the second step's first request is refused and its alarm
    # starts a copy and an instance (120 s).
    out = tmp_path / "out"
    ran = sagellm("bench", "--profile", "scale-to-zero", "--model", MODEL, "--time-scale", "0.01",
                  "--request-rate", "0.0003,0.05", "--duration-per-level", "2700", "--instance-startup", "120",
                  "--out", str(out), timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    ramp = results_of(out)["ramp"]
    assert ramp["capacity"] == "copies"
    # The second step's refusals are its cold start: the knee and the cost are that step, not the idle first one.
    assert results_of(out)["knee"]["request_rate"] == results_of(out)["cost"]["at_request_rate"] == 0.05
    kinds = [e["kind"] for e in ramp["events"]]
    assert kinds[:6] == ["alarm-low", "scale-in", "instance-released", "alarm-no-capacity", "scale-out", "in-service"]
    zero, released, alarm, joined = (ramp["events"][i] for i in (1, 2, 3, 5))
    assert (zero["desired"], zero["instances"], released["instances"]) == (0, 1, 0)
    assert released["t_s"] - zero["t_s"] == pytest.approx(1200)  # the instance idles through the release cooldown
    assert (joined["in_service"], joined["instances"]) == (1, 1)
    assert 30 <= alarm["t_s"] - 2700 <= 60  # the 30 s alarm period, then its 30 s delay
    # Refused from the step's start until the copy is in service, then the first token: the cold start.
    assert ramp["cold_start_s"] == pytest.approx(joined["t_s"] - 2700, abs=20)
    assert ramp["cold_start_s"] > 120
    report = (out / "report.md").read_text()
    assert "cold start (first request after zero copies → first token)" in report and "| alarm-no-capacity |" in report
    assert "| instance-released |" in report

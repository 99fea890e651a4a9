"""Target tracking on a fake clock: the formula, alarm evaluation periods, delays, cooldowns, clamping.

The tests hold every request 60 s, so requests in flight per instance equal the old invocations per
instance per minute, and use 60 s periods to keep the arithmetic readable."""

from __future__ import annotations

import math

import pytest

from sagellm.catalog import instances
from sagellm.emulator.serving.autoscaling import (
    INSTANCE_RELEASE_COOLDOWN_S,
    INSTANCE_STARTUP_S,
    EndpointScaling,
    ManagedInstances,
    Policy,
    TargetTracking,
)
from sagellm.profiles.plan import CONCURRENT_REQUESTS_PER_MODEL, ComputeRequirements, ScalingPlan

HOLD_S = 60.0  # how long each driven request stays in flight
# Per loop: the loop itself (so no later loop is given its id while it is here) and when its requests in flight end.
_held: dict[int, tuple[TargetTracking, list[float]]] = {}


def policy(**kw: float) -> Policy:
    """60 requests in flight per instance, 1–4 instances, 60 s periods; short delays unless a test asks."""
    base: dict = {"metric": CONCURRENT_REQUESTS_PER_MODEL, "target": 60.0, "min_capacity": 1, "max_capacity": 4,
                  "period_s": 60.0, "scale_out_cooldown_s": 60.0, "scale_in_cooldown_s": 300.0,
                  "instance_startup_s": 300.0, "metric_delay_s": 60.0}
    return Policy(**{**base, **kw})


def _finish(tt: TargetTracking, held: list[float], t_s: float) -> None:
    for end in sorted(e for e in held if e <= t_s):
        tt.finished(end)
        held.remove(end)


def drive(tt: TargetTracking, rate_per_s: float, until_s: float, step_s: float = 0.5,
          hold_s: float = HOLD_S) -> None:
    """Requests at a constant rate from the loop's current time until `until_s`, each held `hold_s`."""
    held = _held.setdefault(id(tt), (tt, []))[1]
    start = tt.now_s
    t, sent = start + step_s / 2, 0  # mid-step: never on a period boundary
    while t < until_s:
        _finish(tt, held, t)
        due = math.floor(rate_per_s * (t - start) + 0.5)
        for _ in range(due - sent):
            tt.started(t)
            held.append(t + hold_s)
        sent, t = due, t + step_s
    _finish(tt, held, until_s)
    tt.advance(until_s)


def kinds(tt: TargetTracking) -> list[str]:
    return [e.kind for e in tt.events]


def test_the_desired_capacity_is_ceil_of_in_service_times_metric_over_target_clamped() -> None:
    tt = TargetTracking(policy(), in_service=2)
    assert tt.wanted(60.0) == 2
    assert tt.wanted(61.0) == 3  # ceil(2 × 61 / 60)
    assert tt.wanted(90.0) == 3
    assert tt.wanted(91.0) == 4
    assert tt.wanted(1000.0) == 4  # clamped to max
    assert tt.wanted(0.0) == 1  # clamped to min


def test_the_metric_is_requests_in_flight_per_instance_at_each_period_end() -> None:
    tt = TargetTracking(policy(), in_service=2)
    drive(tt, 2.0, 120.0)  # 2 req/s held 60 s: 120 in flight over 2 instances, 60 per instance
    assert [d.end_s for d in tt.datapoints] == [60.0, 120.0]
    assert [d.value for d in tt.datapoints] == pytest.approx([60.0, 60.0])
    assert "breach" not in kinds(tt)  # at the target, not above it


def test_scale_out_needs_three_datapoints_above_target_then_the_metric_delay() -> None:
    tt = TargetTracking(policy(), in_service=2)
    drive(tt, 3.0, 180.0 + 59.0)  # 90 per instance per minute: three datapoints above 60 by 180 s
    assert "scale-out" not in kinds(tt)  # the third datapoint is acted on 60 s after its period
    assert tt.events[0].kind == "breach" and tt.events[0].t_s == 60.0
    drive(tt, 3.0, 240.0)
    out = next(e for e in tt.events if e.kind == "scale-out")
    assert out.t_s == 240.0
    assert (out.desired, out.in_service) == (3, 2)  # ceil(2 × 90 / 60) = 3, not yet in service


def test_two_datapoints_above_target_do_not_alarm() -> None:
    tt = TargetTracking(policy(), in_service=2)
    drive(tt, 3.0, 120.0)
    drive(tt, 1.0, 600.0)
    assert "scale-out" not in kinds(tt)
    assert tt.desired == 2


def test_new_capacity_joins_after_the_startup_delay_and_nothing_else_starts_meanwhile() -> None:
    tt = TargetTracking(policy(instance_startup_s=300.0), in_service=2)
    drive(tt, 5.0, 240.0)  # 150 per instance: wants ceil(2 × 150 / 60) = 5 → clamped to 4
    assert (tt.desired, tt.in_service) == (4, 2)
    drive(tt, 5.0, 539.0)
    assert tt.in_service == 2 and tt.updating
    assert tt.advance(540.0) == 2  # both new instances in service at 240 + 300
    assert (tt.desired, tt.in_service) == (4, 4)
    assert [e.t_s for e in tt.events if e.kind == "in-service"] == [540.0, 540.0]


def test_a_scale_out_waits_while_the_endpoint_is_updating() -> None:
    tt = TargetTracking(policy(instance_startup_s=600.0, max_capacity=10), in_service=1)
    drive(tt, 1.5, 240.0)  # 90 per instance → 2
    assert tt.desired == 2
    drive(tt, 6.0, 600.0)  # load grows while the first instance starts: the alarm fires, the update waits
    blocked = [e for e in tt.events if e.kind == "blocked"]
    assert blocked and "Updating" in blocked[0].detail
    assert tt.desired == 2


def test_the_scale_out_cooldown_counts_from_when_the_previous_scale_out_took_effect() -> None:
    tt = TargetTracking(policy(instance_startup_s=120.0, scale_out_cooldown_s=300.0, max_capacity=10),
                        in_service=1)
    drive(tt, 1.5, 240.0)  # scale out 1 → 2 at 240, in service at 360
    drive(tt, 6.0, 900.0)  # still above the target with 2 instances
    outs = [e.t_s for e in tt.events if e.kind == "scale-out"]
    assert outs[0] == 240.0
    assert len(outs) == 2 and outs[1] >= 360.0 + 300.0  # not before the cooldown after in-service
    assert any(e.kind == "blocked" and "cooldown" in e.detail for e in tt.events)


def test_scale_in_needs_fifteen_datapoints_below_ninety_percent_and_respects_its_cooldown() -> None:
    tt = TargetTracking(policy(scale_in_cooldown_s=600.0, min_capacity=1), in_service=4)
    drive(tt, 1.0, 14 * 60.0 + 60.0)  # 15 per instance, far below 54: 14 datapoints only by 840 + delay
    assert "scale-in" not in kinds(tt)
    drive(tt, 1.0, 16 * 60.0)  # the 15th datapoint (900 s) is acted on at 960 s
    first = next(e for e in tt.events if e.kind == "scale-in")
    assert first.t_s == 960.0 and first.desired == 1 == first.in_service  # ceil(4 × 15 / 60) = 1
    assert tt.desired == 1


def test_the_scale_in_cooldown_blocks_a_second_scale_in() -> None:
    tt = TargetTracking(policy(scale_in_cooldown_s=900.0, min_capacity=1, max_capacity=8), in_service=8)
    drive(tt, 4.0, 16 * 60.0)  # 30 per instance → ceil(8 × 30 / 60) = 4 at 960
    assert tt.in_service == 4
    drive(tt, 0.5, 40 * 60.0)  # 7.5 per instance would take it to 1, but not within 900 s of the first
    ins = [e.t_s for e in tt.events if e.kind == "scale-in"]
    assert ins[0] == 960.0 and all(t >= 960.0 + 900.0 for t in ins[1:])


def test_an_idle_period_reports_zero_in_flight_and_breaks_an_alarm() -> None:
    tt = TargetTracking(policy(), in_service=2)
    drive(tt, 3.0, 120.0)
    drive(tt, 0.0, 180.0)  # a silent minute: the last requests end before 180 s
    drive(tt, 3.0, 240.0)
    assert tt.datapoints[2].value == 0.0
    tt.advance(300.0)
    assert "scale-out" not in kinds(tt)


def test_the_default_startup_is_the_published_end_to_end_figure() -> None:
    assert INSTANCE_STARTUP_S == 525.0
    scaling = ScalingPlan(min_capacity=1, max_capacity=2, target_value=1.0)
    assert Policy.of(scaling).instance_startup_s == 525.0


def test_the_policy_is_the_plans_metric_target_period_and_cooldowns() -> None:
    scaling = ScalingPlan(min_capacity=2, max_capacity=4, target_value=32.0, scale_in_cooldown_s=300,
                          scale_out_cooldown_s=60)
    p = Policy.of(scaling)
    assert (p.metric, p.target, p.period_s) == ("SageMakerVariantConcurrentRequestsPerModelHighResolution", 32.0, 10)
    assert (p.min_capacity, p.max_capacity, p.scale_out_cooldown_s, p.scale_in_cooldown_s) == (2, 4, 60, 300)


def test_about_two_in_flight_per_instance_never_scales_and_well_above_the_target_does() -> None:
    # A ramp at 4 req/s, each request 1 s long, over 2 instances: ~2 in flight per instance against 32.
    scaling = ScalingPlan(min_capacity=2, max_capacity=4, target_value=32.0)
    calm, busy = (TargetTracking(Policy.of(scaling), in_service=2) for _ in range(2))
    drive(calm, 4.0, 900.0, hold_s=1.0)
    drive(busy, 4.0, 300.0, hold_s=30.0)  # 120 in flight, 60 per instance
    assert max(d.value for d in calm.datapoints) <= 3 and "scale-out" not in kinds(calm)
    assert calm.desired == 2
    assert "scale-out" in kinds(busy) and busy.desired == 4


def copy_policy(**kw: float) -> Policy:
    """Copies of an inference component, scaling from zero to four."""
    from sagellm.profiles.plan import CONCURRENT_REQUESTS_PER_COPY

    return policy(metric=CONCURRENT_REQUESTS_PER_COPY, min_capacity=0, **kw)


def fleet(copies: dict[str, int], *, accelerators: dict[str, int] | None = None, min_count: int = 0,
          max_count: int = 4, initial: int = 1) -> ManagedInstances:
    """Managed instances of ml.g5.12xlarge (4 GPUs) under components whose copies take 2 GPUs each (two per
    instance) unless `accelerators` says otherwise; the policy's 300 s start-up."""
    gpus = accelerators or {}
    compute = {name: ComputeRequirements(accelerators=gpus.get(name, 2), cpu_cores=1, min_memory_mib=1024)
               for name in copies}
    return ManagedInstances(instances()["ml.g5.12xlarge"], compute, dict(copies), initial_count=initial,
                            min_count=min_count, max_count=max_count, instance_startup_s=300.0)


def component(in_service: int = 1, **kw: float) -> TargetTracking:
    """One component's copies on their own managed instances."""
    return TargetTracking(copy_policy(**kw), in_service=in_service, fleet=fleet({"a": in_service}), component="a")


def test_copies_that_fit_on_a_running_instance_start_faster_than_ones_that_need_another() -> None:
    tt = component()
    assert tt.instances == 1
    drive(tt, rate_per_s=3.0, until_s=600.0)  # 180 in flight per copy: wants 3 copies, 2 per instance
    out = next(e for e in tt.events if e.kind == "scale-out")
    in_service = [e for e in tt.events if e.kind == "in-service"]
    assert out.desired == 3 and out.instances == 2  # the third copy needs a second instance
    assert [round(e.t_s - out.t_s) for e in in_service[:2]] == [round(300.0 * 2.28 / 5.028), 300]


def test_a_component_scales_in_to_zero_copies_and_its_instance_goes_after_the_release_cooldown() -> None:
    tt = component(scale_in_cooldown_s=0.0)
    scaling = EndpointScaling({"a": tt}, "a", tt.fleet)
    scaling.advance(15 * 60.0 + 120.0)  # 15 idle datapoints, then the metric delay: zero copies at 960 s
    assert (tt.in_service, tt.desired, tt.instances) == (0, 0, 1)  # the idle instance stays ...
    scaling.advance(960.0 + INSTANCE_RELEASE_COOLDOWN_S - 1)
    assert tt.instances == 1
    scaling.advance(960.0 + INSTANCE_RELEASE_COOLDOWN_S)  # ... 20 min after the last endpoint operation
    assert tt.instances == 0
    assert [(e.kind, e.instances) for e in tt.events] == [("alarm-low", 1), ("scale-in", 1),
                                                          ("instance-released", 0)]
    assert tt.events[-1].t_s == 960.0 + 1200.0


def test_a_copy_that_comes_back_before_the_release_starts_on_the_idle_instance() -> None:
    tt = component(scale_in_cooldown_s=0.0)
    scaling = EndpointScaling({"a": tt}, "a", tt.fleet)
    scaling.advance(1020.0)  # zero copies at 960 s; the instance is idle
    tt.no_capacity(1000.0 + 20.0)
    scaling.advance(1020.0 + 60.0 + 300.0)  # the alarm by 1080 s, a copy's start-up only (136 s), not 300 s
    out = next(e for e in tt.events if e.kind == "scale-out")
    joined = next(e for e in tt.events if e.kind == "in-service")
    assert round(joined.t_s - out.t_s) == round(300.0 * 2.28 / 5.028)
    assert "instance-released" not in kinds(tt) and tt.instances == 1


def test_a_request_at_zero_copies_fires_the_no_capacity_alarm_and_one_copy_starts_on_a_new_instance() -> None:
    tt = TargetTracking(copy_policy(), in_service=0, fleet=fleet({"a": 0}, initial=0), component="a")
    assert tt.instances == 0
    tt.no_capacity(10.0)
    tt.no_capacity(20.0)  # the same 30 s period: one alarm
    tt.advance(59.0)
    assert tt.desired == 0  # the period ends at 30 s, the alarm acts 30 s later
    tt.advance(60.0)
    assert (tt.desired, tt.in_service, tt.instances) == (1, 0, 1)
    tt.no_capacity(70.0)  # still failing while the copy starts: no second copy
    tt.advance(60.0 + 300.0)
    assert (tt.desired, tt.in_service) == (1, 1)
    assert [e.kind for e in tt.events] == ["alarm-no-capacity", "scale-out", "in-service"]
    assert tt.no_capacity_failures == 3


def test_datapoints_from_before_zero_copies_do_not_count_towards_the_next_scale_in() -> None:
    tt = component(scale_in_cooldown_s=0.0)
    tt.advance(1020.0)  # scaled in to zero at 960 s
    tt.no_capacity(1000.0)
    tt.advance(1000.0 + 60.0 + 300.0)  # the alarm at 1050 s, the copy (on the idle instance) 136 s later
    assert tt.in_service == 1
    joined = next(e.t_s for e in tt.events if e.kind == "in-service")
    tt.advance(joined + 14 * 60.0)  # idle again, but only 14 datapoints since the gap
    assert tt.in_service == 1
    tt.advance(joined + 15 * 60.0 + 60.0)
    assert tt.in_service == 0


def test_each_component_scales_on_its_own_and_the_instances_follow_the_sum_of_their_accelerators() -> None:
    shared = fleet({"busy": 1, "idle": 1}, accelerators={"busy": 2, "idle": 3})
    busy, idle = (TargetTracking(copy_policy(max_capacity=4), in_service=1, fleet=shared, component=name)
                  for name in ("busy", "idle"))
    scaling = EndpointScaling({"busy": busy, "idle": idle}, "busy", shared)
    assert shared.count == 2  # 2 + 3 GPUs on 4-GPU instances
    t, held = 0.25, []
    while t < 600.0:  # 3 requests/s held 60 s at the busy component only: 180 in flight per copy
        scaling.advance(t)
        for end in [e for e in held if e <= t]:
            busy.finished(end)
            held.remove(end)
        for _ in range(3 if t % 1.0 < 0.5 else 0):
            busy.started(t)
            held.append(t + HOLD_S)
        t += 0.5
    scaling.advance(600.0)
    assert busy.desired == 3 and idle.desired == 1  # the idle component's copies do not follow the busy one's
    assert [e.kind for e in idle.events] == []
    # 3 × 2 + 3 GPUs: three instances, though the busy component's copies alone would fit on two
    assert shared.count == 3 and busy.instances == idle.instances == 3
    scaling.advance(900.0)
    assert busy.in_service == 3


def test_copies_beyond_max_instance_count_do_not_start() -> None:
    tt = TargetTracking(copy_policy(max_capacity=4), in_service=1, fleet=fleet({"a": 1}, max_count=1),
                        component="a")
    drive(tt, rate_per_s=3.0, until_s=600.0)  # wants 3 copies; one instance holds 2
    assert tt.desired == 2 and tt.instances == 1
    assert any(e.kind == "blocked" and "MaxInstanceCount" in e.detail for e in tt.events)


def test_high_resolution_datapoints_scale_an_idle_variant_in_after_fifteen_minutes_not_150_s() -> None:
    tt = TargetTracking(policy(period_s=10.0), in_service=2)
    tt.advance(959.0)  # 90 idle 10-s datapoints by 900 s: 15 one-minute ones, acted on at 960 s
    assert len(tt.datapoints) > 15 and "scale-in" not in kinds(tt)
    tt.advance(960.0)
    assert [(e.kind, e.t_s) for e in tt.events] == [("alarm-low", 960.0), ("scale-in", 960.0)]
    assert "15 datapoints of 60 s" in tt.events[0].detail and tt.in_service == 1


def test_a_component_under_steady_light_load_never_scales_to_zero_copies() -> None:
    tt = component(period_s=10.0, target=4.0, scale_in_cooldown_s=0.0)
    scaling = EndpointScaling({"a": tt}, "a", tt.fleet)
    start = 0.05
    while start < 2 * 3600.0:  # a 1-s request every 10.2 s: most 10-s datapoints find none in flight
        scaling.advance(start)
        tt.started(start)
        scaling.advance(start + 1.0)
        tt.finished(start + 1.0)
        start += 10.2
    zeros = longest = 0
    for d in tt.datapoints:
        zeros = zeros + 1 if d.value == 0 else 0
        longest = max(longest, zeros)
    assert longest >= 15  # 15 of them in a row read 0, but no 15 minutes do
    assert "scale-in" not in kinds(tt) and (tt.in_service, tt.desired) == (1, 1)


def test_a_component_idle_for_fifteen_minutes_after_its_last_request_scales_in_to_zero_copies() -> None:
    tt = component(period_s=10.0, target=4.0, scale_in_cooldown_s=0.0)
    tt.started(5.0)
    tt.finished(15.0)  # in flight at the 10-s datapoint: the first minute averages above zero
    tt.advance(15.0 + 15 * 60.0)
    assert tt.in_service == 1  # the minutes 1–15 are all idle by 960 s, acted on at 1020 s
    tt.advance(1019.0)
    assert tt.in_service == 1
    tt.advance(1020.0)
    assert (tt.in_service, tt.desired) == (0, 0)
    assert [(e.kind, e.t_s) for e in tt.events] == [("alarm-low", 1020.0), ("scale-in", 1020.0)]

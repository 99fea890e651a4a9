"""The `ramp` block of results.json: a time series per interval, the scaling events, and what they add up to.

All times are simulated seconds from the ramp's first request (the records' clock). The scaling events come
from the emulator's simulated scaling (local target) or from what a SageMaker endpoint's control plane showed
while the ramp ran (`targets.scaling_watch`), each on its own clock; `scaling_offset_s` (that clock when the ramp
started) moves them onto the ramp's. Definitions (README "Autoscaling under a ramp"):
- a request belongs to the interval it was *sent* in; `achieved_rps` counts ok completions instead;
- over the SLO: an ok request slower than `slo_ms_per_token` (e2e ÷ output tokens), and an interval whose
  p50 ms/token is over it or that has a failed request;
- while scaling: from a scale-out to the last of its instances InService (desired > in service);
- instance-minutes: instances in service over the ramp (billing while an instance starts is not counted); for
  inference components the instances held for the copies (idle ones until managed scaling releases them);
- cold start: from the first request refused for want of a copy (SageMaker's no-capacity error) to the first
  token of the first request sent at or after it that succeeded: what the bench itself saw, on any target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sagellm.results.records import RequestRecord
from sagellm.results.schema import RampInterval, RampRecord, ScalingEvent, ScalingPolicyRecord
from sagellm.results.summary import stats

DEFAULT_INTERVAL_S = 30.0  # half a metric period: fine enough to see an instance join


def _ms_per_token(r: RequestRecord) -> float | None:
    return r.e2e_s * 1000 / r.output_tokens if r.ok and r.output_tokens else None


def _capacity_at(events: Sequence[ScalingEvent], t_s: float, initial: int | None) -> tuple[int | None, int | None]:
    """Desired and in-service instances at `t_s` (the last event at or before it)."""
    desired = in_service = initial
    for e in events:
        if e.t_s > t_s:
            break
        desired, in_service = e.desired, e.in_service
    return desired, in_service


def _scaling_windows(events: Sequence[ScalingEvent], end_s: float) -> list[tuple[float, float]]:
    """Spans where a scale-out was under way (desired above in service)."""
    out: list[tuple[float, float]] = []
    start: float | None = None
    for e in events:
        if e.desired > e.in_service and start is None:
            start = e.t_s
        elif e.desired <= e.in_service and start is not None:
            out.append((start, e.t_s))
            start = None
    if start is not None:
        out.append((start, end_s))
    return out


def _instance_minutes(events: Sequence[ScalingEvent], initial: int, end_s: float) -> float:
    """Instances × minutes over the ramp: those in service, or (inference components) those held for the copies."""
    def held(e: ScalingEvent) -> int:
        return e.in_service if e.instances is None else e.instances

    t, n, total = 0.0, initial, 0.0
    for e in events:
        if e.t_s <= 0:
            n = held(e)
            continue
        if e.t_s >= end_s:
            break
        total += n * (e.t_s - t)
        t, n = e.t_s, held(e)
    return (total + n * (end_s - t)) / 60


def ramp_block(records: Sequence[RequestRecord], *, rates: Sequence[float], step_s: float,
               scaling: dict[str, Any] | None, scaling_offset_s: float, initial_instances: int,
               slo_ms_per_token: float | None, usd_per_instance_h: float | None,
               interval_s: float = DEFAULT_INTERVAL_S) -> RampRecord:
    """The ramp's time series and figures from its records (simulated clock) and the scaling state: the emulator's
    (`simulated`), or what a SageMaker endpoint showed (`observed`)."""
    simulated = bool(scaling and scaling.get("simulated"))
    seen = simulated or bool(scaling and scaling.get("observed"))
    events = _events(scaling, scaling_offset_s) if seen else []
    sent = sorted((r for r in records if not r.warmup), key=lambda r: r.start_s)
    end_s = max([len(rates) * step_s, *(r.end_s for r in sent)])
    slo = _Slo(slo_ms_per_token)
    intervals = _intervals(sent, events, end_s, interval_s, initial_instances if seen else None, slo)
    violated, recovered = slo.violated_and_recovered(intervals)
    copies = seen and (scaling or {}).get("instances") is not None
    return RampRecord(
        rates=list(rates), step_s=step_s, interval_s=interval_s,
        scaling="simulated" if simulated else "observed" if seen else "none",
        policy=_policy(scaling) if simulated else None, intervals=intervals, events=events,
        **_scaling_times(events), slo_ms_per_token=slo_ms_per_token, slo_violated_s=violated,
        slo_recovered_s=recovered, **_while_scaling(sent, events, end_s, slo),
        **_fleet_cost(events, initial_instances, end_s, usd_per_instance_h),
        capacity="copies" if copies else "instances", cold_start_s=cold_start_s(sent))


def _scaling_times(events: Sequence[ScalingEvent]) -> dict[str, float | None]:
    """When the target was first breached, the fleet first scaled out, and the new instance came InService."""
    breach, scale_out = _first(events, "breach"), _first(events, "scale-out")
    in_service_at = next((e.t_s for e in events if e.kind == "in-service" and scale_out is not None
                          and e.t_s >= scale_out), None)
    return {"first_breach_s": breach, "first_scale_out_s": scale_out, "first_in_service_s": in_service_at,
            "breach_to_in_service_s": in_service_at - breach if in_service_at is not None and breach is not None
            else None}


def _while_scaling(sent: Sequence[RequestRecord], events: Sequence[ScalingEvent], end_s: float,
                   slo: _Slo) -> dict[str, int | None]:
    """The requests sent while the fleet was scaling out: how many, how many failed, how many missed the SLO."""
    windows = _scaling_windows(events, end_s)
    scaling_sent = [r for r in sent if any(a <= r.start_s < b for a, b in windows)]
    return {"requests_while_scaling": len(scaling_sent), "failed_while_scaling": sum(not r.ok for r in scaling_sent),
            "above_slo_while_scaling": slo.count_above(scaling_sent)}


def _fleet_cost(events: Sequence[ScalingEvent], initial: int, end_s: float,
                usd_per_instance_h: float | None) -> dict[str, float | None]:
    """The instance-minutes the ramp held, and what they cost where the price is known."""
    minutes = _instance_minutes(events, initial, end_s)
    return {"instance_minutes": minutes,
            "cost_usd": minutes / 60 * usd_per_instance_h if usd_per_instance_h is not None else None}


def cold_start_s(sent: Sequence[RequestRecord]) -> float | None:
    """From the first request refused with no copy to serve it (the component was at zero copies) to the first
    token of the first request sent at or after it that succeeded (the cold start a scale-to-zero endpoint costs
    its first caller); None when no request was refused so, or none succeeded after."""
    refused = next((r for r in sent if r.no_capacity), None)
    if refused is None:
        return None
    served = next((r for r in sent if r.start_s >= refused.start_s and r.ok and r.ttft_s is not None), None)
    if served is None or served.ttft_s is None:
        return None
    return served.start_s + served.ttft_s - refused.start_s


def _events(scaling: dict[str, Any] | None, offset_s: float) -> list[ScalingEvent]:
    """The emulator's scaling events, on the ramp's clock."""
    return [ScalingEvent(t_s=e["t_s"] - offset_s, kind=e["kind"], desired=e["desired"],
                         in_service=e["in_service"], detail=e.get("detail", ""), instances=e.get("instances"))
            for e in (scaling or {}).get("events", [])]


def _policy(scaling: dict[str, Any] | None) -> ScalingPolicyRecord | None:
    """The policy the emulator simulated, as the results record it."""
    if scaling is None:
        return None
    p = scaling["policy"]
    return ScalingPolicyRecord(metric=p["metric"], target_value=p["target"], min_capacity=p["min_capacity"],
                         max_capacity=p["max_capacity"], scale_out_cooldown_s=p["scale_out_cooldown_s"],
                         scale_in_cooldown_s=p["scale_in_cooldown_s"], period_s=p["period_s"],
                         out_datapoints=p["out_datapoints"], in_datapoints=p["in_datapoints"],
                         in_period_s=p["in_period_s"],
                         metric_delay_s=p["metric_delay_s"], instance_startup_s=p["instance_startup_s"])


def _first(events: Sequence[ScalingEvent], kind: str) -> float | None:
    """When the first event of this kind happened (None: never)."""
    return next((e.t_s for e in events if e.kind == kind), None)


@dataclass(frozen=True)
class _Slo:
    """The ramp's ms/token SLO, if one was given: which requests and intervals break it."""

    ms_per_token: float | None

    def above(self, r: RequestRecord) -> bool:
        mpt = _ms_per_token(r)
        return self.ms_per_token is not None and mpt is not None and mpt > self.ms_per_token

    def count_above(self, records: Sequence[RequestRecord]) -> int | None:
        return sum(map(self.above, records)) if self.ms_per_token is not None else None

    def violated_and_recovered(self, intervals: Sequence[RampInterval]) -> tuple[float | None, float | None]:
        """The first interval that broke the SLO (an error, or p50 ms/token above it), and the first good one after."""
        if self.ms_per_token is None:
            return None, None
        limit = self.ms_per_token

        def bad(iv: RampInterval) -> bool:
            return iv.errors > 0 or (iv.ms_per_token.p50 is not None and iv.ms_per_token.p50 > limit)
        violated = next((iv.start_s for iv in intervals if iv.requests and bad(iv)), None)
        if violated is None:
            return None, None
        return violated, next((iv.start_s for iv in intervals if iv.start_s > violated and iv.requests and not bad(iv)),
                              None)


def _intervals(sent: Sequence[RequestRecord], events: Sequence[ScalingEvent], end_s: float, interval_s: float,
               known: int | None, slo: _Slo) -> list[RampInterval]:
    """Fixed-length intervals from the ramp's start: load offered and served, capacity, latency."""
    intervals = []
    for i in range(math.ceil(end_s / interval_s)):
        lo, hi = i * interval_s, (i + 1) * interval_s
        batch = [r for r in sent if lo <= r.start_s < hi]
        ok = [r for r in batch if r.ok]
        done = sum(1 for r in sent if r.ok and lo <= r.end_s < hi)
        desired, in_service = _capacity_at(events, hi, known)
        last = [e for e in events if e.t_s <= hi]
        intervals.append(RampInterval(
            instances_running=last[-1].instances if last else None,
            start_s=lo, offered_rps=len(batch) / interval_s, achieved_rps=done / interval_s,
            instances_desired=desired, instances_in_service=in_service, requests=len(batch),
            errors=len(batch) - len(ok), above_slo=slo.count_above(ok),
            ttft_ms=stats([r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
            e2e_s=stats([r.e2e_s for r in ok]),
            ms_per_token=stats([m for r in ok if (m := _ms_per_token(r)) is not None])))
    return intervals

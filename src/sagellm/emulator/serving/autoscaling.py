"""Target tracking as Application Auto Scaling runs it for a SageMaker variant, on a simulated clock.

moto stores scaling targets and policies but never evaluates them (it creates no alarms for SageMaker and
never changes a desired capacity), so the emulator runs the whole loop itself:
metric → alarms → desired capacity → new instances after their start-up delay. The behaviour and
where each figure comes from (README "Autoscaling under a ramp" lists the same):

- **Metric**: the plan's (`ScalingPlan.metric`, what the construct deploys): concurrent requests in flight
  per instance (`SageMakerVariantConcurrentRequestsPerModelHighResolution`), from arrival at the variant to
  the last byte of the reply, divided by the instances in service. A datapoint every `period_s` (10 s: the
  high-resolution metrics are emitted every 10 seconds,
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html), sampled at the
  period's end; an idle variant reports 0.
- **Alarms**: scale-out when 3 consecutive 10-s datapoints are above the target; scale-in when 15 consecutive
  one-minute datapoints are below 90 % of it, each the average of that minute's 10-s datapoints (CloudWatch's
  Average over a 60-s period), so 15 minutes. The same page says the high-resolution metrics make the policy
  scale out faster than the standard (one-minute) metrics would, but scale in at the standard metrics' rate.
  AWS does not publish the counts for SageMaker; they are the alarms Application Auto Scaling creates for
  target tracking on other services (3 of 3 and 15 of 15 one-minute datapoints; moto models the same for ECS), see
  https://docs.aws.amazon.com/autoscaling/application/userguide/target-tracking-scaling-policy-overview.html
  ("scales in only when the metric is far enough below the target").
- **Reaction delay**: a period's datapoint is acted on `METRIC_DELAY_S` after the period ends: the time to
  trigger "is usually 1–2 minutes longer … because it takes time for the endpoint to publish metrics to
  CloudWatch, and … for AutoScaling to react" (AWS ML blog, scale down to zero, 2024-12-03; the lower end).
- **Desired capacity**: ceil(instances in service × metric ÷ target), clamped to [min, max]
  (target tracking adds capacity "proportionally to the metric"). The metric is the newest 10-s datapoint for a
  scale-out, and the highest of the scale-in alarm's 15 one-minute datapoints for a scale-in (AWS does not say
  which datapoint it uses; the highest keeps the capacity the busiest of those minutes needed, so a component
  with any request in flight at a datapoint within those 15 minutes keeps a copy). It only ever moves towards
  the alarm's direction: a scale-out never lowers the desired capacity.
- **Endpoint Updating**: SageMaker sets the endpoint to Updating until new capacity is in service
  (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateEndpointWeightsAndCapacities.html);
  no other scaling activity starts meanwhile.
- **Cooldowns**: the policy's own (ScaleOutCooldown, ScaleInCooldown; AAS defaults are 300 s for SageMaker
  variants). Modelled as: no scale-out until the scale-out cooldown has passed since the previous scale-out
  took effect (its instances in service), and no scale-in until the scale-in cooldown has passed since the
  previous scale-in.
- **Start-up**: `INSTANCE_STARTUP_S` simulated seconds from the scale-out to the new instance in service
  (then its copies join the emulator's pool): 525 s end to end for a new ml.g6.2xlarge with the LMI
  container and an 8B model before container caching (of which ~105 s instance provisioning), from
  "Introducing container caching in Amazon SageMaker AI for faster model scaling" (AWS ML blog, 2026-06-16)
  and "Unlock cost savings with the new scale down to zero feature" (AWS ML blog, 2024-12-03).
  Scale-in removes an instance at once (it takes no new requests; those in flight finish).

Inference components scale copies the same way, each component on its own target tracking (as deployed: one
scalable target and policy per component), on concurrent requests per copy
(`SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution`), with managed instance scaling beneath
(`ManagedInstances`, shared by the endpoint's components):
- **Instances follow the copies**: enough to place every copy in service or starting, by the copies'
  ComputeResourceRequirements (`sagellm.profiles.plan.instances_for`, first fit), within MinInstanceCount and
  MaxInstanceCount; a copy that would need more than MaxInstanceCount is not started (a `blocked` event).
- **Start-up**: a copy that fits on a running instance starts in `COPY_STARTUP_FRACTION` of the instance start-up
  (the blog's 2.28 of 5.03 minutes end to end are the copy; the rest the trigger and a new instance); a copy that
  needs another instance takes the whole start-up.
- **Release**: an instance the copies no longer need stays until `INSTANCE_RELEASE_COOLDOWN_S` have passed since
  the endpoint's last operation (a copy added or removed, an instance released), then goes, one at a time: the
  deployed scale-in policy is CONSOLIDATION (`sagellm.constructs.endpoint`) with SageMaker's defaults,
  CooldownInMinutes 20 ("after the last endpoint operation before the endpoint evaluates consolidation scale-in
  opportunities") and MaximumStepSize 1
  (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantManagedInstanceScalingScaleInPolicy.html).
  Until then a new copy starts on the idle instance, in the copy's start-up only.
- **Scale to zero** (`min_capacity` 0): target tracking scales in to zero copies; it has no per-copy metric at
  zero copies, so a request then gets SageMaker's no-capacity error, counted in `NoCapacityInvocationFailures`.
  The alarm on it (Maximum ≥ 1 over one 30 s period, `sagellm.constructs.scaling`) fires `FROM_ZERO_DELAY_S`
  after its period ends, and the step-scaling policy adds one copy (and an instance, if none runs): "after 1
  minute, our step scaling policy should start" (the AWS ML blog above). While that copy starts, further alarms
  add none (the step policy's cooldown counts the starting copy as capacity).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

from sagellm.catalog import Instance
from sagellm.profiles.plan import (
    FROM_ZERO_ALARM_PERIOD_S,
    FROM_ZERO_COOLDOWN_S,
    ComputeRequirements,
    ScalingPlan,
    instances_for,
)

OUT_DATAPOINTS = 3  # scale-out alarm: this many datapoints (of the metric's period) above the target
IN_DATAPOINTS = 15  # scale-in alarm: this many datapoints of IN_PERIOD_S below IN_FRACTION × target
IN_PERIOD_S = 60.0  # the scale-in alarm's period: the standard metrics' rate, whatever the metric's period
IN_FRACTION = 0.9
METRIC_DELAY_S = 60.0  # datapoint published and acted on this long after its period ends
INSTANCE_STARTUP_S = 525.0  # scale-out → new instance InService (provisioning + container start-up)
# A copy on an instance that has room: the model copy's share of the blog's scale-out from zero (2.28 of 5.03 min).
COPY_STARTUP_FRACTION = 2.28 / 5.028
# A no-capacity datapoint reaches its alarm this long after its period ends (the blog's "about 1 minute" from the
# failed request to the step policy, less the 30 s period).
FROM_ZERO_DELAY_S = 30.0
# Managed instance scaling releases an instance no copy needs this long after the endpoint's last operation
# (CONSOLIDATION's CooldownInMinutes default, see above).
INSTANCE_RELEASE_COOLDOWN_S = 20 * 60.0

EventKind = Literal["breach", "alarm-high", "alarm-low", "alarm-no-capacity", "scale-out", "scale-in", "in-service",
                    "blocked", "instance-released"]


@dataclass(frozen=True)
class Policy:
    """A target-tracking policy on concurrent requests in flight per instance, with the simulation's delays."""

    metric: str  # the predefined metric type (the plan's, as deployed)
    target: float  # requests in flight per instance
    min_capacity: int
    max_capacity: int
    period_s: float  # one datapoint per period
    scale_out_cooldown_s: float = 300.0
    scale_in_cooldown_s: float = 300.0
    instance_startup_s: float = INSTANCE_STARTUP_S
    metric_delay_s: float = METRIC_DELAY_S
    out_datapoints: int = OUT_DATAPOINTS
    in_datapoints: int = IN_DATAPOINTS
    in_period_s: float = IN_PERIOD_S  # each scale-in datapoint averages the metric's datapoints over this period
    from_zero_delay_s: float = FROM_ZERO_DELAY_S

    @classmethod
    def of(cls, scaling: ScalingPlan, instance_startup_s: float = INSTANCE_STARTUP_S) -> Policy:
        """The policy a plan deploys (metric, target, bounds, period, cooldowns), with the simulation's delays."""
        return cls(metric=scaling.metric, target=scaling.target_value, min_capacity=scaling.min_capacity,
                   max_capacity=scaling.max_capacity, period_s=scaling.period_s,
                   scale_out_cooldown_s=scaling.scale_out_cooldown_s,
                   scale_in_cooldown_s=scaling.scale_in_cooldown_s, instance_startup_s=instance_startup_s)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the emulator's `/autoscaling` reply)."""
        return asdict(self)


@dataclass(frozen=True)
class Event:
    """Something the scaling loop did, at a simulated time."""

    t_s: float
    kind: EventKind
    desired: int  # after the event (instances, or copies for inference components)
    in_service: int
    detail: str = ""
    instances: int | None = None  # inference components: instances running for the copies


@dataclass
class ManagedInstances:
    """Managed instance scaling beneath an endpoint's components: instances enough to place every copy in service or
    starting (within the endpoint config's bounds); one no longer needed goes after the scale-in cooldown."""

    instance: Instance
    compute: dict[str, ComputeRequirements]  # each component's per-copy requirements
    copies: dict[str, int]  # each component's copies placed (in service or starting)
    initial_count: int  # the endpoint's InitialInstanceCount
    min_count: int
    max_count: int
    instance_startup_s: float = INSTANCE_STARTUP_S
    release_cooldown_s: float = INSTANCE_RELEASE_COOLDOWN_S
    count: int = field(init=False)  # instances held: in service, starting, or idle until released
    _starting: list[float] = field(default_factory=list)  # InService times of instances starting up
    _last_operation_s: float = 0.0  # the endpoint's last operation (its creation, to begin with)

    def __post_init__(self) -> None:
        self.count = max(self.initial_count, self.min_count, self.needed(self.copies))

    def needed(self, copies: dict[str, int]) -> int:
        """Instances that place `copies` (first fit, as the plan sizes them)."""
        return instances_for([(self.compute[name], n) for name, n in copies.items() if n], self.instance)

    @property
    def copy_startup_s(self) -> float:
        """A new copy on an instance with room for it."""
        return self.instance_startup_s * COPY_STARTUP_FRACTION

    def place(self, component: str, now_s: float) -> float | None:
        """One more copy of `component` at `now_s`: seconds until it serves (None: it needs more than
        MaxInstanceCount instances, so it does not start)."""
        copies = {**self.copies, component: self.copies.get(component, 0) + 1}
        need = self.needed(copies)
        if need > self.max_count:
            return None
        self.copies, self._last_operation_s = copies, now_s
        if need > self.count:
            self._starting += [now_s + self.instance_startup_s] * (need - self.count)
            self.count = need
            return self.instance_startup_s
        if need > self.count - len(self._starting):  # its room is on an instance still starting
            return max(self.copy_startup_s, max(self._starting) - now_s)
        return self.copy_startup_s

    def remove(self, component: str, n: int, now_s: float) -> None:
        """`n` copies of `component` scaled in at `now_s` (their instances stay until released)."""
        self.copies[component] -= n
        self._last_operation_s = now_s

    def next_s(self) -> float:
        """When something happens next: an instance InService, or an idle one released."""
        ready = min(self._starting, default=math.inf)
        surplus = self.count > max(self.min_count, self.needed(self.copies))
        return min(ready, self._last_operation_s + self.release_cooldown_s if surplus else math.inf)

    def advance(self, t_s: float) -> list[float]:
        """Instances InService and released up to `t_s`; returns when each release happened."""
        self._starting = [t for t in self._starting if t > t_s]
        released = []
        while (at := self.next_s()) <= t_s:  # those still starting are later
            self.count -= 1  # MaximumStepSize 1: one instance per operation
            self._last_operation_s = at
            released.append(at)
        return released

    def to_dict(self) -> dict[str, object]:
        """JSON-ready state."""
        return {"instances": self.count, "starting": len(self._starting), "min_instance_count": self.min_count,
                "max_instance_count": self.max_count, "copies": dict(self.copies),
                "release_cooldown_s": self.release_cooldown_s}


@dataclass
class _Datapoint:
    end_s: float  # the period's end
    value: float  # requests in flight per instance at the period's end


@dataclass
class TargetTracking:
    """The scaling loop of one variant; `invoked` and `advance` are called with a non-decreasing clock."""

    policy: Policy
    in_service: int
    now_s: float = 0.0
    # Inference components: the instances beneath (shared by the endpoint's components) and this one's name there.
    fleet: ManagedInstances | None = None
    component: str = ""
    desired: int = field(init=False)
    events: list[Event] = field(default_factory=list)
    datapoints: list[_Datapoint] = field(default_factory=list)
    _period_start_s: float = field(init=False)
    in_flight: int = 0  # requests the variant holds (queued or generating)
    _pending: list[float] = field(default_factory=list)  # InService times of instances starting up
    _last_out_done_s: float = -math.inf
    _last_in_s: float = -math.inf
    _breached: bool = False
    _evaluations: list[tuple[float, int]] = field(default_factory=list)  # (when, datapoint index), in order
    _no_capacity_alarms: list[float] = field(default_factory=list)  # when the no-capacity alarm fires
    _last_from_zero_s: float = -math.inf
    no_capacity_failures: int = 0
    _since: int = 0  # the first datapoint after the last gap (periods at zero copies have none)

    def __post_init__(self) -> None:
        self.desired = self.in_service
        self._period_start_s = self.now_s

    @property
    def instances(self) -> int | None:
        """Inference components: instances the endpoint holds (None: instance-based, where capacity is instances)."""
        return None if self.fleet is None else self.fleet.count

    def no_capacity(self, t_s: float) -> None:
        """A request found no copy at `t_s` (SageMaker's no-capacity error): a NoCapacityInvocationFailures
        datapoint, which the scale-from-zero alarm acts on after its period ends."""
        self.advance(t_s)
        self.no_capacity_failures += 1
        period = FROM_ZERO_ALARM_PERIOD_S
        fires = (math.floor(t_s / period) + 1) * period + self.policy.from_zero_delay_s
        if fires not in self._no_capacity_alarms:
            self._no_capacity_alarms.append(fires)

    @property
    def updating(self) -> bool:
        """Whether a scale-out is still starting instances (the endpoint is Updating)."""
        return bool(self._pending)

    def started(self, t_s: float) -> None:
        """A request reached the variant at `t_s`."""
        self.advance(t_s)
        self.in_flight += 1

    def finished(self, t_s: float) -> None:
        """A request's reply ended (or failed) at `t_s`."""
        self.advance(t_s)
        self.in_flight = max(0, self.in_flight - 1)

    def next_s(self) -> float:
        """When the loop acts next: a period ends, an evaluation, new capacity InService, a no-capacity alarm."""
        period_end = self._period_start_s + self.policy.period_s
        evaluation = self._evaluations[0][0] if self._evaluations else math.inf
        return min(period_end, evaluation, min(self._pending, default=math.inf),
                   min(self._no_capacity_alarms, default=math.inf))

    def advance(self, t_s: float) -> int:
        """Run the loop up to `t_s` (period ends, evaluations, capacity coming in service), in time order;
        returns the change in capacity in service."""
        before = self.in_service
        while (t := self.next_s()) <= t_s:
            self.now_s = t
            ready = min(self._pending, default=math.inf)
            alarm = min(self._no_capacity_alarms, default=math.inf)
            if t == ready:
                self._pending.remove(ready)
                self.in_service += 1
                if not self._pending:
                    self._last_out_done_s = t
                self._event("in-service", "a new copy is InService" if self.fleet is not None
                            else "a new instance is InService; its copies take requests")
            elif t == alarm:
                self._no_capacity_alarms.remove(alarm)
                self._from_zero()
            elif t == self._period_start_s + self.policy.period_s:
                self._close_period(t)
            else:
                _, index = self._evaluations.pop(0)
                self._evaluate(self.datapoints[self._since:index + 1])
        self.now_s = max(self.now_s, t_s)
        return self.in_service - before

    def _close_period(self, end_s: float) -> None:
        if self.in_service == 0:
            # No copy, no per-copy datapoint: the alarms' runs of datapoints start again after the gap.
            self._period_start_s = end_s
            self._since = len(self.datapoints)
            return
        value = self.in_flight / self.in_service
        self.datapoints.append(_Datapoint(end_s, value))
        self._period_start_s = end_s
        self._evaluations.append((end_s + self.policy.metric_delay_s, len(self.datapoints) - 1))
        if value > self.policy.target and not self._breached:
            self._breached = True  # the first datapoint above the target (acted on after the metric delay)
            self.events.append(Event(end_s, "breach", self.desired, self.in_service,
                                     f"{self.policy.metric} {value:.1f} > target {self.policy.target:g}",
                                     self.instances))

    def _evaluate(self, datapoints: list[_Datapoint]) -> None:
        """The two alarms on the datapoints published so far, and the scaling activity they ask for."""
        p = self.policy
        if not datapoints:
            return  # published before a gap at zero copies
        high = [d.value for d in datapoints[-p.out_datapoints:]]
        low = self._in_datapoints(datapoints)
        if len(high) == p.out_datapoints and all(v > p.target for v in high):
            self._scale_out(high[-1])
        elif len(low) == p.in_datapoints and all(v < IN_FRACTION * p.target for v in low):
            self._scale_in(max(low))

    def _in_datapoints(self, datapoints: list[_Datapoint]) -> list[float]:
        """The scale-in alarm's newest datapoints: each complete `in_period_s` period's average of the metric."""
        p = self.policy
        per_period = math.ceil(p.in_period_s / p.period_s)
        published = datapoints[-1].end_s
        periods: dict[int, list[float]] = {}
        for d in datapoints[-(p.in_datapoints + 1) * per_period:]:
            k = math.floor((d.end_s - p.period_s) / p.in_period_s + 1e-9)  # the period its own period starts in
            if (k + 1) * p.in_period_s <= published + 1e-9:
                periods.setdefault(k, []).append(d.value)
        return [sum(v) / len(v) for v in periods.values()][-p.in_datapoints:]

    def wanted(self, metric: float) -> int:
        """Target tracking's capacity for a metric value: ceil(in service × metric ÷ target), clamped."""
        p = self.policy
        raw = math.ceil(self.in_service * metric / p.target - 1e-9)
        return max(p.min_capacity, min(p.max_capacity, raw))

    def _scale_out(self, metric: float) -> None:
        p = self.policy
        wanted = self.wanted(metric)
        if wanted <= self.desired:
            return  # at max capacity, or what is starting up already covers it
        why = self._blocked_out()
        if why:
            self._event("blocked", f"scale-out to {wanted} waits: {why}")
            return
        self._event("alarm-high", f"{p.out_datapoints} datapoints > {p.target:g}; newest {metric:.1f}")
        self._add(wanted)

    def _add(self, wanted: int) -> None:
        """Start capacity up to `wanted`: an instance each, or a copy each (with instances where none has room)."""
        startups = []
        for _ in range(wanted - self.desired):
            startup = self.policy.instance_startup_s if self.fleet is None else \
                self.fleet.place(self.component, self.now_s)
            if startup is None:
                self._event("blocked", f"scale-out to {wanted} waits: its copies need more than MaxInstanceCount "
                                       f"({self.fleet.max_count if self.fleet else 0}) instances")
                break
            startups.append(startup)
            self._pending.append(self.now_s + startup)
        if not startups:
            return
        before = self.desired
        self.desired += len(startups)
        self._event("scale-out", f"desired {before} → {self.desired}; InService in {max(startups):g} s")

    def _from_zero(self) -> None:
        """The no-capacity alarm fired: the step-scaling policy adds one copy, unless one is already coming."""
        if self.desired > 0 or self.now_s < self._last_from_zero_s + FROM_ZERO_COOLDOWN_S:
            return
        self._event("alarm-no-capacity", "NoCapacityInvocationFailures ≥ 1: step scaling adds a copy")
        self._last_from_zero_s = self.now_s
        self._add(1)

    def _blocked_out(self) -> str | None:
        if self.updating:
            return "the endpoint is Updating (instances still starting)"
        if self.now_s < self._last_out_done_s + self.policy.scale_out_cooldown_s:
            return f"scale-out cooldown ({self.policy.scale_out_cooldown_s:g} s)"
        return None

    def _scale_in(self, metric: float) -> None:
        p = self.policy
        wanted = self.wanted(metric)
        if wanted >= self.desired or self.updating or self.now_s < self._last_in_s + p.scale_in_cooldown_s:
            return
        self._event("alarm-low", f"{p.in_datapoints} datapoints of {p.in_period_s:g} s < {IN_FRACTION * p.target:g}; "
                                 f"highest {metric:.2f}")
        before = self.desired
        self.desired = self.in_service = wanted
        self._last_in_s = self.now_s
        if self.fleet is not None:
            self.fleet.remove(self.component, before - wanted, self.now_s)
        self._event("scale-in", f"desired {before} → {wanted}; removed at once")

    def _event(self, kind: EventKind, detail: str) -> None:
        self.events.append(Event(self.now_s, kind, self.desired, self.in_service, detail, self.instances))

    def released(self, t_s: float) -> None:
        """Managed instance scaling released an idle instance at `t_s` (an event in this component's history)."""
        self.advance(t_s)
        self._event("instance-released", "an instance no copy needed is released (the scale-in cooldown passed)")

    def to_dict(self) -> dict[str, object]:
        """State and history, JSON-ready."""
        return {"now_s": self.now_s, "desired": self.desired, "in_service": self.in_service,
                "instances": self.instances, "no_capacity_failures": self.no_capacity_failures,
                "policy": self.policy.to_dict(), "events": [asdict(e) for e in self.events],
                "datapoints": [asdict(d) for d in self.datapoints]}


@dataclass
class EndpointScaling:
    """The scaling of one endpoint on one clock: the variant's instances, or each inference component's copies on
    its own target tracking over the managed instances they share."""

    trackers: dict[str, TargetTracking]  # model name → its loop (one for an instance-based variant)
    primary: str  # the model whose history `to_dict` puts first (the one the bench invokes)
    fleet: ManagedInstances | None = None

    def advance(self, t_s: float) -> set[str]:
        """Every loop and the instances up to `t_s`, in time order; returns the models whose capacity changed."""
        before = {name: t.in_service for name, t in self.trackers.items()}
        while True:
            t = min([tr.next_s() for tr in self.trackers.values()]
                    + [self.fleet.next_s() if self.fleet else math.inf])
            if t > t_s:
                break
            for tracker in self.trackers.values():
                tracker.advance(t)
            for at in self.fleet.advance(t) if self.fleet else []:
                for tracker in self.trackers.values():
                    tracker.released(at)
        for tracker in self.trackers.values():
            tracker.advance(t_s)
        return {name for name, t in self.trackers.items() if t.in_service != before[name]}

    def to_dict(self) -> dict[str, object]:
        """The primary model's state and history, every component's, and the instances (JSON-ready)."""
        body = self.trackers[self.primary].to_dict()
        if self.fleet is not None:
            body["fleet"] = self.fleet.to_dict()
            body["components"] = {name: t.to_dict() for name, t in self.trackers.items()}
        return body

"""What a SageMaker endpoint's own control plane shows of its scaling while a ramp runs, in the shape of the
emulator's `/autoscaling` reply (`observed` instead of `simulated`), so the ramp's figures read either.

- Copies: DescribeInferenceComponent's `RuntimeConfig` (`DesiredCopyCount`, `CurrentCopyCount`);
- instances: DescribeEndpoint's `ProductionVariants[].DesiredInstanceCount` / `CurrentInstanceCount` (for an
  inference-component endpoint, the instances held for its copies);
- scaling activities: Application Auto Scaling's DescribeScalingActivities for the component's copy count (or the
  variant's instance count), with their start times and descriptions.
Call and field names from botocore 1.44.8's service models (sagemaker 2017-07-24, application-autoscaling
2016-02-06); the tests stub them with botocore's Stubber, which checks requests and replies against those models.

The counts are sampled every `SAMPLE_S` (the high-resolution metrics' period) on the endpoint's clock: wall
seconds divided by the time scale of the emulator the runtime points at (1 on SageMaker), the records' clock.
A failed describe call skips its sample: watching never fails the bench.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sagellm.clock import REAL, Clock

if TYPE_CHECKING:
    from sagellm.aws.account import Account

SAMPLE_S = 10.0  # simulated seconds between samples
_MIN_WALL_S = 0.5  # and never more often than this (a compressed clock must not flood the control plane)
COMPONENT_COPIES = "sagemaker:inference-component:DesiredCopyCount"
VARIANT_INSTANCES = "sagemaker:variant:DesiredInstanceCount"


class ScalingWatch:
    """Samples an endpoint's copies and instances in a thread; `state()` is what it has seen so far."""

    def __init__(self, sagemaker: Any, autoscaling: Any, endpoint: str, component: str | None, *,
                 clock: Clock = REAL, variant: str = "AllTraffic"):
        self.sagemaker, self.autoscaling = sagemaker, autoscaling
        self.endpoint, self.component, self.variant = endpoint, component, variant
        self.clock = clock
        self.origin = time.time()  # the watch's clock starts here
        self.events: list[dict[str, Any]] = []
        self._last: tuple[int, int, int | None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now_s(self, wall: float | None = None) -> float:
        """The watch's clock (seconds since it started, on the records' time scale) at `wall` (default: now)."""
        return self.clock.simulated_s((time.time() if wall is None else wall) - self.origin)

    def start(self) -> None:
        """Sample now and then every `SAMPLE_S` until `stop`."""
        if self._thread is not None:
            return
        self.sample()
        self._thread = threading.Thread(target=self._run, name="sagellm-scaling-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (the samples taken stay)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(max(_MIN_WALL_S, self.clock.wall_s(SAMPLE_S))):
            self.sample()

    def sample(self, wall: float | None = None) -> None:
        """One sample of the copies and instances (taken at `wall`, default now); an event when they changed."""
        try:
            counts = self._counts()
        except (BotoCoreError, ClientError):
            return
        if counts != self._last:
            self._last = counts
            desired, current, instances = counts
            self.events.append({"t_s": self.now_s(wall), "kind": "observed", "desired": desired, "in_service": current,
                                "instances": instances, "detail": "as described"})

    def _counts(self) -> tuple[int, int, int | None]:
        """(desired, current) copies (instances, for an instance-based variant), and the instances held (None for
        an instance-based variant)."""
        endpoint = self.sagemaker.describe_endpoint(EndpointName=self.endpoint)
        variant: dict[str, Any] = next((v for v in endpoint.get("ProductionVariants", []) if v["VariantName"] == self.variant), {})
        instances = (int(variant.get("DesiredInstanceCount", 0)), int(variant.get("CurrentInstanceCount", 0)))
        if self.component is None:
            return instances[0], instances[1], None
        runtime = self.sagemaker.describe_inference_component(InferenceComponentName=self.component)["RuntimeConfig"]
        return int(runtime["DesiredCopyCount"]), int(runtime["CurrentCopyCount"]), instances[1]

    def activities(self) -> list[dict[str, Any]]:
        """The scaling activities Application Auto Scaling recorded since the watch started, as events."""
        resource, dimension = (f"inference-component/{self.component}", COMPONENT_COPIES) if self.component \
            else (f"endpoint/{self.endpoint}/variant/{self.variant}", VARIANT_INSTANCES)
        try:
            found = self.autoscaling.describe_scaling_activities(
                ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=dimension)["ScalingActivities"]
        except (BotoCoreError, ClientError):
            return []
        out = []
        for a in found:
            t = self.now_s(a["StartTime"].timestamp())
            if t < 0:
                continue  # before the watch: another run's
            desired, current, instances = self._counts_at(t)
            out.append({"t_s": t, "kind": "activity", "desired": desired, "in_service": current,
                        "instances": instances, "detail": f"{a['StatusCode']}: {a['Description']}"})
        return out

    def _counts_at(self, t_s: float) -> tuple[int, int, int | None]:
        """The counts last sampled at or before `t_s` (the first sample's before any)."""
        seen = [e for e in self.events if e["t_s"] <= t_s] or self.events[:1]
        if not seen:
            return 0, 0, None
        return seen[-1]["desired"], seen[-1]["in_service"], seen[-1]["instances"]

    def state(self, wall: float | None = None) -> dict[str, Any]:
        """The counts now (at `wall`) and every change seen, with the scaling activities, in time order."""
        self.sample(wall)
        desired, current, instances = self._last or (0, 0, None)
        events = sorted(self.events + self.activities(), key=lambda e: e["t_s"])
        return {"observed": True, "now_s": self.now_s(wall), "desired": desired, "in_service": current,
                "instances": instances, "events": events}


class Watched:
    """A SageMaker target's scaling, read from its control plane: `autoscaling()` as the local target's emulator
    answers it (the first read starts watching, as a ramp begins); `stop_watching()` on teardown."""

    watch: ScalingWatch | None = None

    def watch_scaling(self, endpoint: str, component: str | None, account: Account) -> None:
        """Watch `endpoint` (and `component`) in the run's account and region, once asked."""
        from sagellm.bench.targets.http import runtime_clock

        self.watch = ScalingWatch(account.client("sagemaker"), account.client("application-autoscaling"), endpoint,
                                  component, clock=runtime_clock() or REAL)

    def autoscaling(self) -> dict[str, Any] | None:
        """What the endpoint's control plane showed of its scaling so far (None before it is deployed)."""
        if self.watch is None:
            return None
        self.watch.start()
        return self.watch.state()

    def stop_watching(self) -> None:
        """Stop sampling (before teardown deletes what is watched)."""
        if self.watch is not None:
            self.watch.stop()

"""What the endpoint itself reported per level, beside what the client measured (a level's `server` block).

- sagemaker and local targets: CloudWatch, read after the sweep for every level's window (`aws.cloudwatch`);
  the local target's emulator publishes SageMaker's metrics into the local AWS, so the same read runs.
  SageMaker publishes once a minute, so a level's window is read as whole minutes around it (neighbouring
  levels' minutes included) and the read waits until the last level's data have arrived (a few minutes at
  most); the emulator publishes 1 s data, read as whole seconds.
- http target: the server's Prometheus `/metrics`, scraped when the sweep starts and after every level (no
  request runs between two levels), the differences reported (`prometheus`).
- local target: also the emulator's prefix caches (prompt tokens looked up and served: vLLM's
  `vllm:prefix_cache_queries`/`_hits`, which SageMaker does not publish to CloudWatch), read around every level.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sagellm.bench import prometheus
from sagellm.bench.client.transports import Transport
from sagellm.bench.targets.existing import ExistingEndpoint
from sagellm.bench.targets.http import HttpTarget
from sagellm.bench.targets.stack import LocalTarget, SageMakerTarget
from sagellm.bench.targets.target import Target
from sagellm.clock import Clock
from sagellm.errors import TargetError
from sagellm.results.schema import ServerMetric, ServerMetrics, ServerStats

# How long to wait for SageMaker's last minute of metrics to reach CloudWatch (typically 1–3 minutes).
CLOUDWATCH_WAIT_S = 240.0


class ServerWatch:
    """Per level: the window it ran in; after the sweep, what the endpoint reported over each window."""

    def __init__(self, target: Target, transport: Transport, say: Callable[[str], None]):
        self.target = target
        self.component: str | None = getattr(transport, "inference_component", None)
        self.say = say
        self.windows: dict[str, tuple[datetime, datetime]] = {}
        self.blocks: dict[str, ServerMetrics] = {}
        self._scraped: dict[str, float] | None = None
        if isinstance(target, HttpTarget):
            self._scraped = self._scrape()
        # Local target: the emulator's prefix-cache counters at the last level's end, and each level's increase.
        self._prefix: tuple[float, float] | None = self._prefix_cache()
        self._prefix_of: dict[str, tuple[float, float]] = {}

    def _prefix_cache(self) -> tuple[float, float] | None:
        emulator = getattr(self.target, "emulator", None) if isinstance(self.target, LocalTarget) else None
        if emulator is None:
            return None
        try:
            return emulator.prefix_cache()  # type: ignore[no-any-return]
        except TargetError as exc:
            self.say(f"server metrics: {exc} (levels carry no prefix-cache figures)")
            return None

    def _scrape(self) -> dict[str, float] | None:
        base = getattr(self.target, "base", "")
        try:
            samples = prometheus.scrape(base)
        except TargetError as exc:
            self.say(f"server metrics: {exc} (levels carry no server block)")
            return None
        if not prometheus.known(samples):
            self.say(f"server metrics: {base}/metrics has no vLLM or TGI metrics (levels carry no server block)")
            return None
        return samples

    def level_done(self, load: str, start: datetime, end: datetime) -> None:
        """A level (or one repeat of it) ran from `start` to `end`."""
        first, _ = self.windows.get(load, (start, end))
        self.windows[load] = (min(first, start), end)
        if self._scraped is not None and (now := self._scrape()) is not None:
            block = prometheus.differences(self._scraped, now, start, end)
            self.blocks[load] = block if load not in self.blocks else _added(self.blocks[load], block)
            self._scraped = now
        if self._prefix is not None and (counted := self._prefix_cache()) is not None:
            queries, hits = self._prefix_of.get(load, (0.0, 0.0))
            self._prefix_of[load] = (queries + counted[0] - self._prefix[0], hits + counted[1] - self._prefix[1])
            self._prefix = counted

    def finish(self) -> dict[str, ServerMetrics]:
        """Every level's server block (CloudWatch targets read now); a failed read is said, not raised."""
        if isinstance(self.target, LocalTarget | SageMakerTarget | ExistingEndpoint) and self.windows:
            try:
                self._read_cloudwatch()
            except Exception as exc:  # noqa: BLE001 - server metrics are an addition; the run stands without
                self.say(f"server metrics: CloudWatch could not be read: {type(exc).__name__}: {exc}")
        return self.blocks

    def _read_cloudwatch(self) -> None:
        from sagellm.aws import cloudwatch

        target = self.target
        assert isinstance(target, LocalTarget | SageMakerTarget | ExistingEndpoint)
        loads = sorted(self.windows, key=lambda load: self.windows[load][0])  # in the order they ran
        if isinstance(target, LocalTarget):
            assert target.emulator is not None
            clock = target.emulator.flush_metrics()
            # The emulator stamps its data on its simulated clock, every datum to the full: map the level
            # windows onto that clock and read them as consecutive whole seconds.
            origin, emulated = clock["origin"], Clock(clock["time_scale"])

            def simulated(t: datetime) -> datetime:
                return datetime.fromtimestamp(origin + emulated.simulated_s(t.timestamp() - origin), UTC)

            spans = [(simulated(self.windows[load][0]), simulated(self.windows[load][1])) for load in loads]
            windows = dict(zip(loads, cloudwatch.contiguous(spans, 1), strict=True))
            client: Any = target.aws.client("cloudwatch")
            wait_s = 0.0
        else:
            resolution = cloudwatch.STANDARD_RESOLUTION_S  # whole minutes around each level, as CloudWatch rounds
            windows = {load: cloudwatch.aligned(*self.windows[load], resolution) for load in loads}
            client = target.account.client("cloudwatch")  # the run's account and region, as deployed
            # An emulated runtime (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME) publishes nothing there: no wait.
            wait_s = 0.0 if target.emulated else CLOUDWATCH_WAIT_S
        deadline = time.monotonic() + wait_s
        for load in reversed(loads):
            window = windows[load]
            readings = cloudwatch.read_endpoint(client, target.endpoint or "", window, component=self.component)
            # The last level's data arrive last: once they are in, every level's are.
            if load == loads[-1] and "invocations" not in readings and wait_s:
                self.say(f"server metrics: waiting for CloudWatch to receive the last level's data (at most "
                         f"{wait_s / 60:g} min)")
            while load == loads[-1] and "invocations" not in readings and time.monotonic() < deadline:
                time.sleep(15)
                readings = cloudwatch.read_endpoint(client, target.endpoint or "", window, component=self.component)
            metrics = {key: ServerMetric(unit=r.unit, name=r.name, stats=ServerStats(**r.stats))  # type: ignore[arg-type]
                       for key, r in readings.items()}
            queries, hits = self._prefix_of.get(load, (0.0, 0.0))
            if queries:  # an engine with a prefix cache (vLLM, SGLang) was asked
                metrics |= {key: ServerMetric(unit="tokens", name=f"emulator /metrics {key}",
                                              stats=ServerStats(sum=value))
                            for key, value in (("prefix_cache_queries", queries), ("prefix_cache_hits", hits))}
            self.blocks[load] = ServerMetrics(source="cloudwatch", window_start=window.start, window_end=window.end,
                                              period_s=window.period_s, metrics=metrics)


def _added(a: ServerMetrics, b: ServerMetrics) -> ServerMetrics:
    """Two repeats of a level scraped apart, as one: counts and sums added, means recomputed."""
    metrics = dict(a.metrics)
    for key, m in b.metrics.items():
        old = metrics.get(key)
        if old is None:
            metrics[key] = m
            continue
        count = (old.stats.count or 0) + (m.stats.count or 0)
        total = (old.stats.sum or 0) + (m.stats.sum or 0)
        avg = total / count if m.stats.count is not None and count else None
        stats = ServerStats(sum=total, count=count if m.stats.count is not None else None, avg=avg)
        metrics[key] = m.model_copy(update={"stats": stats})
    return a.model_copy(update={"window_end": b.window_end, "metrics": metrics})

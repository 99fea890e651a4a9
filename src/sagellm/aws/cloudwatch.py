"""What a SageMaker endpoint reported to CloudWatch over a window: one GetMetricData call, one period across it.

Names, namespaces, dimensions and units are SageMaker's ("SageMaker AI metrics in Amazon CloudWatch",
https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html): invocation metrics in
`AWS/SageMaker` by `EndpointName`+`VariantName` (by `InferenceComponentName` on inference-component
endpoints), utilisation in `/aws/sagemaker/Endpoints` by `EndpointName`+`VariantName`. ModelLatency,
OverheadLatency and ModelSetupTime are in microseconds; they are returned in milliseconds. GPU and CPU
utilisation are 0–100 % per device, summed over the devices (4 GPUs read up to 400 %).

Percentiles are asked for as GetMetricData statistics (`p50`, `p90`, `p99`), which CloudWatch computes from
the raw values; moto cannot (it crashes on them), so the local AWS adds them (`moto_ext`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

VARIANT = "AllTraffic"
SAGEMAKER = "AWS/SageMaker"
ENDPOINTS = "/aws/sagemaker/Endpoints"
# SageMaker publishes once a minute; the emulator publishes high-resolution (1 s) data.
STANDARD_RESOLUTION_S = 60

# The results' statistic names → CloudWatch's.
CW_STAT = {"p50": "p50", "p90": "p90", "p99": "p99", "avg": "Average", "min": "Minimum", "max": "Maximum",
           "sum": "Sum", "count": "SampleCount"}


@dataclass(frozen=True)
class Spec:
    """One endpoint metric: its results name and unit, where CloudWatch keeps it, the statistics read."""

    key: str
    namespace: str
    metric: str
    unit: str  # ms | count | percent
    stats: tuple[str, ...]
    scale: float = 1.0  # CloudWatch value × scale = the value in `unit`
    by_component: bool = False  # inference-component endpoints: dimension InferenceComponentName
    component_metric: str | None = None  # its name there, where it differs

    def name_for(self, component: str | None) -> str:
        """The CloudWatch metric name for this endpoint kind."""
        return (self.component_metric or self.metric) if component else self.metric


_US = 1e-3  # microseconds → milliseconds
SPECS: tuple[Spec, ...] = (
    Spec("model_latency_ms", SAGEMAKER, "ModelLatency", "ms", ("p50", "p90", "p99", "avg", "max", "count"), _US,
         by_component=True),
    Spec("overhead_latency_ms", SAGEMAKER, "OverheadLatency", "ms", ("avg", "max"), _US, by_component=True),
    Spec("invocations", SAGEMAKER, "Invocations", "count", ("sum",), by_component=True),
    Spec("invocation_4xx_errors", SAGEMAKER, "Invocation4XXErrors", "count", ("sum", "avg"), by_component=True),
    Spec("invocation_5xx_errors", SAGEMAKER, "Invocation5XXErrors", "count", ("sum", "avg"), by_component=True),
    Spec("model_setup_time_ms", SAGEMAKER, "ModelSetupTime", "ms", ("avg", "max"), _US),  # serverless only
    Spec("concurrent_requests", SAGEMAKER, "ConcurrentRequestsPerModel", "count", ("max", "min"),
         by_component=True, component_metric="ConcurrentRequestsPerCopy"),
    Spec("gpu_utilization_pct", ENDPOINTS, "GPUUtilization", "percent", ("avg", "max")),
    Spec("gpu_memory_utilization_pct", ENDPOINTS, "GPUMemoryUtilization", "percent", ("avg", "max")),
    Spec("cpu_utilization_pct", ENDPOINTS, "CPUUtilization", "percent", ("avg", "max")),
)


def dimensions(spec: Spec, endpoint: str, variant: str = VARIANT,
               component: str | None = None) -> list[dict[str, str]]:
    """The dimensions SageMaker publishes `spec` under, for an endpoint (and its inference component)."""
    if component and spec.by_component:
        return [{"Name": "InferenceComponentName", "Value": component}]
    return [{"Name": "EndpointName", "Value": endpoint}, {"Name": "VariantName", "Value": variant}]


@dataclass(frozen=True)
class Reading:
    """One metric over the window: the source's name for it, its unit, and its statistics."""

    name: str  # `AWS/SageMaker ModelLatency`
    unit: str
    stats: dict[str, float]


@dataclass(frozen=True)
class Window:
    """The window as read: `start` aligned down to the resolution, one period to `end`."""

    start: datetime
    end: datetime
    period_s: int


def aligned(start: datetime, end: datetime, resolution_s: int) -> Window:
    """One period covering [start, end], starting on a multiple of the resolution (as CloudWatch rounds)."""
    first = datetime.fromtimestamp(math.floor(start.timestamp() / resolution_s) * resolution_s, UTC)
    return _window(first, end, resolution_s)


def _window(first: datetime, end: datetime, resolution_s: int) -> Window:
    period = max(1, math.ceil((end - first).total_seconds() / resolution_s)) * resolution_s
    return Window(first, first + timedelta(seconds=period), period)


def contiguous(spans: list[tuple[datetime, datetime]], resolution_s: int) -> list[Window]:
    """Windows for consecutive levels that share their edges, each ending on the resolution after its level:
    every datum falls in exactly one. For data stamped when a request ends, a level keeps its last requests,
    and a request of the next level that ends before that edge counts to the level before."""
    out: list[Window] = []
    for start, end in spans:
        first = out[-1].end if out else aligned(start, end, resolution_s).start
        out.append(_window(first, max(end, first), resolution_s))
    return out


def read_endpoint(client: Any, endpoint: str, window: Window, *, variant: str = VARIANT,
                  component: str | None = None) -> dict[str, Reading]:
    """Every SPECS metric the endpoint reported in `window` (a boto3 CloudWatch client); absent ones left out."""
    queries: list[dict[str, Any]] = []
    where: dict[str, tuple[Spec, str]] = {}
    for spec in SPECS:
        for stat in spec.stats:
            qid = f"q{len(queries)}"
            where[qid] = (spec, stat)
            queries.append({"Id": qid, "ReturnData": True, "MetricStat": {
                "Metric": {"Namespace": spec.namespace, "MetricName": spec.name_for(component),
                           "Dimensions": dimensions(spec, endpoint, variant, component)},
                "Period": window.period_s, "Stat": CW_STAT[stat]}})
    values: dict[str, list[float]] = {}
    token: str | None = None
    while True:
        page = client.get_metric_data(MetricDataQueries=queries, StartTime=window.start, EndTime=window.end,
                                      **({"NextToken": token} if token else {}))
        for result in page["MetricDataResults"]:
            values.setdefault(result["Id"], []).extend(result.get("Values", []))
        token = page.get("NextToken")
        if not token:
            break
    readings: dict[str, Reading] = {}
    for qid, (spec, stat) in where.items():
        got = values.get(qid) or []
        if not got:
            continue  # the endpoint did not report this metric (e.g. ModelSetupTime off serverless)
        reading = readings.setdefault(spec.key, Reading(f"{spec.namespace} {spec.name_for(component)}",
                                                        spec.unit, {}))
        # One period spans the window, so there is one value; scaled into the results' unit (not counts).
        reading.stats[stat] = got[0] if stat == "count" else got[0] * spec.scale
    return readings

"""Reading an endpoint's CloudWatch metrics over a window, against the local AWS (moto with sagellm's
extensions): the same GetMetricData call a real account answers, percentiles included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sagellm.aws import cloudwatch
from sagellm.aws.local import LocalAws
from sagellm.aws.moto_ext import percentile

DIMS = [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "AllTraffic"}]


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    return server


def put(aws: LocalAws, namespace: str, name: str, when: datetime, values: list[float], unit: str = "None",
        dims: list[dict[str, str]] = DIMS) -> None:
    aws.client("cloudwatch").put_metric_data(Namespace=namespace, MetricData=[{
        "MetricName": name, "Dimensions": dims, "Timestamp": when, "Unit": unit,
        "Values": values, "Counts": [1.0] * len(values)}])


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 90) == 90
    assert percentile(values, 99.5) == 100
    assert percentile([7.0], 90) == 7


def test_aligned_window_is_one_period_from_a_whole_resolution() -> None:
    start = datetime(2026, 1, 1, 12, 0, 42, 500000, tzinfo=UTC)
    end = start + timedelta(seconds=30)
    minute = cloudwatch.aligned(start, end, 60)
    assert (minute.start, minute.period_s) == (datetime(2026, 1, 1, 12, 0, tzinfo=UTC), 120)
    second = cloudwatch.aligned(start, end, 1)
    assert (second.start, second.period_s) == (datetime(2026, 1, 1, 12, 0, 42, tzinfo=UTC), 31)
    assert second.end >= end



def test_contiguous_windows_share_their_edges_and_end_on_the_resolution() -> None:
    t = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    spans = [(t + timedelta(seconds=0.4), t + timedelta(seconds=5.2)),
             (t + timedelta(seconds=5.3), t + timedelta(seconds=5.9)),  # inside the first one's last second
             (t + timedelta(seconds=6.1), t + timedelta(seconds=9.5))]
    first, second, third = cloudwatch.contiguous(spans, 1)
    assert (first.start, first.end) == (t, t + timedelta(seconds=6))
    assert (second.start, second.end, second.period_s) == (first.end, first.end + timedelta(seconds=1), 1)
    assert (third.start, third.end) == (second.end, t + timedelta(seconds=10))


@pytest.mark.slow
def test_reads_latency_percentiles_in_ms_and_counts_inside_the_window_only(aws: LocalAws) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(seconds=30), now - timedelta(seconds=10)
    inside = start + timedelta(seconds=5)
    # 1..100 ms in microseconds, as SageMaker publishes ModelLatency.
    put(aws, cloudwatch.SAGEMAKER, "ModelLatency", inside, [i * 1000.0 for i in range(1, 101)], "Microseconds")
    put(aws, cloudwatch.SAGEMAKER, "Invocations", inside, [1.0] * 100)
    put(aws, cloudwatch.SAGEMAKER, "Invocations", start - timedelta(seconds=5), [1.0] * 7)  # the level before
    put(aws, cloudwatch.SAGEMAKER, "Invocation5XXErrors", inside, [0.0] * 99 + [1.0])
    put(aws, cloudwatch.ENDPOINTS, "GPUUtilization", inside, [40.0, 60.0], "Percent")
    put(aws, cloudwatch.SAGEMAKER, "Invocations", inside, [1.0] * 5,  # another endpoint's
        dims=[{"Name": "EndpointName", "Value": "other"}, {"Name": "VariantName", "Value": "AllTraffic"}])

    window = cloudwatch.aligned(start, end, 1)
    assert window.start == start and window.period_s == 20
    readings = cloudwatch.read_endpoint(aws.client("cloudwatch"), "ep", window)

    latency = readings["model_latency_ms"]
    assert (latency.name, latency.unit) == ("AWS/SageMaker ModelLatency", "ms")
    assert latency.stats == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "avg": 50.5, "max": 100.0, "count": 100}
    assert readings["invocations"].stats == {"sum": 100.0}
    assert readings["invocation_5xx_errors"].stats == {"sum": 1.0, "avg": 0.01}
    assert readings["gpu_utilization_pct"].stats == {"avg": 50.0, "max": 60.0}
    assert "model_setup_time_ms" not in readings  # not reported: left out, not zero


def test_inference_component_endpoints_are_read_by_component(aws: LocalAws) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(seconds=20), now
    component = [{"Name": "InferenceComponentName", "Value": "ic-a"}]
    put(aws, cloudwatch.SAGEMAKER, "Invocations", start + timedelta(seconds=1), [1.0] * 3, dims=component)
    put(aws, cloudwatch.SAGEMAKER, "ConcurrentRequestsPerCopy", start + timedelta(seconds=1), [2.0, 5.0],
        dims=component)
    put(aws, cloudwatch.ENDPOINTS, "GPUUtilization", start + timedelta(seconds=1), [80.0], "Percent")

    readings = cloudwatch.read_endpoint(aws.client("cloudwatch"), "ep", cloudwatch.aligned(start, end, 1),
                                        component="ic-a")

    assert readings["invocations"].stats == {"sum": 3.0}
    assert readings["concurrent_requests"].name == "AWS/SageMaker ConcurrentRequestsPerCopy"
    assert readings["concurrent_requests"].stats == {"max": 5.0, "min": 2.0}
    assert readings["gpu_utilization_pct"].stats["avg"] == 80.0  # utilisation stays per endpoint variant

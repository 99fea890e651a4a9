"""Server-side metrics beside the client's: a local bench reads back, per level, what the emulator published
into the local AWS's CloudWatch, and a gate rule can name them."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench_helpers import INSTANCE, MODEL, Ran, bench_args, request_lines, results_of, sagellm
from sagellm.aws.account import resolve_account
from sagellm.aws.local import LocalAws
from sagellm.bench.server_metrics import ServerWatch
from sagellm.bench.targets.stack import SageMakerTarget
from sagellm.profiles import resolve

# The server's ModelLatency and the client's e2e time the same requests on the emulator's clock, but the
# server window also holds the warm-up requests (the client's statistics leave them out): within 10 %.
TOLERANCE = 0.10

GATES = """
    rules:
      - {metric: error_rate, where: 1, max: 0.05}
      - {metric: server.model_latency_ms.p90, where: 4, max: 1000000}
      - {metric: server.invocations.sum, where: 1, min: 1}
"""


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    out = tmp_path_factory.mktemp("server") / "out"
    gates = out.parent / "gates.yaml"
    gates.write_text(textwrap.dedent(GATES))
    # 64 tokens: every request takes over a simulated second, the resolution the levels are read at.
    # A CDK deploy into the local AWS dominates (~10 s alone; minutes on a loaded shared machine).
    return sagellm(*bench_args(out, "--thresholds", str(gates), "--output-tokens", "64", requests="8",
                               warmup="1"), timeout=300), out


@pytest.mark.integration  # a bench deployed through the real CDK CLI into the moto server
def test_every_level_carries_cloudwatch_metrics_from_the_local_aws(local_run: tuple[Ran, Path]) -> None:
    ran, out = local_run
    assert ran.returncode == 0, ran.stderr[-2000:]
    levels = results_of(out)["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for lv in levels:
        server = lv["server"]
        assert server["source"] == "cloudwatch"
        assert server["period_s"] >= 1
        metrics = server["metrics"]
        assert {"model_latency_ms", "overhead_latency_ms", "invocations", "invocation_4xx_errors",
                "invocation_5xx_errors", "concurrent_requests", "gpu_utilization_pct",
                "gpu_memory_utilization_pct"} <= set(metrics)
        assert metrics["model_latency_ms"]["name"] == "AWS/SageMaker ModelLatency"
        assert metrics["model_latency_ms"]["unit"] == "ms"
        assert metrics["gpu_utilization_pct"]["name"] == "/aws/sagemaker/Endpoints GPUUtilization"
        assert metrics["invocation_4xx_errors"]["stats"]["sum"] == 0
        # ml.g5.2xlarge has one GPU: 0–100 %; a level of back-to-back requests keeps it busy part of the time.
        assert 0 < metrics["gpu_utilization_pct"]["stats"]["max"] <= 100
        assert 0 < metrics["gpu_memory_utilization_pct"]["stats"]["avg"] <= 100
        # Sampled each simulated second: a sample that straddles two levels may carry the next one's peak.
        assert 1 <= metrics["concurrent_requests"]["stats"]["max"] <= 4
    assert levels[1]["server"]["metrics"]["concurrent_requests"]["stats"]["max"] >= 2


@pytest.mark.integration  # a bench deployed through the real CDK CLI into the moto server
def test_server_invocations_count_every_request_the_level_sent(local_run: tuple[Ran, Path]) -> None:
    _, out = local_run
    sent: dict[Any, int] = {}
    for line in request_lines(out):
        sent[line["concurrency"]] = sent.get(line["concurrency"], 0) + 1
    for lv in results_of(out)["levels"]:
        server = lv["server"]["metrics"]
        # Warm-up requests included: the server sees them too.
        assert server["invocations"]["stats"]["sum"] == sent[lv["concurrency"]]
        assert server["model_latency_ms"]["stats"]["count"] == sent[lv["concurrency"]]


@pytest.mark.integration  # a bench deployed through the real CDK CLI into the moto server
def test_server_model_latency_agrees_with_the_client_e2e(local_run: tuple[Ran, Path]) -> None:
    _, out = local_run
    for lv in results_of(out)["levels"]:
        client_ms = lv["e2e_s"]["p50"] * 1000
        server_ms = lv["server"]["metrics"]["model_latency_ms"]["stats"]["p50"]
        assert server_ms <= client_ms * (1 + TOLERANCE)
        assert server_ms >= client_ms * (1 - TOLERANCE)


@pytest.mark.slow
def test_a_gate_rule_on_a_server_metric_is_checked(local_run: tuple[Ran, Path]) -> None:
    _, out = local_run
    gate = results_of(out)["gate"]
    assert "server.model_latency_ms.p90@4 <= 1e+06" in gate["rules"]
    assert gate["passed"] is True


@pytest.mark.slow
def test_the_report_shows_the_server_table(local_run: tuple[Ran, Path]) -> None:
    _, out = local_run
    report = (out / "report.md").read_text()
    assert report.count("Server-side (cloudwatch") == 2  # one table per level
    assert "| model_latency_ms | ms |" in report and "AWS/SageMaker ModelLatency" in report


@pytest.mark.slow
def test_the_sagemaker_target_reads_each_level_as_whole_minutes_of_cloudwatch(
        server: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real-account path, against the local AWS: SageMaker's 1-minute data, one period per level."""
    server.reset()
    account = resolve_account("us-east-1", server.env({}), bootstrap=False)
    target = SageMakerTarget(resolve("max-throughput", MODEL, INSTANCE), account, tmp_path, "r1", "h:1")
    target.endpoint = "prod-chat"
    said: list[str] = []
    watch = ServerWatch(target, SimpleNamespace(inference_component=None), said.append)  # type: ignore[arg-type]
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    dims = [{"Name": "EndpointName", "Value": "prod-chat"}, {"Name": "VariantName", "Value": "AllTraffic"}]
    cw = server.client("cloudwatch")
    for offset_s, count, latency_us in ((30, 12, 800_000.0), (90, 40, 2_000_000.0)):  # one minute each
        when = minute + timedelta(seconds=offset_s)
        cw.put_metric_data(Namespace="AWS/SageMaker", MetricData=[
            {"MetricName": "Invocations", "Dimensions": dims, "Timestamp": when, "Value": count, "Unit": "None"},
            {"MetricName": "ModelLatency", "Dimensions": dims, "Timestamp": when, "Values": [latency_us] * count,
             "Counts": [1.0] * count, "Unit": "Microseconds"}])
    watch.level_done("1", minute + timedelta(seconds=5), minute + timedelta(seconds=50))
    watch.level_done("4", minute + timedelta(seconds=62), minute + timedelta(seconds=110))

    blocks = watch.finish()

    assert said == []
    one, four = blocks["1"], blocks["4"]
    assert (one.window_start, one.period_s) == (minute, 60)  # rounded down to the minute, as CloudWatch does
    assert (four.window_start, four.period_s) == (minute + timedelta(minutes=1), 60)
    assert one.metrics["invocations"].stats.sum == 12 and four.metrics["invocations"].stats.sum == 40
    assert four.metrics["model_latency_ms"].stats.p90 == 2000.0
    assert "gpu_utilization_pct" not in four.metrics  # nothing published: left out

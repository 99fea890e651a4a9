"""The emulator publishes SageMaker's endpoint metrics into the local AWS: read back with the bench's reader,
on the emulator's simulated clock, by inference component."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sagellm.aws import cloudwatch
from sagellm.aws.local import LocalAws
from sagellm.clock import REAL, Clock
from sagellm.emulator import EmulatorProcess, make_prompt
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

ENDPOINT = "sagellm-emulated"
TIME_SCALE = 0.1
PLAN = DeploymentPlan.model_validate({
    "profile": "test", "region": "us-east-1", "container": "tgi", "instance_type": "ml.g5.12xlarge",
    "initial_instance_count": 1, "endpoint_kind": "inference-component",
    "models": [ModelDeployment(name="chat", model_id="meta-llama/Llama-2-7b-hf", image_uri="tgi:emulated",
                               tensor_parallel=1, copy_count=2,
                               environment={"MAX_INPUT_TOKENS": "2048", "MAX_TOTAL_TOKENS": "4096"})],
    "startup_health_check_timeout_s": 600, "model_data_download_timeout_s": 600,
    "input_tokens": 256, "output_tokens": 256, "tags": {}})


def _invoke(client: object, n_in: int, n_out: int) -> float | None:
    """One invocation of component `chat`; the emulator's own e2e in simulated seconds (None if refused)."""
    body = json.dumps({"inputs": make_prompt(n_in), "parameters": {"max_new_tokens": n_out}}).encode()
    try:
        reply = client.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName="chat", Body=body,  # type: ignore[attr-defined]
                                       ContentType="application/json")
    except ClientError:
        return None
    return float(reply["ResponseMetadata"]["HTTPHeaders"]["x-sagellm-server-e2e-s"]) / TIME_SCALE


@pytest.fixture(scope="module")
def published(server: LocalAws) -> tuple[list[float | None], dict[str, cloudwatch.Reading], dict[str, float]]:
    server.reset()
    with EmulatorProcess(PLAN, clock=Clock(TIME_SCALE), endpoint_name=ENDPOINT,
                         cloudwatch_url=server.endpoint_url) as emu:
        runtime = boto3.client("sagemaker-runtime", endpoint_url=emu.url, region_name="us-east-1",
                               aws_access_key_id="testing", aws_secret_access_key="testing",
                               config=Config(retries={"total_max_attempts": 1}))
        started = datetime.now(UTC)
        e2e = [_invoke(runtime, 64, 16) for _ in range(3)] + [_invoke(runtime, 3000, 16)]  # the last: 422
        ended = datetime.now(UTC)
        clock = emu.flush_metrics()

    def simulated(t: datetime) -> datetime:
        return datetime.fromtimestamp(clock["origin"] + (t.timestamp() - clock["origin"]) / TIME_SCALE, UTC)

    [window] = cloudwatch.contiguous([(simulated(started), simulated(ended))], 1)
    readings = cloudwatch.read_endpoint(server.client("cloudwatch"), ENDPOINT, window, component="chat")
    return e2e, readings, clock


@pytest.mark.slow
def test_invocations_and_errors_are_counted_per_component(published) -> None:  # type: ignore[no-untyped-def]
    e2e, readings, _ = published
    assert e2e[3] is None  # 3000 prompt tokens: refused
    assert readings["invocations"].stats == {"sum": 4.0}
    assert readings["invocation_4xx_errors"].stats == {"sum": 1.0, "avg": 0.25}
    assert readings["invocation_5xx_errors"].stats["sum"] == 0


@pytest.mark.slow
def test_model_latency_is_the_emulators_own_e2e_in_simulated_time(published) -> None:  # type: ignore[no-untyped-def]
    e2e, readings, _ = published
    latency = readings["model_latency_ms"]
    assert latency.stats["count"] == 3  # refused requests never reached the model
    served_ms = sorted(s * 1000 for s in e2e if s is not None)
    assert latency.stats["max"] == pytest.approx(served_ms[-1], abs=0.01)
    assert latency.stats["p50"] == pytest.approx(served_ms[1], abs=0.01)


def test_concurrency_is_per_copy_and_utilisation_per_endpoint(published) -> None:  # type: ignore[no-untyped-def]
    _, readings, clock = published
    assert clock["time_scale"] == TIME_SCALE
    assert readings["concurrent_requests"].name == "AWS/SageMaker ConcurrentRequestsPerCopy"
    assert readings["concurrent_requests"].stats["max"] == 0.5  # one request in flight over two copies
    gpu = readings["gpu_utilization_pct"]
    # ml.g5.12xlarge has 4 GPUs; two copies at TP 1 use two: at most 200 %.
    assert 0 < gpu.stats["max"] <= 200
    assert 0 < readings["gpu_memory_utilization_pct"].stats["avg"] <= 200
    assert "cpu_utilization_pct" not in readings  # not modelled: not published


def test_a_refusal_at_zero_copies_counts_in_no_capacity_invocation_failures() -> None:
    from sagellm.emulator.frontend.cloudwatch import Publisher

    publisher = Publisher("http://127.0.0.1:9", "us-east-1", "ep", {}, REAL, 1, inference_components=True)
    publisher.invocation(None, "ic-a", 400, None, 0.001, no_capacity=True)
    publisher.invocation("a", "ic-a", 200, 1.0, 1.1)
    failures = [values for (_, metric, dims, _, _), values in publisher._pending.items()
                if metric == "NoCapacityInvocationFailures"]
    assert sorted(v for vs in failures for v in vs) == [0.0, 1.0]
    assert all(dict(dims) == {"InferenceComponentName": "ic-a"} for (_, metric, dims, _, _) in publisher._pending
               if metric == "NoCapacityInvocationFailures")

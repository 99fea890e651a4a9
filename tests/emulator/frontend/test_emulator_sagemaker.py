"""The emulator as a child process, driven by boto3's sagemaker-runtime client (SageMaker's wire protocol)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess, make_prompt
from sagellm.emulator.process import port_is_free
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

LLAMA2_7B = "meta-llama/Llama-2-7b-hf"
LLAMA2_13B = "meta-llama/Llama-2-13b-hf"
ENDPOINT = "sagellm-emulated"
# As a stack names them: <stack>-<model>-<hash of the construct path>.
DEPLOYED = {"chat": "MyStack-chat-1a2b3c", "big": "MyStack-big-4d5e6f"}


def _model(name: str, model_id: str, tp: int, copies: int) -> ModelDeployment:
    return ModelDeployment(name=name, model_id=model_id, image_uri="tgi:emulated", tensor_parallel=tp,
                           copy_count=copies,
                           environment={"MAX_INPUT_TOKENS": "2048", "MAX_TOTAL_TOKENS": "4096"})


def _plan(kind: str, instance: str, *models: ModelDeployment) -> DeploymentPlan:
    return DeploymentPlan.model_validate({
        "profile": "test", "region": "us-east-1", "container": "tgi", "instance_type": instance,
        "initial_instance_count": 1, "endpoint_kind": kind, "models": models,
        "startup_health_check_timeout_s": 600, "model_data_download_timeout_s": 600,
        "input_tokens": 256, "output_tokens": 256, "tags": {}})


IC_PLAN = _plan("inference-component", "ml.g5.12xlarge",
                _model("chat", LLAMA2_7B, 1, 2), _model("big", LLAMA2_13B, 2, 1))
INSTANCE_PLAN = _plan("instance", "ml.g5.2xlarge", _model("llama2-7b", LLAMA2_7B, 1, 1))


Served = tuple[EmulatorProcess, Any]


def _client(url: str) -> Any:
    # Retries off: a 424 or 429 must reach the test as it came, not be retried inside the call.
    return boto3.client("sagemaker-runtime", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1}, read_timeout=30))


@pytest.fixture(scope="module")
def ic_endpoint() -> Iterator[Served]:
    with EmulatorProcess(IC_PLAN, clock=Clock(0.1), endpoint_name=ENDPOINT, component_names=DEPLOYED) as emu:
        yield emu, _client(emu.url)


@pytest.fixture(scope="module")
def fast_endpoint() -> Iterator[Served]:
    # 60 simulated seconds pass in 0.6 s.
    with EmulatorProcess(INSTANCE_PLAN, clock=Clock(0.01)) as emu:
        yield emu, _client(emu.url)


def _body(n_in: int, n_out: int, stream: bool = False) -> bytes:
    return json.dumps({"inputs": make_prompt(n_in), "parameters": {"max_new_tokens": n_out, "details": True},
                       "stream": stream}).encode()


def _metrics(emu: EmulatorProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"{emu.url}/metrics") as resp:
        return json.loads(resp.read())


def _stream_events(response: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
    """(arrival time, TGI event) for each SSE line carried in the PayloadParts."""
    out, rest = [], b""
    for event in response["Body"]:
        now = time.perf_counter()
        rest += event["PayloadPart"]["Bytes"]
        *lines, rest = rest.split(b"\n")
        out += [(now, json.loads(line[5:])) for line in lines if line.startswith(b"data:")]
    return out


@pytest.mark.slow
def test_invoke_endpoint_returns_the_tgi_reply_of_the_named_component(ic_endpoint: Served) -> None:
    emu, client = ic_endpoint
    before = _metrics(emu)["models"]["big"]["completed"]
    resp = client.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName=DEPLOYED["big"], Body=_body(40, 9),
                                  ContentType="application/json")
    body = json.loads(resp["Body"].read())
    assert body[0]["details"]["generated_tokens"] == 9
    headers = resp["ResponseMetadata"]["HTTPHeaders"]
    assert float(headers["x-sagellm-server-e2e-s"]) > float(headers["x-sagellm-server-ttft-s"]) > 0
    assert headers["x-sagellm-emulated"] == "true"
    assert _metrics(emu)["models"]["big"]["completed"] == before + 1


def test_the_component_header_must_name_the_deployed_component_exactly(ic_endpoint: Served) -> None:
    emu, client = ic_endpoint
    before = _metrics(emu)["models"]["chat"]["completed"]
    client.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName=DEPLOYED["chat"], Body=_body(5, 2))
    assert _metrics(emu)["models"]["chat"]["completed"] == before + 1
    # The plan's model name, a prefix or a suffix of the deployed name: SageMaker knows none of them.
    for near in ("chat", "MyStack-chat", "chat-1a2b3c", DEPLOYED["chat"].upper()):
        with pytest.raises(ClientError) as info:
            client.invoke_endpoint(EndpointName=ENDPOINT, InferenceComponentName=near, Body=_body(5, 2))
        assert info.value.response["Error"]["Code"] == "ValidationError"
        assert info.value.response["Error"]["Message"] == (
            f"Inference Component {near} not found for endpoint {ENDPOINT} of account 000000000000.")


def test_response_stream_delivers_every_token_before_the_end(ic_endpoint: Served) -> None:
    _, client = ic_endpoint
    t0 = time.perf_counter()
    resp = client.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT, InferenceComponentName=DEPLOYED["chat"], Body=_body(30, 120, stream=True),
        ContentType="application/json")
    assert resp["ContentType"] == "text/event-stream"
    events = _stream_events(resp)
    assert len(events) == 120 and all(e["token"] is not None for _, e in events)
    details = events[-1][1]["details"]
    assert details["generated_tokens"] == 120 and details["sagellm_server_e2e_s"] > 0
    # 119 decode steps of ~3 ms each (~360 ms) separate the first token from the last. The bound leaves room
    # for a busy machine: the engine catches up a debt of up to 50 ms at once, and the client may read late.
    first, last = events[0][0] - t0, events[-1][0] - t0
    assert last - first > 0.12 and first < last / 2


def test_missing_or_unknown_component_is_a_validation_error(ic_endpoint: Served) -> None:
    _, client = ic_endpoint
    for extra in ({}, {"InferenceComponentName": "no-such-model"}):
        with pytest.raises(ClientError) as info:
            client.invoke_endpoint(EndpointName=ENDPOINT, Body=_body(5, 2), **extra)
        assert info.value.response["Error"]["Code"] == "ValidationError"
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_unknown_endpoint_is_a_validation_error(ic_endpoint: Served) -> None:
    _, client = ic_endpoint
    with pytest.raises(ClientError) as info:
        client.invoke_endpoint_with_response_stream(EndpointName="other", InferenceComponentName=DEPLOYED["chat"],
                                                    Body=_body(5, 2, stream=True))
    assert info.value.response["Error"]["Code"] == "ValidationError"
    assert info.value.response["Error"]["Message"] == "Endpoint other of account 000000000000 not found."


@pytest.mark.slow
def test_container_refusal_comes_back_as_model_error_with_the_original_status(
        fast_endpoint: Served) -> None:
    _, client = fast_endpoint
    with pytest.raises(ClientError) as info:
        client.invoke_endpoint(EndpointName="sagellm-test", Body=_body(3000, 5))
    error = info.value.response
    assert error["Error"]["Code"] == "ModelError" and error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["OriginalStatusCode"] == 422
    assert json.loads(error["OriginalMessage"])["error_type"] == "validation"


def test_invoke_endpoint_times_out_after_60_simulated_seconds(fast_endpoint: Served) -> None:
    emu, client = fast_endpoint
    before = _metrics(emu)["models"]["llama2-7b"]["timed_out"]
    t0 = time.perf_counter()
    with pytest.raises(ClientError) as info:  # ~2500 × 33 ms ≈ 80 simulated seconds of decoding
        client.invoke_endpoint(EndpointName="sagellm-test", Body=_body(10, 2500))
    elapsed = time.perf_counter() - t0
    assert info.value.response["Error"]["Code"] == "ModelError"
    assert "timed out" in info.value.response["Error"]["Message"]
    assert 0.55 < elapsed < 5
    assert _metrics(emu)["models"]["llama2-7b"]["timed_out"] == before + 1


def test_response_stream_times_out_with_a_model_stream_error_after_tokens(
        fast_endpoint: Served) -> None:
    _, client = fast_endpoint
    resp = client.invoke_endpoint_with_response_stream(EndpointName="sagellm-test",
                                                       Body=_body(10, 2500, stream=True))
    tokens = 0
    with pytest.raises(EventStreamError) as info:
        for event in resp["Body"]:
            tokens += event["PayloadPart"]["Bytes"].count(b"data:")
    assert info.value.response["Error"]["Code"] == "ModelStreamError"
    assert "timeout" in info.value.response["Error"]["Message"]
    assert 1000 < tokens < 2500


@pytest.mark.slow
def test_child_process_runs_in_its_own_session_and_leaves_no_port_behind() -> None:
    emu = EmulatorProcess(INSTANCE_PLAN, clock=Clock(0.1))
    with emu:
        pid, port = emu.pid, emu.port
        assert pid is not None and os.getsid(pid) == pid
        assert _metrics(emu)["pid"] == pid
    assert port_is_free("127.0.0.1", port, wait_s=0)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (an exited child of init may stay a zombie until reaped: that counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_child_process_exits_when_its_parent_is_killed(tmp_path: Any) -> None:
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(INSTANCE_PLAN.model_dump_json())
    parent = textwrap.dedent(f"""
        import time
        from sagellm.emulator import EmulatorProcess
        emu = EmulatorProcess({str(plan_path)!r}).__enter__()
        print(emu.pid, emu.port, emu._tmp.name, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid_text, port_text, work_dir = proc.stdout.readline().split()
        pid, port = int(pid_text), int(port_text)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)  # do not leave it behind even when the test fails
        pytest.fail("the emulator outlived its parent")
    assert port_is_free("127.0.0.1", port)
    assert not os.path.exists(work_dir)  # the orphan removed its own log folder


@pytest.mark.slow
def test_run_emulator_serves_in_the_foreground_until_interrupted(tmp_path: Any) -> None:
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(INSTANCE_PLAN.model_dump_json())
    code = ("from sagellm.emulator import run_emulator\n"
            "from sagellm.profiles.plan import DeploymentPlan\n"
            f"run_emulator(DeploymentPlan.model_validate_json(open({str(plan_path)!r}).read()), port=0)")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        assert "EMULATED" in banner
        match = re.search(r"on (http://127\.0\.0\.1:(\d+)):", banner)
        assert match is not None, banner
        with urllib.request.urlopen(f"{match[1]}/ping") as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert port_is_free("127.0.0.1", int(match[2]))

"""bench.run in-process with faults injected: every way out tears down, and nothing is left in moto, no
emulator process and no port.

The local target's moto server runs in this process, so the probe (bench_helpers.install_probe) lists
what moto holds at the moment the bench stops it, and records every emulator child it started.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import SageMakerModelBackend

from bench_helpers import INSTANCE, MODEL, Probe, hung_server, install_probe, pid_alive, request_lines
from sagellm import bench
from sagellm.aws import cloudformation
from sagellm.aws.local import LocalAws
from sagellm.bench import runner
from sagellm.bench.client.transports import HttpTransport, SageMakerTransport
from sagellm.bench.client.workload import WorkloadOptions
from sagellm.bench.targets import http as http_target
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.errors import ExitStatus, InputError
from sagellm.planner import Payload
from sagellm.profiles import resolve

# `cdk bootstrap` templates an S3 bucket policy, which moto skips (harmless for sagellm's stacks).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.+S3.+BucketPolicy")

PAYLOAD = Payload(256, 32)


SERVED = bench.ServingSpec("max-throughput", MODEL, INSTANCE, PAYLOAD)


def spec(out: Path, levels: tuple[int, ...] = (1, 4), **parts: Any) -> bench.Bench:
    """A quick local sweep: two small levels at 20× simulated speed, no warm-up."""
    return bench.Bench(**{"serving": SERVED, "target": bench.Local(time_scale=0.05),
                          "load": bench.Closed(levels, requests_per_level=4, warmup=0),
                          "sweep": bench.Sweep("doubling"), "output": bench.Output(out), **parts})


def quiet(text: str) -> None:
    """The bench's `say`, silenced."""


def write_profile(folder: Path, name: str, serving: dict[str, int]) -> Path:
    """A team profile extending max-throughput with some serving values pinned."""
    folder.mkdir(parents=True, exist_ok=True)
    body = {"name": name, "description": "test profile", "extends": "max-throughput", "serving": serving}
    (folder / f"{name}.yaml").write_text(json.dumps(body))  # JSON is YAML
    return folder


# ------------------------------------------------------------------------------------- deploy failure

@pytest.mark.integration
def test_deploy_failure_exits_3_writes_results_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = install_probe(monkeypatch)

    def no_capacity(self: SageMakerModelBackend, **kwargs: object) -> None:
        raise ValidationError(message="Injected: insufficient capacity for ml.g5.2xlarge")

    monkeypatch.setattr(SageMakerModelBackend, "create_endpoint", no_capacity)

    outcome = bench.run(spec(tmp_path), say=quiet)

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error is not None
    assert "(AWS::SageMaker::Endpoint) CREATE_FAILED: Injected: insufficient capacity" in outcome.error
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["teardown"]["status"] == "not-applicable"  # the failed deploy deleted its rolled-back stack
    assert "does not exist" in saved["teardown"]["detail"]
    assert saved["levels"] == []
    assert "Injected: insufficient capacity" in saved["stopped_reason"]
    assert saved["failure"] == {"exit_status": 3, "message": outcome.error}
    assert (tmp_path / "report.md").read_text().startswith("**RUN FAILED** (exit 3) — ")
    assert '<error type="target-failure"' in (tmp_path / "junit.xml").read_text()
    assert request_lines(tmp_path) == []
    assert probe.emulators == []  # the endpoint never came up, so no emulator was started
    probe.assert_nothing_left()


# ---------------------------------------------------------------------------------- teardown failure

@pytest.mark.integration
def test_a_destroy_that_leaves_resources_fails_the_run_loudly_with_what_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = install_probe(monkeypatch)
    # The delete "succeeds" but deletes nothing: the bench must look for itself, not trust the call.
    monkeypatch.setattr(cloudformation, "delete_run_stack", lambda *args, **kwargs: True)

    outcome = bench.run(spec(tmp_path), say=quiet)

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert (outcome.error or "").startswith("TEARDOWN FAILED: left in the local AWS: stack sagellm-bench-")
    [left] = probe.leftovers  # what moto held when the bench stopped it: the whole stack
    assert {"stacks", "endpoints", "endpoint_configs", "models"} <= set(left)
    teardown = outcome.results.teardown
    assert teardown.status == "failed"
    assert f"stack {left['stacks'][0]}" in teardown.leftovers
    assert f"endpoint {left['endpoints'][0]}" in teardown.leftovers
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["teardown"]["status"] == "failed"
    assert saved["failure"] == {"exit_status": 3, "message": outcome.error}
    assert saved["stopped_reason"] is None  # the sweep itself ran through
    assert "**TEARDOWN FAILED**" in (tmp_path / "report.md").read_text().splitlines()[0]
    assert [lv.concurrency for lv in outcome.results.levels] == [1, 4]  # the measurements still count
    assert not LocalAws._running
    assert probe.pids and not any(pid_alive(pid) for pid in probe.pids)


# ------------------------------------------------------------------------------ exception mid-sweep

class Boom(RuntimeError):
    """A bug in the load path (not an expected SagellmError)."""


@pytest.fixture(scope="module")
def crashed_mid_sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Probe, Any]]:
    """One local run whose transport raises on its 4th request (after 3 finished), shared by the tests."""
    out = tmp_path_factory.mktemp("crashed")
    with pytest.MonkeyPatch.context() as monkeypatch:
        probe = install_probe(monkeypatch)
        send = SageMakerTransport.send
        calls = []

        async def failing_send(self: SageMakerTransport, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) > 3:
                raise Boom("injected: the transport broke")
            return await send(self, *args, **kwargs)

        monkeypatch.setattr(SageMakerTransport, "send", failing_send)
        try:
            outcome: Any = bench.run(spec(out, (1,)), say=quiet)
        except Boom as exc:
            outcome = exc
    yield out, probe, outcome


@pytest.mark.integration
def test_an_exception_mid_sweep_still_tears_down_and_keeps_finished_records(
        crashed_mid_sweep: tuple[Path, Probe, Any]) -> None:
    out, probe, _ = crashed_mid_sweep

    assert len(probe.emulators) == 1
    probe.assert_nothing_left()
    assert [r["ok"] for r in request_lines(out)] == [True, True, True]  # a crash loses nothing finished


@pytest.mark.integration
def test_an_exception_mid_sweep_is_reported_as_a_target_failure_with_results(
        crashed_mid_sweep: tuple[Path, Probe, Any]) -> None:
    out, _, outcome = crashed_mid_sweep

    assert isinstance(outcome, bench.BenchOutcome)
    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert "injected: the transport broke" in (outcome.error or "")
    saved = json.loads((out / "results.json").read_text())
    assert saved["teardown"]["status"] == "destroyed"


# ------------------------------------------------------------------------------------ endpoint errors

@pytest.mark.integration
def test_overloaded_endpoint_stops_escalation_and_still_tears_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = install_probe(monkeypatch)
    profiles = write_profile(tmp_path / "profiles", "admit-two", {"max_concurrent_requests": 2})

    served = bench.ServingSpec("admit-two", MODEL, INSTANCE, PAYLOAD, profiles_dir=profiles)
    outcome = bench.run(spec(tmp_path / "out", (1, 8, 16), serving=served), say=quiet)

    assert outcome.exit_status == ExitStatus.OK, outcome.error  # no thresholds: errors are findings
    results = outcome.results
    assert results.run.environment["MAX_CONCURRENT_REQUESTS"] == "2"
    assert [lv.concurrency for lv in results.levels] == [1, 8]  # 16 never ran
    one, eight = results.levels
    assert one.errors["overloaded"] == 0 and one.ok == one.requests
    assert eight.errors["overloaded"] > 0
    assert sum(eight.errors.values()) == eight.errors["overloaded"]
    assert results.stopped_reason is not None
    assert "concurrency 8" in results.stopped_reason and "overloaded" in results.stopped_reason
    failed = [r for r in request_lines(tmp_path / "out") if not r["ok"]]
    assert failed and {r["error_kind"] for r in failed} == {"overloaded"}
    assert results.teardown.status == "destroyed"
    probe.assert_nothing_left()


def test_a_payload_over_the_pinned_input_cap_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # The caps are what the application may send; a workload that does not fit them is bad input (exit 2).
    profiles = write_profile(tmp_path, "short-input", {"max_input_tokens": 64})
    with pytest.raises(InputError) as caught:
        served = bench.ServingSpec("short-input", MODEL, INSTANCE, Payload(128, 32), profiles_dir=profiles)
        bench.run(bench.Bench(served, bench.Http("http://127.0.0.1:9"), output=bench.Output(tmp_path / "out")),
                  say=quiet)
    assert caught.value.exit_status == ExitStatus.BAD_INPUT
    assert caught.value.messages == [("input_tokens/output_tokens: 128 input + 32 output tokens do not fit under "
                                     "max_input_tokens 64 / max_total_tokens 4096; shorten the payload or raise "
                                     "the caps")]
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_prompts_over_a_servers_max_input_tokens_count_as_validation_errors(tmp_path: Path) -> None:
    # A server capped below the bench's workload (an existing endpoint, sized for someone else's payload).
    profiles = write_profile(tmp_path / "profiles", "short-input", {"max_input_tokens": 64})
    server = resolve("short-input", MODEL, INSTANCE, payload=Payload(32, 32), profiles_dir=profiles)

    with EmulatorProcess(server, clock=Clock(0.05)) as emulator:
        outcome = bench.run(spec(tmp_path / "out", serving=bench.ServingSpec("max-throughput", MODEL, INSTANCE,
                                                                             Payload(128, 32)),
                                 target=bench.Http(emulator.url)), say=quiet)

    # Nothing succeeded: the endpoint cannot serve this payload, which is a target failure, said in one line.
    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error == ("no request succeeded: validation: Input validation error: `inputs` tokens "
                             "must be <= 64. Given: 128")
    [level] = outcome.results.levels  # every request failed, so escalation stopped after the first level
    assert level.ok == 0 and level.errors["validation"] == level.requests > 0
    # TGI refuses a stream inside it: HTTP 200 and one SSE error event.
    assert {r["status"] for r in request_lines(tmp_path / "out")} == {200}
    assert outcome.results.teardown.status == "not-applicable"


@pytest.mark.integration
def test_an_open_loop_sweep_with_repeats_gives_rate_levels_with_their_spread(tmp_path: Path) -> None:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=Payload(80, 16))  # the longest request
    with EmulatorProcess(plan) as emulator:
        outcome = bench.run(bench.Bench(
            bench.ServingSpec("max-throughput", MODEL, INSTANCE), bench.Http(emulator.url),
            WorkloadOptions(input_tokens="48-80", output_tokens="16", seed=4),
            bench.Open((2.0, 4.0), "poisson", repeats=2, requests_per_level=6, warmup=1), bench.Sweep("doubling"),
            output=bench.Output(tmp_path)), say=quiet)

    assert outcome.exit_status == ExitStatus.OK, outcome.error
    results = outcome.results
    run = results.run
    assert (run.request_rate, run.concurrency, run.arrivals, run.max_in_flight, run.repeats, run.clock) == (
        [2.0, 4.0], [], "poisson", 1024, 2, "emulator")
    assert run.workload is not None and (run.workload.input_tokens, run.workload.seed) == ("48-80", 4)
    assert [(lv.load, lv.repeats, lv.requests) for lv in results.levels] == [("2/s", 2, 12), ("4/s", 2, 12)]
    for level in results.levels:
        assert level.predicted is None and level.lateness_ms is not None and level.spread is not None
        assert level.spread["throughput_tokens_per_s"].min <= level.spread["throughput_tokens_per_s"].max
        assert 48 <= (level.request_input_tokens.p50 or 0) <= 80 and level.request_output_tokens.p50 == 16
    assert results.max_throughput is not None and results.max_throughput.request_rate in (2.0, 4.0)
    records = request_lines(tmp_path)
    assert len(records) == 2 * 2 * 7 and len({r["request"] for r in records}) == 28
    assert {(r["request_rate"], r["repeat"]) for r in records} == {(2.0, 0), (2.0, 1), (4.0, 0), (4.0, 1)}
    report = (tmp_path / "report.md").read_text()
    assert "open loop, poisson arrivals at 2, 4 requests/s" in report and "### Request rate 4/s" in report


# ------------------------------------------------------------------------------------------ SIGTERM

@pytest.mark.integration
def test_sigterm_in_a_background_task_ends_the_sweep_without_a_stray_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=PAYLOAD)
    send, calls, helpers = HttpTransport.send, [], []

    async def send_with_a_helper_task(self: HttpTransport, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # SIGTERM lands while a task nobody awaits runs, as aiohttp's write_bytes does
            async def helper() -> None:
                signal.raise_signal(signal.SIGTERM)
                await asyncio.sleep(0)

            helpers.append(asyncio.get_running_loop().create_task(helper()))
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(HttpTransport, "send", send_with_a_helper_task)
    with EmulatorProcess(plan, clock=Clock(0.05)) as emulator:
        outcome = bench.run(spec(tmp_path, target=bench.Http(emulator.url),
                                 load=bench.Closed((1,), requests_per_level=50, warmup=0)), say=quiet)
    assert outcome.exit_status == ExitStatus.INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the bench put the handler back
    helpers.clear()
    gc.collect()  # a task's unretrieved exception is logged when the task is collected

    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


# ------------------------------------------------------------------------------------ before deploying

@pytest.mark.parametrize(("parts", "message"), [
    (lambda: {"target": bench.Local(time_scale=2.0)}, r"Local.time_scale: 2.0 must be in \(0, 1\]"),
    (lambda: {"target": bench.Http("")}, "Http.url: required"),
    (lambda: {"load": bench.Closed((1,), requests_per_level=4, duration_per_level_s=1.0)}, "give one, not both"),
    (lambda: {"serving": bench.ServingSpec("no-such-profile", MODEL)}, "no-such-profile"),
    (lambda: {"serving": bench.ServingSpec("max-throughput")}, "ServingSpec.profile/ServingSpec.model: required"),
    (lambda: {"serving": bench.ServingSpec("max-throughput"), "target": bench.Http("http://127.0.0.1:9")},
     "give both .+ or neither"),
    (lambda: {"target": bench.Http("http://127.0.0.1:9", api="grpc")}, "Http.api: 'grpc' must be"),
])
def test_bad_options_raise_before_anything_is_deployed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: Any, message: str) -> None:
    def no_target(*args: object, **kwargs: object) -> None:
        raise AssertionError("a target was created for bad input")

    monkeypatch.setattr(runner, "choose_target", no_target)

    with pytest.raises(InputError, match=message):
        bench.run(spec(tmp_path / "out", **parts()), say=quiet)

    assert not (tmp_path / "out").exists()


def test_a_rule_at_a_level_outside_the_sweep_is_refused_before_deploying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "choose_target", lambda *a, **k: pytest.fail("a target was created for bad input"))
    gates = tmp_path / "gates.yaml"
    gates.write_text("rules:\n  - {metric: error_rate, where: 16, max: 0.01}\n")

    with pytest.raises(InputError) as exc:
        bench.run(spec(tmp_path / "out", gate=bench.Gate(gates)), say=quiet)

    assert exc.value.messages == [(f"{gates}: rules[0].where: 16 is not a level of the sweep (1, 4); use one of "
                                   "its levels, knee or max")]
    assert not (tmp_path / "out").exists()


def test_an_incomparable_baseline_is_refused_before_deploying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from results_helpers import RUN, write_run

    monkeypatch.setattr(runner, "choose_target", lambda *a, **k: pytest.fail("a target was created for bad input"))
    other_payload = write_run(tmp_path / "old", input_tokens=64, output_tokens=64)
    asked = spec(tmp_path / "out", gate=bench.Gate(baseline=other_payload))
    assert RUN.model == asked.serving.model and RUN.instance_type == asked.serving.instance

    with pytest.raises(InputError) as exc:
        bench.run(asked, say=quiet)

    [message] = exc.value.messages
    assert message.startswith(f"{other_payload}: baseline not comparable with this run: ")
    assert "input_tokens 256 (baseline 64); output_tokens 32 (baseline 64)" in message
    assert not (tmp_path / "out").exists()


def test_a_gated_model_on_sagemaker_without_a_token_secret_is_refused_before_deploying(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        bench.run(spec(tmp_path / "out", target=bench.SageMaker()), say=quiet)
    assert caught.value.messages == [
        ("meta-llama/Llama-2-7b-hf is gated on the Hugging Face Hub and no hf_token_secret is set: the endpoint "
        "would never start; store a token that has access in Secrets Manager and pass "
        "ServingSpec.hf_token_secret=<secret name or ARN> (or hf_token_secret: in the profile)")]
    assert not (tmp_path / "out").exists()


def test_a_token_given_as_the_secret_option_is_refused_without_echoing_it(tmp_path: Path) -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    with pytest.raises(InputError) as caught:
        bench.run(spec(tmp_path / "out", serving=bench.ServingSpec("max-throughput", MODEL, hf_token_secret=token),
                       target=bench.SageMaker()), say=quiet)
    assert caught.value.messages == [
        ("ServingSpec.hf_token_secret: looks like a Hugging Face access token itself; give the name or ARN of the Secrets "
        "Manager secret that holds the token (e.g. prod/huggingface/token)")]


# ------------------------------------------------------------------------------------------ hung endpoint

@pytest.mark.slow
def test_a_hung_endpoint_stops_the_bench_at_its_first_requests_limit_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The invocation limit cut from SageMaker's 60 s to 0.5 s, so the test takes seconds.
    monkeypatch.setattr(http_target, "HttpTransport", functools.partial(HttpTransport, first_byte_s=0.5))
    with hung_server() as url:
        outcome = bench.run(spec(tmp_path, target=bench.Http(url, api="tgi"),
                                 load=bench.Closed((2, 4), requests_per_level=8, warmup=1)), say=quiet)

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error == ("the endpoint answered none of the first requests: no first byte within the "
                             "invocation limit (0.5 s) (is it hung? its logs say why)")
    # Stopped at the first warm-up request's limit: no measured request was sent, no later level waited out.
    records = request_lines(tmp_path)
    assert 1 <= len(records) <= 2 and all(r["warmup"] and r["error_kind"] == "timeout" for r in records)
    assert all(r["e2e_s"] >= 0.5 for r in records)
    assert outcome.results.levels == []
    assert outcome.results.failure is not None and outcome.results.failure.message == outcome.error
    assert outcome.results.teardown.status == "not-applicable"

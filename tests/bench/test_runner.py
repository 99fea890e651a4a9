"""run_bench in-process with faults injected: every way out tears down, and nothing is left in moto, no
emulator process and no port.

The local target's moto server runs in this process, so the probe (bench_helpers.install_probe) lists
what moto holds at the moment the bench stops it, and records every emulator child it started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import SageMakerModelBackend

from bench_helpers import INSTANCE, MODEL, Probe, install_probe, pid_alive, request_lines
from sagellm.aws import cloudformation
from sagellm.aws.local import LocalAws
from sagellm.bench import runner
from sagellm.bench.runner import BenchOptions, BenchOutcome, run_bench
from sagellm.bench.transports import SageMakerTransport, TgiTransport
from sagellm.emulator import EmulatorProcess
from sagellm.errors import ExitStatus
from sagellm.planner import Payload
from sagellm.profiles import resolve

# `cdk bootstrap` templates an S3 bucket policy, which moto skips (harmless for sagellm's stacks).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.+S3.+BucketPolicy")

PAYLOAD = Payload(256, 32)


def options(out: Path, **changes: Any) -> BenchOptions:
    """A quick local sweep: two small levels at 20× simulated speed, no warm-up."""
    base = BenchOptions(profile="max-throughput", model=MODEL, instance=INSTANCE, payload=PAYLOAD,
                        concurrency=(1, 4), requests_per_level=4, warmup=0, out=out, time_scale=0.05)
    return dataclasses.replace(base, **changes)


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

    outcome = run_bench(options(tmp_path), say=quiet)

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error is not None
    assert "(AWS::SageMaker::Endpoint) CREATE_FAILED: Injected: insufficient capacity" in outcome.error
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["teardown"]["status"] == "not-applicable"  # the failed deploy deleted its rolled-back stack
    assert "does not exist" in saved["teardown"]["detail"]
    assert saved["levels"] == []
    assert "Injected: insufficient capacity" in saved["stopped_reason"]
    assert (tmp_path / "report.md").read_text().startswith("**NO GATE**")
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

    outcome = run_bench(options(tmp_path), say=quiet)

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
            outcome: Any = run_bench(options(out, concurrency=(1,)), say=quiet)
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

    assert isinstance(outcome, BenchOutcome)
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

    outcome = run_bench(options(tmp_path / "out", profile="admit-two", profiles_dir=profiles,
                                concurrency=(1, 8, 16)), say=quiet)

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


def test_payload_over_the_pinned_input_cap_resolves_so_the_bench_measures_the_rejections(tmp_path: Path) -> None:
    # resolve() keeps a pinned MAX_INPUT_TOKENS below the payload (the cap is the profile's decision), so
    # the bench must count the endpoint's 422s as validation errors rather than refuse to run.
    profiles = write_profile(tmp_path, "short-input", {"max_input_tokens": 64})

    plan = resolve("short-input", MODEL, INSTANCE, payload=Payload(128, 32), profiles_dir=profiles)

    assert plan.environment["MAX_INPUT_TOKENS"] == "64"


@pytest.mark.integration
def test_prompts_over_max_input_tokens_count_as_validation_errors(tmp_path: Path) -> None:
    profiles = write_profile(tmp_path / "profiles", "short-input", {"max_input_tokens": 64})
    plan = resolve("short-input", MODEL, INSTANCE, payload=Payload(128, 32), profiles_dir=profiles)

    with EmulatorProcess(plan, time_scale=0.05) as emulator:
        outcome = run_bench(BenchOptions(
            profile="short-input", model=MODEL, instance=INSTANCE, payload=Payload(128, 32),
            profiles_dir=profiles, target="http", url=emulator.url, concurrency=(1, 4), requests_per_level=4,
            warmup=0, out=tmp_path / "out"), say=quiet)

    # Nothing succeeded: the endpoint cannot serve this payload, which is a target failure, said in one line.
    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error == ("no request succeeded: validation: HTTP 422: Input validation error: `inputs` tokens "
                             "must be <= 64. Given: 128")
    [level] = outcome.results.levels  # every request failed, so escalation stopped after the first level
    assert level.ok == 0 and level.errors["validation"] == level.requests > 0
    assert {r["status"] for r in request_lines(tmp_path / "out")} == {422}
    assert outcome.results.teardown.status == "not-applicable"


# ------------------------------------------------------------------------------------------ SIGTERM

@pytest.mark.integration
def test_sigterm_in_a_background_task_ends_the_sweep_without_a_stray_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=PAYLOAD)
    send, calls, helpers = TgiTransport.send, [], []

    async def send_with_a_helper_task(self: TgiTransport, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # SIGTERM lands while a task nobody awaits runs, as aiohttp's write_bytes does
            async def helper() -> None:
                signal.raise_signal(signal.SIGTERM)
                await asyncio.sleep(0)

            helpers.append(asyncio.get_running_loop().create_task(helper()))
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(TgiTransport, "send", send_with_a_helper_task)
    with EmulatorProcess(plan, time_scale=0.05) as emulator:
        outcome = run_bench(BenchOptions(
            profile="max-throughput", model=MODEL, instance=INSTANCE, payload=PAYLOAD, target="http",
            url=emulator.url, concurrency=(1,), requests_per_level=50, warmup=0, out=tmp_path), say=quiet)
    assert outcome.exit_status == ExitStatus.INTERRUPTED
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the bench put the handler back
    helpers.clear()
    gc.collect()  # a task's unretrieved exception is logged when the task is collected

    assert not [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


# ------------------------------------------------------------------------------------ before deploying

@pytest.mark.parametrize(("changes", "message"), [
    ({"keep": True}, "--keep"),
    ({"time_scale": 2.0}, "--time-scale"),
    ({"target": "http"}, "--url: required"),
    ({"requests_per_level": 4, "duration_per_level_s": 1.0}, "give one, not both"),
    ({"profile": "no-such-profile"}, "no-such-profile"),
])
def test_bad_options_raise_before_anything_is_deployed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], message: str) -> None:
    def no_target(*args: object, **kwargs: object) -> None:
        raise AssertionError("a target was created for bad input")

    monkeypatch.setattr(runner, "choose_target", no_target)

    with pytest.raises(runner.InputError, match=message):
        run_bench(options(tmp_path / "out", **changes), say=quiet)

    assert not (tmp_path / "out").exists()

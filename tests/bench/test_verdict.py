"""An endpoint that crashes or hangs mid-sweep is a target failure (exit 3, one line), after teardown and
results; errors the endpoint answers are findings."""

from __future__ import annotations

import functools
import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import INSTANCE, MODEL, request_lines, results_of
from sagellm import bench
from sagellm.bench.client.responses import SseLines
from sagellm.bench.client.transports import HttpTransport
from sagellm.bench.load.level import LevelResult
from sagellm.bench.targets import http as http_target
from sagellm.bench.verdict import target_failure
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.errors import ExitStatus
from sagellm.planner import Payload
from sagellm.profiles import resolve
from sagellm.results.records import RequestRecord

PAYLOAD = Payload(256, 32)
REFUSED = "ClientConnectorError: Cannot connect to host 127.0.0.1:9 [Connection refused]"


def record(ok: bool, status: int | None = 200, kind: Any = None, error: str | None = None,
           ttft_s: float | None = 0.1) -> RequestRecord:
    return RequestRecord(concurrency=4, worker=0, start_s=0, ok=ok, e2e_s=1, status=status, error_kind=kind,
                         error=error, ttft_s=ttft_s if ok else None)


def level(records: list[RequestRecord], stopped: str | None) -> LevelResult:
    return LevelResult(concurrency=4, records=records, started_s=0, ended_s=1, window_start_s=0, window_end_s=1,
                       ramp_excluded=False, window_output_tokens=0, stopped_reason=stopped)


def test_refused_connections_after_the_last_success_mean_the_endpoint_stopped_answering() -> None:
    refused = record(False, None, "other", REFUSED)
    levels = [level([record(True)] * 3, None), level([record(True), refused, refused], "error rate 66%")]

    assert target_failure(levels) == ("the endpoint stopped answering at concurrency 4: none of the 2 request(s) "
                                      f"after the last success got an answer (last: {REFUSED})")


def timed_out(ttft_s: float | None, gaps_s: list[float]) -> RequestRecord:
    """A request the client gave up on after 60 s, having heard its first token at `ttft_s` and then `gaps_s`."""
    return RequestRecord(concurrency=4, worker=0, start_s=0, ok=False, e2e_s=60, status=200, error_kind="timeout",
                         error="no complete response within the client timeout (60 s)", ttft_s=ttft_s,
                         token_gaps_s=gaps_s)


def test_streams_that_stopped_mid_way_after_the_last_success_mean_the_endpoint_hung() -> None:
    # The endpoint froze with streams in flight: each heard tokens for a while, then nothing until the timeout.
    frozen = [timed_out(0.2, [0.05] * 10), timed_out(0.1, [0.05] * 3), timed_out(None, [])]
    levels = [level([record(True)] * 3, None), level([record(True), *frozen], "3 of 4 requests timed out")]

    assert target_failure(levels) == ("the endpoint stopped answering at concurrency 4: none of the 3 request(s) "
                                      "after the last success got an answer (last: no complete response within "
                                      "the client timeout (60 s))")


def test_slow_streams_still_sending_when_the_client_gave_up_are_saturation_not_a_failure() -> None:
    slow = [timed_out(20.0, [0.5] * 79), timed_out(30.0, [0.5] * 59)]  # tokens came until the end
    levels = [level([record(True)] * 3, None), level([record(True), *slow], "2 of 3 requests timed out")]

    assert target_failure(levels) is None


def test_answered_errors_are_findings_not_a_failure() -> None:
    overloaded = record(False, 429, "overloaded", "HTTP 429: Model is overloaded")
    levels = [level([record(True)] * 3, None), level([record(True), overloaded, overloaded], "error rate 66%")]

    assert target_failure(levels) is None


def test_a_transient_refusal_the_sweep_went_on_after_is_not_a_failure() -> None:
    levels = [level([record(True), record(False, None, "other", REFUSED)], None)]

    assert target_failure(levels) is None


def test_no_success_at_all_is_a_failure() -> None:
    levels = [level([record(False, 422, "validation", "too long")], "error rate 100%")]

    assert target_failure(levels) == "no request succeeded: validation: too long"


def run_against(emulator: EmulatorProcess, out: Path, after: int, fault: Any) -> Any:
    """A one-level http bench of 40 requests; `fault(emulator)` once `after` requests have finished."""
    send, calls = HttpTransport.send, []

    async def send_then_fault(self: HttpTransport, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == after + 1:
            fault(emulator)
        return await send(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(HttpTransport, "send", send_then_fault)
        # A client timeout of 1 s instead of 60 s, so a hang shows quickly.
        monkeypatch.setattr(http_target, "HttpTransport", functools.partial(HttpTransport, timeout_s=1.0))
        return bench.run(bench.Bench(
            serving=bench.ServingSpec("max-throughput", MODEL, INSTANCE, PAYLOAD), target=bench.Http(emulator.url),
            load=bench.Closed((1, 2), requests_per_level=40, warmup=0), sweep=bench.Sweep("doubling"),
            output=bench.Output(out)), say=print)


def crash(emulator: EmulatorProcess) -> None:
    os.kill(emulator.pid or 0, signal.SIGKILL)


def hang(emulator: EmulatorProcess) -> None:
    os.kill(emulator.pid or 0, signal.SIGSTOP)  # the kernel still accepts connections; nothing answers


@pytest.mark.integration
@pytest.mark.parametrize(("fault", "kind"), [(crash, "other"), (hang, "timeout")])
def test_an_endpoint_that_dies_mid_sweep_exits_3_with_one_line_after_writing_results(
        tmp_path: Path, fault: Any, kind: str) -> None:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=PAYLOAD)
    emulator = EmulatorProcess(plan, clock=Clock(0.05))
    emulator.start()
    pid = emulator.pid or 0
    try:
        outcome = run_against(emulator, tmp_path, after=3, fault=fault)
    finally:
        if fault is hang:
            os.kill(pid, signal.SIGCONT)
        emulator.stop()

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert (outcome.error or "").startswith("the endpoint stopped answering at concurrency 1: none of the ")
    assert "\n" not in (outcome.error or "")
    saved = results_of(tmp_path)
    assert saved["stopped_reason"] == outcome.error
    records = request_lines(tmp_path)
    assert [r["ok"] for r in records[:3]] == [True] * 3
    assert records[3:] and {r["error_kind"] for r in records[3:]} == {kind}
    assert (tmp_path / "report.md").is_file()


@pytest.mark.integration
def test_an_endpoint_that_hangs_with_streams_in_flight_exits_3_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=PAYLOAD)
    emulator = EmulatorProcess(plan, clock=Clock(0.05))
    emulator.start()
    pid = emulator.pid or 0
    events = itertools.count(1)
    stop_at = 4 * PAYLOAD.output_tokens + 8  # into the second round of 4 streams: the one that got it is mid-way

    class StopTheEmulator(SseLines):
        """The client's stream decoder, which stops the emulator (SIGSTOP) when the run's `stop_at`-th event
        arrives."""

        __slots__ = ()

        def feed(self, chunk: bytes) -> list[bytes]:
            out = super().feed(chunk)
            if any(next(events) == stop_at for _ in out):
                hang(emulator)
            return out

    monkeypatch.setattr(HttpTransport, "_decoder", lambda self: StopTheEmulator())
    # A client timeout of 1 s instead of 60 s, so the hang shows quickly.
    monkeypatch.setattr(http_target, "HttpTransport", functools.partial(HttpTransport, timeout_s=1.0))
    try:
        outcome = bench.run(bench.Bench(
            serving=bench.ServingSpec("max-throughput", MODEL, INSTANCE, PAYLOAD), target=bench.Http(emulator.url),
            load=bench.Closed((4,), requests_per_level=40, warmup=0), sweep=bench.Sweep("doubling"),
            output=bench.Output(tmp_path)), say=print)
    finally:
        os.kill(pid, signal.SIGCONT)
        emulator.stop()

    assert outcome.exit_status == ExitStatus.TARGET_FAILED, outcome.error
    assert (outcome.error or "").startswith("the endpoint stopped answering at concurrency 4: none of the ")
    assert "\n" not in (outcome.error or "")
    records = request_lines(tmp_path)
    stopped = [r for r in records if r["error_kind"] == "timeout"]
    assert stopped and all(r["ok"] for r in records if r not in stopped)
    assert any(r["ttft_s"] is not None for r in stopped), "no stream was in flight: not the case under test"
    assert results_of(tmp_path)["failure"]["message"] == outcome.error

"""Signals during a bench: SIGTERM works when SIGINT is ignored; a signal ignored at the start stays ignored;
a signal during teardown or while results are written is held, both finish, and the run ends in 130."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import INSTANCE, MODEL, install_probe, results_of
from sagellm import bench
from sagellm.aws import cloudformation
from sagellm.bench import runner
from sagellm.bench.interrupts import HOLD_MESSAGE, Interrupted, Interrupts
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.errors import ExitStatus
from sagellm.planner import Payload
from sagellm.profiles import resolve

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.+S3.+BucketPolicy")
PAYLOAD = Payload(256, 32)


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored, as in a job started with `cmd &` or by many CI runners."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def ctrl_c_default() -> Iterator[None]:
    """SIGINT as a process started from a terminal has it (Python's KeyboardInterrupt), however this test run
    was started: `nohup … &` and many CI runners start it with SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sighup_ignored() -> Iterator[None]:
    """SIGHUP ignored, as under `nohup`."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_ignored_when_the_bench_started_stays_ignored(
        sig: signal.Signals, sigint_ignored: None, sighup_ignored: None) -> None:
    with Interrupts(print) as interrupts, interrupts.armed():
        signal.raise_signal(sig)  # ignored: nothing raised, nothing remembered
        assert signal.getsignal(sig) == signal.SIG_IGN
    assert interrupts.signum is None
    assert signal.getsignal(sig) == signal.SIG_IGN


def test_a_hang_up_stops_the_work_like_sigterm() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the default ends the process: caught inside
    try:
        # No output fds: this test run's own terminal stays (test_bench_cli hangs up a real one).
        with Interrupts(print, output_fds=()) as interrupts, pytest.raises(Interrupted), interrupts.armed():
            signal.raise_signal(signal.SIGHUP)
            time.sleep(5)  # not reached: the handler raises
        assert interrupts.name == "SIGHUP"
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # put back
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_sigterm_stops_the_work_when_sigint_is_ignored(sigint_ignored: None) -> None:
    with Interrupts(print) as interrupts, pytest.raises(Interrupted), interrupts.armed():
        signal.raise_signal(signal.SIGTERM)
        time.sleep(5)  # not reached: the handler raises
    assert interrupts.name == "SIGTERM"
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # left as the job was started
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_sigterm_cancels_a_running_coroutine_and_raises_after_the_loop_ended(sigint_ignored: None) -> None:
    async def sweep() -> None:
        asyncio.get_running_loop().call_later(0.05, signal.raise_signal, signal.SIGTERM)
        await asyncio.sleep(30)

    started = time.monotonic()
    with Interrupts(print) as interrupts, pytest.raises(Interrupted), interrupts.armed():
        interrupts.run(sweep())
    assert time.monotonic() - started < 10


def test_outside_the_armed_part_a_signal_is_held_and_said(ctrl_c_default: None) -> None:
    said: list[str] = []
    with Interrupts(said.append) as interrupts:
        signal.raise_signal(signal.SIGINT)  # e.g. during teardown: nothing raised
        signal.raise_signal(signal.SIGTERM)
    assert interrupts.name == "SIGINT"
    assert said == [HOLD_MESSAGE, HOLD_MESSAGE]


def signal_before(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, sig: int) -> None:
    """Make `owner.name` raise `sig` in this process first, then do its work."""
    original = getattr(owner, name)

    def signalled(*args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(sig)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, signalled)


@pytest.mark.integration
def test_sigterm_during_teardown_finishes_it_writes_results_and_ends_in_130(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = install_probe(monkeypatch)
    signal_before(monkeypatch, cloudformation, "delete_run_stack", signal.SIGTERM)
    said: list[str] = []

    outcome = bench.run(bench.Bench(
        serving=bench.ServingSpec("max-throughput", MODEL, INSTANCE, PAYLOAD), target=bench.Local(time_scale=0.05),
        load=bench.Closed((1, 4), requests_per_level=4, warmup=0), sweep=bench.Sweep("doubling"),
        output=bench.Output(tmp_path)), say=said.append)

    assert outcome.exit_status == ExitStatus.INTERRUPTED
    assert "SIGTERM" in (outcome.error or "")
    assert HOLD_MESSAGE in said
    saved = results_of(tmp_path)
    assert saved["teardown"]["status"] == "destroyed"
    assert [lv["concurrency"] for lv in saved["levels"]] == [1, 4]  # the sweep had finished: all of it kept
    probe.assert_nothing_left()


@pytest.mark.integration
def test_ctrl_c_while_the_report_is_written_finishes_it_and_ends_in_130(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrl_c_default: None) -> None:
    signal_before(monkeypatch, runner, "write_report", signal.SIGINT)
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=PAYLOAD)

    with EmulatorProcess(plan, clock=Clock(0.05)) as emulator:
        outcome = bench.run(bench.Bench(
            serving=bench.ServingSpec("max-throughput", MODEL, INSTANCE, PAYLOAD), target=bench.Http(emulator.url),
            load=bench.Closed((1,), requests_per_level=4, warmup=0), sweep=bench.Sweep("doubling"),
            output=bench.Output(tmp_path)), say=print)

    assert outcome.exit_status == ExitStatus.INTERRUPTED
    assert (tmp_path / "report.md").read_text().startswith("**NO GATE**")
    assert (tmp_path / "junit.xml").is_file()
    assert results_of(tmp_path)["levels"][0]["ok"] == 4

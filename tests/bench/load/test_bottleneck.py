"""The load generator says when it, not the endpoint, was a level's bottleneck: closed loop, open loop and ramp,
in the level result, on stderr as the level ends and in the results' level."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from bench_helpers import FakeTransport, InProcessPool
from cpu_wait import CpuWait, judge_only_when_fed
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.bottleneck import LATE_MS, LOOP_LAG_MS, client_bottleneck
from sagellm.bench.load.closed_loop import run_level
from sagellm.bench.load.coordinator import run_shared_level
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.measured import levels_of
from sagellm.bench.load.open_loop import OpenLoop, run_rate_level
from sagellm.bench.sweep.ramp import run_ramp
from sagellm.bench.sweep.shapes import warn_when_behind
from sagellm.clock import REAL, Clock
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord

# A healthy level's figures are judged only when the test process got a CPU (tests/cpu_wait.py): a process
# starved of one wakes its probe late however well the code under test does.
MAX_CPU_WAIT = 0.25


class BlockingTransport(FakeTransport):
    """A client that falls behind: every send first blocks the event loop (as heavy parsing would)."""

    def __init__(self, block_s: float):
        super().__init__(duration_s=(0.001, 0.002))
        self.block_s = block_s

    async def send(self, session: aiohttp.ClientSession, prompt: str, max_new_tokens: int) -> RequestRecord:
        time.sleep(self.block_s)  # noqa: ASYNC251 - the point: the loop can do nothing else meanwhile
        return await super().send(session, prompt, max_new_tokens)


def workload() -> Workload:
    return Workload(WorkloadOptions(), Payload(8, 4))


def closed(transport: Any, concurrency: int, requests: int) -> LevelResult:
    return asyncio.run(run_level(transport, concurrency=concurrency, requests=requests, duration_s=None, warmup=0,
                                 workload=workload(), on_record=lambda r: None))


def opened(transport: Any, rate: float, requests: int, max_in_flight: int = 64) -> LevelResult:
    return asyncio.run(run_rate_level(transport, rate=rate, arrivals="constant", max_in_flight=max_in_flight,
                                      requests=requests, duration_s=None, warmup=0, workload=workload(),
                                      on_record=lambda r: None))


def ramped(transport: Any, rates: tuple[float, ...], step_s: float) -> list[LevelResult]:
    return asyncio.run(run_ramp(transport, workload=workload(), loop=OpenLoop(rates, max_in_flight=256),
                                step_s=step_s, on_record=lambda r: None))


def test_a_closed_loop_whose_client_blocks_its_event_loop_is_flagged() -> None:
    level = closed(BlockingTransport(0.1), concurrency=4, requests=12)

    assert level.loop_lag_ms is not None and level.loop_lag_ms > 2 * LOOP_LAG_MS  # ~100 ms: each send blocks it
    why = level.bottleneck()
    assert why is not None and "event loop lagged" in why and "--workers" in why


@pytest.mark.slow
def test_an_open_loop_whose_client_cannot_keep_its_schedule_is_flagged() -> None:
    # 50/s is a request every 20 ms; each send blocks the client for 100 ms: it falls further behind each time.
    level = opened(BlockingTransport(0.1), rate=50.0, requests=20)

    why = level.bottleneck()
    assert why is not None and "requests were sent late" in why and "could not keep its schedule" in why


@pytest.mark.slow
def test_an_open_loop_held_back_by_its_in_flight_cap_is_flagged_and_names_the_cap() -> None:
    # One request in flight at a time, each 200 ms, due every 20 ms: the rest wait for the cap.
    level = opened(FakeTransport(duration_s=(0.2, 0.2)), rate=50.0, requests=10, max_in_flight=1)

    why = level.bottleneck()
    assert level.capped >= 8
    assert why is not None and f"{level.capped} of 10 waited for the in-flight cap (--max-in-flight)" in why


@pytest.mark.slow
def test_a_ramp_whose_client_cannot_keep_its_schedule_flags_its_steps() -> None:
    steps = ramped(BlockingTransport(0.1), (50.0, 100.0), step_s=0.2)

    for step in steps:
        why = step.bottleneck()
        assert why is not None and "requests were sent late" in why


@pytest.mark.slow
def test_a_level_split_across_workers_carries_their_lag_and_cap_waits_back_to_the_coordinator() -> None:
    def shared(transport: Any, max_in_flight: int) -> LevelResult:
        # Workers as tasks of one loop (every worker's probe sees it blocked), the cap split between them.
        loop = OpenLoop((50.0,), max_in_flight=max_in_flight)
        return asyncio.run(run_shared_level(InProcessPool(2, transport, workload()), load=50.0, open_loop=loop,
                                            workers=2, requests=16, duration_s=None, warmup=0, workload=workload(),
                                            on_record=lambda r: None))

    blocked = shared(BlockingTransport(0.1), max_in_flight=64)
    capped = shared(FakeTransport(duration_s=(0.2, 0.2)), max_in_flight=2)  # one in flight per worker

    assert blocked.loop_lag_ms is not None and blocked.loop_lag_ms > LOOP_LAG_MS
    assert "event loop lagged" in (blocked.bottleneck() or "")
    assert capped.capped >= 12  # of 16: all but each worker's first
    assert f"{capped.capped} of 16 waited for the in-flight cap" in (capped.bottleneck() or "")


@pytest.mark.slow
def test_healthy_levels_of_every_shape_are_not_flagged() -> None:
    cpu_wait = CpuWait()
    closed_level = closed(FakeTransport(), concurrency=2, requests=40)
    open_level = opened(FakeTransport(), rate=20.0, requests=20)
    steps = ramped(FakeTransport(), (10.0, 20.0), step_s=0.5)

    levels = [closed_level, open_level, *steps]
    assert all(lv.loop_lag_ms is not None for lv in levels)  # every shape probes its event loop
    figures = ", ".join(f"{lv.load}: lag {lv.loop_lag_ms:.1f} ms, {lv.bottleneck()}" for lv in levels)
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, figures)
    assert [lv.bottleneck() for lv in levels] == [None] * len(levels), figures


def test_the_criterion_scales_lateness_with_the_inter_arrival_gap_and_the_time_scale() -> None:
    def why(late_ms: float, rate: float, clock: Clock = REAL) -> str | None:
        return client_bottleneck(request_rate=rate, late_s=[late_ms / 1000] * 3, capped=0, measured=3,
                                 loop_lag_ms=None, clock=clock)

    assert why(LATE_MS * 0.9, rate=100.0) is None  # under the floor at a high rate
    assert why(LATE_MS * 1.1, rate=100.0) is not None
    assert why(400, rate=1.0) is None  # under half of a 1 s gap
    assert why(600, rate=1.0) is not None
    assert why(400, rate=1.0, clock=Clock(0.5)) is not None  # 1/s sent at 2/s of wall time: a 0.5 s gap
    assert why(200, rate=1.0, clock=Clock(0.5)) is None
    assert why(10_000, rate=None) is None  # a closed loop has no schedule
    assert client_bottleneck(request_rate=None, late_s=[], capped=0, measured=0, loop_lag_ms=LOOP_LAG_MS + 1,
                             clock=REAL) is not None


@pytest.mark.slow
def test_a_flagged_level_is_one_line_on_stderr_as_it_ends_and_is_in_the_results(
        capsys: pytest.CaptureFixture[str]) -> None:
    level = opened(BlockingTransport(0.1), rate=50.0, requests=20)
    healthy = closed(FakeTransport(duration_s=(0.001, 0.002)), concurrency=1, requests=4)
    passed_on: list[LevelResult] = []

    warn = warn_when_behind(passed_on.append, clock=REAL)
    warn(level)
    warn(healthy)

    assert passed_on == [level, healthy]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["sagellm"]
    assert lines[0].startswith("sagellm: the load generator was the bottleneck at rate 50/s, not the endpoint: "
                               "requests were sent late")
    [result] = levels_of([level], clock=REAL, emulated=False, predict=lambda _summary, _records: None, lags={})
    assert result.client_bottleneck == level.bottleneck()
    assert result.client_loop_lag_ms is not None and result.client_loop_lag_ms > 0

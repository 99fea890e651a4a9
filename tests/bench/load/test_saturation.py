"""Over-saturation: an open-loop level whose queue keeps growing, or whose first token is too late, stops early."""

from __future__ import annotations

import asyncio
import random
import re
import time
from typing import Any

import aiohttp
import pytest

from bench_helpers import FakeTransport
from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import run_level
from sagellm.bench.load.level import LevelResult, StopRule
from sagellm.bench.load.open_loop import OpenLoop, run_rate_level
from sagellm.bench.load.saturation import SaturationRule, growing, t_quantile
from sagellm.bench.sweep.choosers import Chooser
from sagellm.bench.sweep.run import run_sweep
from sagellm.clock import REAL, Clock
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord

SCALE = 0.01  # simulated seconds run 100 × faster: the rule's 30 s window is 0.3 s of wall time


class OneAtATime:
    """A server that serves one request at a time for `service_s` (wall), the rest waiting in its queue."""

    def __init__(self, service_s: float):
        self.service_s = service_s
        self.lock = asyncio.Lock()

    async def send(self, session: aiohttp.ClientSession, prompt: str, max_new_tokens: int) -> RequestRecord:
        t0 = time.perf_counter()
        async with self.lock:
            await asyncio.sleep(self.service_s)
        e2e = time.perf_counter() - t0
        return RequestRecord(ok=True, start_s=t0, e2e_s=e2e, ttft_s=e2e - self.service_s / 2,
                             output_tokens=max_new_tokens, status=200)


def workload() -> Workload:
    return Workload(WorkloadOptions(), Payload(8, 4))


def rate_level(transport: Any, rate: float, rule: SaturationRule | None, **kw: Any) -> LevelResult:
    options: dict[str, Any] = {"arrivals": "constant", "max_in_flight": 1024, "requests": 200, "duration_s": None,
                               "warmup": 0, "workload": workload(), "on_record": lambda r: None,
                               "stop_rule": StopRule(saturation=rule), "clock": Clock(SCALE)}
    options.update(kw)
    return asyncio.run(run_rate_level(transport, rate=rate, **options))


def test_a_level_whose_queue_keeps_growing_stops_early_and_says_why() -> None:
    # 1 request/s served (0.01 s wall = 1 simulated s each), 2/s arriving: the queue grows by 1 a second.
    level = rate_level(OneAtATime(0.01), 2.0, SaturationRule())
    assert level.over_saturated is not None
    assert "requests in flight grew" in level.over_saturated.reason
    assert level.stopped_reason == level.over_saturated.reason
    assert "at request rate 2/s" in level.stopped_reason
    # It stopped after the 30 s window, long before its 200 arrivals (100 simulated s) were all sent.
    assert 30 <= level.over_saturated.at_s < 90
    assert len(level.records) < 180
    # Its partial statistics are kept: a window that ends where sending stopped.
    assert level.measured and level.window_end_s < level.ended_s


def test_a_level_that_keeps_up_runs_to_its_end() -> None:
    cpu = CpuWait()
    level = rate_level(OneAtATime(0.01), 0.5, SaturationRule(), requests=100)
    # A client denied the CPU sends late, then in a burst: a queue the endpoint did not make.
    judge_only_when_fed(cpu.share(), MAX_CPU_WAIT, f"over-saturated: {level.over_saturated}")
    assert len(level.records) == 100
    assert level.over_saturated is None and level.stopped_reason is None


def test_a_first_token_past_the_limit_stops_the_level() -> None:
    # Each first token comes 0.02 s of wall time = 2 simulated s after sending; the limit is 1 s.
    level = rate_level(FakeTransport(duration_s=(0.04, 0.04)), 0.5, SaturationRule(max_ttft_s=1.0), requests=50)
    assert level.over_saturated is not None
    assert re.search(r"a first token took 2(\.\d+)? s, past the 1 s limit", level.over_saturated.reason)
    assert len(level.records) < 50


def test_without_a_rule_a_growing_queue_runs_its_full_length() -> None:
    level = rate_level(OneAtATime(0.002), 200.0, None, requests=60, clock=REAL)
    assert len(level.records) == 60 and level.over_saturated is None


def test_a_closed_loop_never_stops_for_saturation() -> None:
    # At concurrency 4 on a one-at-a-time server the queue is 4 deep and stays so; the first tokens are late.
    level = asyncio.run(run_level(OneAtATime(0.002), concurrency=4, requests=40, duration_s=None, warmup=0,
                                  workload=workload(), on_record=lambda r: None,
                                  stop_rule=StopRule(saturation=SaturationRule(max_ttft_s=0.001))))
    assert len(level.measured) == 40 and level.over_saturated is None  # (warm-ups: while the workers start)


def test_a_doubling_sweep_skips_the_rates_above_an_over_saturated_one() -> None:
    cpu = CpuWait()
    chooser = Chooser("doubling", (0.5, 2.0, 4.0), clock=Clock(SCALE), emulated=False, instances=1)
    levels = asyncio.run(run_sweep(
        OneAtATime(0.01), workload=workload(), open_loop=OpenLoop((0.5, 2.0, 4.0), clock=Clock(SCALE)),
        requests_per_level=lambda rate: int(50 * rate), duration_per_level_s=None, warmup=0,
        on_record=lambda r: None, stop_rule=StopRule(saturation=SaturationRule()), choose=chooser))
    judge_only_when_fed(cpu.share(), MAX_CPU_WAIT, f"levels {[(lv.load, lv.over_saturated) for lv in levels]}")
    assert [lv.load for lv in levels] == ["0.5/s", "2/s"]
    assert levels[0].over_saturated is None and levels[1].over_saturated is not None
    assert chooser.outcome == "every level measured up to the first over-saturated one (2/s)"
    assert chooser.stopped_reason(levels) == levels[1].over_saturated.reason


def test_growth_needs_a_significant_slope_of_a_size_that_matters() -> None:
    rng = random.Random(1)
    rising = [(t / 10, 10 + t / 10 + rng.gauss(0, 1)) for t in range(300)]  # 10 → 40 over 30 s
    flat = [(t / 10, 10 + rng.gauss(0, 1)) for t in range(300)]
    trickle = [(t / 10, 100 + t / 100) for t in range(300)]  # significant, but +3 on 100
    assert growing(rising, 30, 15) == pytest.approx(1.0, rel=0.1)  # a quarter of 2/s × 30 s arrivals
    assert growing(rising, 30, 40) is None
    assert growing(flat, 30, 15) is None
    assert growing(trickle, 30, 1) == pytest.approx(0.1)  # significant: no scatter at all
    assert growing(trickle, 30, 15) is None  # but +3 in 30 s is not a queue without bound at 2/s
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=0.01)  # the table's value
    with pytest.raises(ValueError, match="max_ttft_s must be positive, got 0"):
        SaturationRule(max_ttft_s=0)

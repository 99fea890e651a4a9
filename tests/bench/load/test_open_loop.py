"""The open loop: constant and Poisson schedules, the in-flight cap, lateness, window, stop rule, repeats."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from scipy import stats as scipy_stats

from bench_helpers import FakeTransport
from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from pacing_server import pacing_server_process
from sagellm.bench.client.transports import TGI, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.open_loop import OpenLoop, arrival_times, run_rate_level
from sagellm.bench.sweep.run import run_sweep
from sagellm.clock import Clock
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import summarize


def workload(out_tokens: int = 4) -> Workload:
    return Workload(WorkloadOptions(), Payload(8, out_tokens))


def rate_level(transport: Any, rate: float, **kw: Any) -> tuple[LevelResult, list[RequestRecord]]:
    records: list[RequestRecord] = []
    options: dict[str, Any] = {"arrivals": "constant", "max_in_flight": 64, "requests": 40, "duration_s": None,
                               "warmup": 0, "workload": workload(), "on_record": records.append}
    options.update(kw)
    return asyncio.run(run_rate_level(transport, rate=rate, **options)), records


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_constant_arrivals_are_evenly_spaced() -> None:
    due = list(itertools.islice(arrival_times(4.0, "constant", random.Random(0)), 9))
    assert due == pytest.approx([i / 4 for i in range(9)])


def test_poisson_schedule_has_exponential_gaps_and_a_constant_one_does_not() -> None:
    rate = 10.0
    poisson = gaps(list(itertools.islice(arrival_times(rate, "poisson", random.Random(1)), 2001)))
    # Kolmogorov–Smirnov against the exponential distribution with mean 1/rate: not rejected ...
    assert scipy_stats.kstest(poisson, "expon", args=(0, 1 / rate)).pvalue > 0.01
    assert sum(poisson) / len(poisson) == pytest.approx(1 / rate, rel=0.1)
    # ... while the same test rejects evenly spaced arrivals at once (the test can tell them apart).
    constant = gaps(list(itertools.islice(arrival_times(rate, "constant", random.Random(1)), 2001)))
    assert scipy_stats.kstest(constant, "expon", args=(0, 1 / rate)).pvalue < 1e-6
    with pytest.raises(ValueError):
        next(arrival_times(0, "poisson", random.Random(0)))


@pytest.mark.integration
def test_poisson_arrivals_at_the_server_pass_a_test_on_their_inter_arrival_times() -> None:
    # 20 requests/s: gaps of 50 ms on average, large against the ~1 ms a busy machine adds to a wake-up.
    rate, n = 20.0, 200
    records: list[RequestRecord] = []
    cpu_wait = CpuWait()
    with pacing_server_process(itl_s=0.002, ttft_s=0.005) as server:
        asyncio.run(run_rate_level(HttpTransport(server.url, TGI), rate=rate, arrivals="poisson",
                                   max_in_flight=256, requests=n, duration_s=None, warmup=0, workload=workload(),
                                   on_record=records.append, seed=5))
        log = server.log()
    assert len(log) == n and all(r.ok for r in records)
    arrived = sorted(s.arrived_s for s in log)
    test = scipy_stats.kstest(gaps(arrived), "expon", args=(0, 1 / rate))
    late = sorted(r.late_s for r in records if r.late_s is not None)
    assert len(late) == n
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"a KS p of {test.pvalue:.2g} and a median lateness of "
                                                        f"{late[len(late) // 2] * 1000:.1f} ms")
    assert test.pvalue > 0.001, f"KS statistic {test.statistic:.3f}, p {test.pvalue:.2g}"
    # Every request says how late it was sent; with room to spare the client kept its schedule.
    assert late[len(late) // 2] < 0.005


def test_the_in_flight_cap_holds_requests_back_and_their_lateness_is_recorded() -> None:
    # 200 requests/s asked, but each takes 50 ms and only 2 may be in flight: at most 40/s go out.
    transport = FakeTransport(duration_s=(0.05, 0.05))
    level, records = rate_level(transport, 200.0, max_in_flight=2, requests=20)
    assert transport.max_in_flight == 2
    late = [r.late_s for r in sorted(records, key=lambda r: r.start_s)]
    assert all(x is not None and x >= 0 for x in late)
    assert late[-1] > 0.3  # the 20th was due at 0.1 s and went out around 0.45 s
    s = summarize(records, window_start_s=level.window_start_s, window_end_s=level.window_end_s)
    assert s.request_rate == 200.0 and s.concurrency is None
    assert s.lateness_ms is not None and s.lateness_ms.p95 is not None and s.lateness_ms.p95 > 250
    assert s.achieved_request_rate is not None and s.achieved_request_rate < 60


def test_a_rate_level_sends_its_budget_on_schedule_and_measures_after_the_ramp() -> None:
    transport = FakeTransport(duration_s=(0.01, 0.01))
    level, records = rate_level(transport, 100.0, requests=30, warmup=3)
    assert len(records) == 33 and sum(r.warmup for r in records) == 3
    assert all(r.request_rate == 100.0 and r.concurrency is None and r.worker is None for r in records)
    # 33 arrivals due 10 ms apart. A busy machine may send some late, never early, and each record says
    # how late: sent minus lateness is the schedule.
    due = sorted(r.start_s - (r.late_s or 0.0) for r in records)
    assert due[-1] - due[0] == pytest.approx(0.32, abs=0.003)
    assert all(r.late_s is not None and r.late_s >= 0 for r in records)
    # Never early: the last send comes at least 0.32 s after the first was due (the first may itself be late).
    assert max(r.start_s for r in records) - due[0] >= 0.32 - 0.003
    # The ramp ends when the first three (the warm-up) have completed; the window when the 34th is due.
    # Asserted by order, not wall-clock closeness, which a loaded machine stretches: the level books a
    # completion before it awaits anything again, so no request finishes between the third and the window.
    ends = sorted(r.end_s for r in records)
    assert level.ramp_excluded and level.window_start_s >= ends[2] - 1e-9
    assert not [t for t in ends if ends[2] + 1e-9 < t < level.window_start_s - 1e-9]
    assert level.started_s + 0.33 - 1e-9 <= level.window_end_s <= level.ended_s
    assert level.load == "100/s"


def test_a_rate_level_with_a_duration_sends_until_the_deadline() -> None:
    cpu_wait = CpuWait()
    level, records = rate_level(FakeTransport(duration_s=(0.005, 0.005)), 50.0, requests=None, duration_s=0.4)
    assert level.window_s == pytest.approx(0.4)
    # 50/s for 0.4 s: 20 sends, give or take a tick at each end, from a loop that gets the CPU it asks for.
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"{len(records)} sends in the 0.4 s window")
    assert 18 <= len(records) <= 24
    assert all(r.start_s <= level.window_end_s + 0.005 for r in records)


def test_a_rate_level_stops_sending_once_its_failure_is_certain() -> None:
    level, records = rate_level(FakeTransport(fail_first=1000, duration_s=(0.001, 0.001)), 200.0,
                                requests=200)
    assert len(records) < 40
    assert level.stopped_reason is not None and "at request rate 200/s" in level.stopped_reason


@pytest.mark.slow
def test_a_rate_sweep_runs_each_rate_the_repeats_asked_and_the_schedule_follows_the_time_scale() -> None:
    records: list[RequestRecord] = []
    loop = OpenLoop((20.0, 40.0), arrivals="poisson", max_in_flight=8, seed=3, clock=Clock(0.5))
    results = asyncio.run(run_sweep(FakeTransport(duration_s=(0.002, 0.002)), workload=workload(),
                                    open_loop=loop, requests_per_level=lambda rate: int(rate), warmup=0,
                                    duration_per_level_s=None, on_record=records.append, repeats=2))
    assert [(r.load, r.repeat) for r in results] == [("20/s", 0), ("20/s", 1), ("40/s", 0), ("40/s", 1)]
    assert [len(r.records) for r in results] == [20, 20, 40, 40]
    # Poisson seeded per level and repeat: the repeats are different draws, the same seed the same ones.
    first, second = ([r.start_s - lv.started_s for r in lv.records] for lv in results[:2])
    assert sorted(first) != pytest.approx(sorted(second), abs=1e-3)
    # Time scale 0.5: 20 requests/s of simulated time go out at 40/s of wall time (about 0.5 s for 20).
    span = max(r.start_s for r in results[0].records) - min(r.start_s for r in results[0].records)
    assert 0.2 < span < 0.9
    with pytest.raises(ValueError, match="exactly one of concurrency levels and an open loop"):
        asyncio.run(run_sweep(FakeTransport(), workload=workload(), concurrency=[1], open_loop=loop,
                              requests_per_level=1, duration_per_level_s=None, warmup=0,
                              on_record=records.append))

"""An open-loop level replaying a trace: each request due at the trace's arrival, with its lengths."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench_helpers import FakeTransport
from sagellm.bench.client.trace import TraceOptions
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.open_loop import run_rate_level
from sagellm.bench.specs import trace_level
from sagellm.clock import Clock
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord

AZURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "azure_conv.csv"


def test_a_trace_level_sends_every_request_on_the_traces_schedule_with_its_lengths() -> None:
    options = TraceOptions(AZURE, speed=2)
    workload = Workload(WorkloadOptions(trace=options), Payload(1, 1))
    assert workload.trace is not None
    rows, arrivals = workload.trace.rows, workload.trace.arrivals_s
    load = trace_level(options, warmup=1)
    records: list[RequestRecord] = []
    time_scale = 0.05  # a compressed emulator: the schedule runs 20 × faster in wall time

    level = asyncio.run(run_rate_level(
        FakeTransport(duration_s=(0.001, 0.002)), rate=load.request_rate[0], arrivals="constant", max_in_flight=64,
        requests=load.requests_per_level, duration_s=None, warmup=load.warmup, workload=workload,
        on_record=records.append, clock=Clock(time_scale)))

    by_request = sorted(records, key=lambda r: r.request or 0)
    assert [r.request for r in by_request] == list(range(len(rows)))
    assert [r.input_tokens for r in by_request] == [row.input_tokens for row in rows]
    assert [r.warmup for r in by_request] == [True] + [False] * (len(rows) - 1)
    # Sent minus lateness is when each was due: the trace's arrivals, in wall seconds.
    due = [r.start_s - (r.late_s or 0.0) for r in by_request]
    assert [t - due[0] for t in due] == pytest.approx([t * time_scale for t in arrivals], abs=2e-3)
    assert level.load == f"{workload.trace.rate:g}/s" and level.ramp_excluded
    assert level.window_end_s >= max(due)


def test_a_trace_level_measures_what_the_warm_up_leaves() -> None:
    load = trace_level(TraceOptions(AZURE, requests=10), warmup=3, repeats=2)
    assert (load.requests_per_level, load.warmup, load.repeats) == (7, 3, 2)
    with pytest.raises(InputError, match="leave none of the trace's 10 to measure"):
        trace_level(TraceOptions(AZURE, requests=10), warmup=10)


@pytest.mark.slow
def test_worker_processes_share_a_trace_each_repeat_replaying_it_from_its_first_request() -> None:
    from pacing_server import pacing_server_process
    from sagellm.bench.client.transports import TGI, HttpTransport
    from sagellm.bench.load.open_loop import OpenLoop
    from sagellm.bench.load.pools import ProcessPool, worker_pool
    from sagellm.bench.sweep.run import run_sweep

    options = TraceOptions(AZURE, speed=20)  # 24 requests in about a second
    work = Workload(WorkloadOptions(trace=options), Payload(1, 1))
    assert work.trace is not None
    rows = work.trace.rows
    load = trace_level(options, warmup=1, repeats=2)
    records: list[RequestRecord] = []
    with pacing_server_process(itl_s=0.001, ttft_s=0.005) as remote, \
            worker_pool(2, HttpTransport(remote.url, TGI), work) as pool:
        assert isinstance(pool, ProcessPool)
        levels = asyncio.run(run_sweep(
            HttpTransport(remote.url, TGI), workload=work, open_loop=OpenLoop(load.request_rate),
            requests_per_level=load.requests_per_level, duration_per_level_s=None, warmup=load.warmup,
            on_record=records.append, repeats=2, pool=pool, workers=2))
    assert [len(level.records) for level in levels] == [len(rows), len(rows)]
    for level in levels:
        # Arrival i of each repeat is row i of the trace (its lengths), the first one warming up.
        by_arrival = sorted(level.records, key=lambda r: r.request or 0)
        assert [(r.request or 0) % len(rows) for r in by_arrival] == list(range(len(rows)))
        assert [r.input_tokens for r in by_arrival] == [row.input_tokens for row in rows]
        assert [r.warmup for r in by_arrival] == [True] + [False] * (len(rows) - 1)
        assert all(r.ok for r in by_arrival)


def test_a_sweep_of_speeds_is_one_level_per_speed_each_replaying_the_trace_that_much_faster() -> None:
    options = TraceOptions(AZURE, speed=2)
    load = trace_level(options, speeds=(2, 4))
    workload = Workload(WorkloadOptions(trace=options), Payload(1, 1))
    assert workload.trace is not None
    assert load.request_rate == pytest.approx((workload.trace.rate, 2 * workload.trace.rate))
    records: list[RequestRecord] = []
    asyncio.run(run_rate_level(
        FakeTransport(duration_s=(0.001, 0.002)), rate=load.request_rate[1], arrivals="constant", max_in_flight=64,
        requests=load.requests_per_level, duration_s=None, warmup=0, workload=workload, on_record=records.append,
        clock=Clock(0.05)))
    due = sorted(r.start_s - (r.late_s or 0.0) for r in records)
    # Speed 4 where the workload's trace is read at 2: its arrivals twice as close again.
    assert [t - due[0] for t in due] == pytest.approx([t / 2 * 0.05 for t in workload.trace.arrivals_s], abs=2e-3)

"""The closed-loop sweep: concurrency, warm-up, window, stop rule, cancellation."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench_helpers import EngineTransport, FakeTransport, InProcessPool
from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from sagellm.bench.client.transports import TGI, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import Spawn, run_level
from sagellm.bench.load.coordinator import run_shared_level
from sagellm.bench.load.level import LevelProgress, LevelResult, StopRule
from sagellm.bench.sweep.run import run_sweep
from sagellm.catalog import find_instance, find_model
from sagellm.clock import Clock
from sagellm.emulator.serving.copies import CopyEngine
from sagellm.engines import Limits
from sagellm.planner import Payload, Shape, StepModel, predict_point
from sagellm.results.records import RecordLog, RequestRecord, read_records
from sagellm.results.summary import summarize, tokens_in_window


def workload(n_in: int = 16, n_out: int = 4) -> Workload:
    return Workload(WorkloadOptions(), Payload(n_in, n_out))


def sweep(transport: Any, levels: list[int], **kwargs: Any) -> tuple[list[LevelResult], list[RequestRecord]]:
    records: list[RequestRecord] = []
    options: dict[str, Any] = {"requests_per_level": 20, "duration_per_level_s": None, "warmup": 0,
                               "workload": workload(), "on_record": records.append}
    options.update(kwargs)
    results = asyncio.run(run_sweep(transport, concurrency=levels, **options))
    return results, records


def test_closed_loop_keeps_exactly_c_requests_in_flight() -> None:
    transport = FakeTransport(duration_s=(0.001, 0.03))
    results, _ = sweep(transport, [7], requests_per_level=70, spawn_rate=None)  # every worker at once
    assert transport.max_in_flight == 7
    # After the first 7 starts every request starts as another finishes: C in flight, never fewer
    # (waves would start batches into an emptier system).
    assert transport.in_flight_at_start[:7] == [1, 2, 3, 4, 5, 6, 7]
    assert set(transport.in_flight_at_start[7:]) == {7}
    assert len(results[0].records) == 70


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_start_at_the_spawn_rate_and_the_window_opens_after_every_first_send(workers: int) -> None:
    # Lower bounds only (a wake-up is never early; a loaded machine only makes it later): worker i of the level
    # sends first no sooner than i ÷ spawn_rate after the level's start, with two worker processes too, their
    # slots taking turns (worker k's j-th slot is the level's (j × 2 + k)-th to start).
    # Requests far shorter than the spawn: the early workers warm up until every worker has started.
    rate, concurrency = 400.0, 6
    transport, records = FakeTransport(duration_s=(0.001, 0.002)), list[RequestRecord]()
    options: dict[str, Any] = {"requests": 60, "duration_s": None, "warmup": 1, "workload": workload(),
                               "on_record": records.append}

    async def run() -> LevelResult:
        if workers == 1:
            return await run_level(transport, concurrency=concurrency, spawn=Spawn(rate), **options)
        pool = InProcessPool(workers, transport, workload())
        return await run_shared_level(pool, load=concurrency, open_loop=None, workers=workers, spawn_rate=rate,
                                      **options)

    level = asyncio.run(run())
    first = {r.worker: r for r in reversed(level.records)}  # each slot's first request (records: in completion order)
    assert sorted(first) == list(range(concurrency))
    per_worker = concurrency // workers
    for slot, r in first.items():
        k, j = divmod(slot, per_worker)  # worker k holds slots k × per_worker … (its j-th)
        assert r.start_s >= level.started_s + (j * workers + k) / rate - 1e-6, (slot, r.start_s - level.started_s)
    # Every slot sent its first request (and finished its warm-up) before the measured window opened; in one
    # process, no measured request was sent before the last slot's first one (worker processes go by the schedule).
    assert level.ramp_excluded and level.window_start_s >= max(r.end_s for r in first.values()) - 1e-9
    assert workers > 1 or min(r.start_s for r in level.measured) >= max(r.start_s for r in first.values())
    assert all(r.warmup for r in first.values()) and len(level.measured) == 60


def test_levels_run_in_order_with_their_own_concurrency() -> None:
    results, records = sweep(FakeTransport(), [1, 2, 4], requests_per_level=8)
    assert [r.concurrency for r in results] == [1, 2, 4]
    assert [r.stopped_reason for r in results] == [None, None, None]
    assert [rec.concurrency for rec in records] == [1] * 8 + [2] * 8 + [4] * 8
    assert {rec.worker for rec in records if rec.concurrency == 4} == {0, 1, 2, 3}
    starts = [rec.start_s for rec in records]
    assert starts[8] >= max(rec.end_s for rec in records[:8])  # a level starts after the last ended


def test_warmup_is_per_worker_logged_marked_and_excluded_from_the_budget() -> None:
    results, records = sweep(FakeTransport(), [3], requests_per_level=9, warmup=2)
    level = results[0]
    warm = [r for r in records if r.warmup]
    assert len(warm) == 6 and len(level.measured) == 9 and len(level.records) == 15
    for worker in range(3):
        mine = [r for r in records if r.worker == worker]
        assert all(r.warmup for r in mine[:2]) and not any(r.warmup for r in mine[2:])
    # The window opens once every worker has finished its warm-up.
    assert level.ramp_excluded
    assert level.window_start_s >= max(r.end_s for r in warm) - 1e-9


def test_window_runs_from_the_end_of_the_ramp_to_the_ramp_workers_last_completion() -> None:
    # Asserted by which completion opens and closes the window, never by wall-clock closeness, which a
    # loaded machine stretches: the level books a completion before it awaits anything again, so no other
    # request can finish between a completion and what the level does on it.
    results, records = sweep(FakeTransport(duration_s=(0.005, 0.03)), [4], requests_per_level=40)
    level = results[0]
    first_per_worker: dict[int | None, RequestRecord] = {}
    for r in records:  # in the order they completed
        first_per_worker.setdefault(r.worker, r)
    ramp_end = max(first_per_worker.values(), key=lambda r: r.end_s)  # the last worker's first completion
    assert level.ramp_worker == ramp_end.worker
    assert level.window_start_s >= ramp_end.end_s - 1e-9
    assert not [r for r in records if ramp_end.end_s + 1e-9 < r.end_s < level.window_start_s - 1e-9]
    # It ends at the last completion, before the first worker went idle, of the worker that ended the
    # ramp: whole request cycles of that worker (see the next test for why).
    first_idle = min(max(r.end_s for r in records if r.worker == w) for w in range(4))
    cycle_end = max(r.end_s for r in records if r.worker == ramp_end.worker and r.end_s <= first_idle + 1e-9)
    assert level.window_end_s == pytest.approx(cycle_end, abs=1e-9)
    assert level.window_end_s < level.ended_s
    assert level.started_s <= level.window_start_s < level.window_end_s


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.slow
def test_a_closed_loop_moving_in_phase_is_measured_over_whole_cycles(workers: int) -> None:
    # On a continuous-batching server equal-length streams stay in the groups their first prefill passes
    # made: a cycle is every group's prefill pass in a row (decoding paused), then decoding only. The ramp
    # ends with the last group's warm-up, after a prefill phase; a window that ran on to the first idle
    # worker (the first group's) held one more decode phase than prefill phases: 16 % too high here.
    # The engine is the emulator's (Llama 2 13B, TP 4 on ml.g5.12xlarge), 20× faster than real time. With
    # two workers (the coordinator's merge, workers in this loop) the merged window must be whole cycles too.
    shape = Shape(find_model("llama2-13b"), find_instance("ml.g5.12xlarge"), 4, generation="tgi-3")
    scale = 0.05
    engine = CopyEngine(StepModel(shape), Limits(4000, 4096, 4096, shape.kv_capacity_tokens, None, None), Clock(scale))
    transport, work = EngineTransport(engine, 1024), workload(1024, 32)
    options: dict[str, Any] = {"requests": 72, "duration_s": None, "warmup": 1, "workload": work,
                               "on_record": lambda r: None}

    async def run() -> LevelResult:
        engine.start()
        try:
            # Every worker at once (no spawn rate), so that the loop moves in phase as this test describes.
            if workers == 1:
                return await run_level(transport, concurrency=24, spawn=None, **options)
            pool = InProcessPool(workers, transport, work)
            return await run_shared_level(pool, load=24, open_loop=None, workers=workers, spawn_rate=None, **options)
        finally:
            await engine.stop()

    cpu_wait = CpuWait()  # the engine paces on the wall clock, in this process
    level = asyncio.run(run())
    assert level.ramp_excluded
    # The truth, from the requests inside the window: a closed loop with no pause between requests serves
    # streams × tokens ÷ mean request time (Little's law), whatever the phase.
    inside = [r for r in level.measured if level.window_start_s <= r.start_s and r.end_s <= level.window_end_s]
    little = 24 * 32 / (sum(r.e2e_s for r in inside) / len(inside))
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT,
                        f"{level.throughput_tokens_per_s:.0f} tokens/s against {little:.0f} by Little's law")
    assert level.throughput_tokens_per_s == pytest.approx(little, rel=0.05)
    assert level.throughput_tokens_per_s * scale == pytest.approx(  # ... which the planner predicts
        predict_point(shape, Payload(1024, 32), 24).throughput_tokens_per_s, rel=0.05)


def test_duration_level_measures_for_the_duration_after_the_ramp() -> None:
    cpu_wait = CpuWait()
    results, records = sweep(FakeTransport(duration_s=(0.005, 0.01)), [3], requests_per_level=None,
                             duration_per_level_s=0.3, warmup=1)
    level = results[0]
    assert level.ramp_excluded and level.window_s <= 0.3 + 1e-9
    # Nothing sent after the deadline. take() reads the clock, then the transport reads it again with no await
    # between, so its stamp is late by at most the CPU code between the two (< 5 ms) plus the time this process
    # waited for a CPU, a bound that holds however loaded the machine is.
    late_bound = 0.005 + cpu_wait.waited_s()
    assert all(r.start_s < level.window_start_s + 0.3 + late_bound for r in records)
    # The window ends at the last completion before the deadline of the worker that ended the ramp (whole
    # cycles of it): within one request (≤ 10 ms) of the duration, for a loop that wakes when its sleeps end.
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT,
                        f"a {level.window_s * 1000:.0f} ms window of {len(level.measured)} requests")
    assert 0.3 - 0.012 <= level.window_s
    assert 20 < len(level.measured)


def test_a_level_shorter_than_its_ramp_uses_the_whole_level_as_window() -> None:
    results, _ = sweep(FakeTransport(), [8], requests_per_level=3)  # 5 workers never get a request
    level = results[0]
    assert not level.ramp_excluded
    assert (level.window_start_s, level.window_end_s) == (level.started_s, level.ended_s)


def test_escalation_stops_at_the_first_level_over_the_error_rate() -> None:
    results, records = sweep(FakeTransport(admit=3), [1, 2, 4, 8], requests_per_level=20)
    assert [r.concurrency for r in results] == [1, 2, 4]
    assert results[1].stopped_reason is None
    reason = results[2].stopped_reason
    assert reason is not None and "error rate" in reason and "overloaded" in reason
    assert results[2].errors_by_kind["overloaded"] > 0
    assert not any(r.concurrency == 8 for r in records)


def test_the_stop_rule_leaves_warmup_out_like_the_reported_error_rate() -> None:
    # All 4 warm-up requests fail, no measured one does: the level's error rate is 0 %, so escalation goes on.
    # (Every worker starts at once, so the first 4 requests sent are the 4 warm-ups.)
    results, records = sweep(FakeTransport(fail_first=4), [4, 8], requests_per_level=40, warmup=1, spawn_rate=None)
    assert [r.error_kind for r in records if r.warmup][:4] == ["validation"] * 4
    assert [r.concurrency for r in results] == [4, 8]
    assert results[0].stopped_reason is None and sum(results[0].errors_by_kind.values()) == 0
    four = summarize(results[0].records, window_start_s=results[0].window_start_s,
                     window_end_s=results[0].window_end_s)
    assert four.error_rate == 0


def test_the_stop_reason_states_the_error_rate_the_report_shows() -> None:
    results, _ = sweep(FakeTransport(admit=3), [1, 4], requests_per_level=20, warmup=1)
    last = results[-1]
    reported = summarize(last.records, window_start_s=last.window_start_s, window_end_s=last.window_end_s)
    assert last.stopped_reason is not None
    assert last.stopped_reason.startswith(f"error rate {reported.error_rate:.1%} > 5% at concurrency 4")
    assert sum(last.errors_by_kind.values()) == reported.requests - reported.ok


def test_escalation_stops_on_a_single_timeout() -> None:
    results, _ = sweep(FakeTransport(timeout_at=25), [1, 2, 4], requests_per_level=20)
    assert [r.concurrency for r in results] == [1, 2]
    assert "timed out" in (results[1].stopped_reason or "")


def test_a_level_stops_sending_once_its_failure_is_certain() -> None:
    rule = StopRule(max_error_rate=0.05)
    transport = FakeTransport(admit=1, duration_s=(0.02, 0.02))
    results, _ = sweep(transport, [2], requests_per_level=200, stop_rule=rule)
    # More than 5 % of 200 failed: at most the 11th error stops new requests; the rest never go out.
    assert len(results[0].records) < 40
    assert results[0].stopped_reason is not None


def test_progress_is_reported_after_every_request() -> None:
    seen: list[LevelProgress] = []
    sweep(FakeTransport(), [2], requests_per_level=6, warmup=1, on_progress=seen.append)
    assert [p.completed for p in seen] == list(range(1, 9))
    assert {p.planned for p in seen} == {8} and seen[-1].concurrency == 2


def test_cancelling_the_sweep_cancels_in_flight_requests_and_keeps_finished_records(tmp_path: Path) -> None:
    transport = FakeTransport(duration_s=(0.01, 0.05))
    log = RecordLog(tmp_path / "requests.jsonl")
    logged: list[RequestRecord] = []

    def on_record(record: RequestRecord) -> None:
        log.append(record)
        logged.append(record)

    async def go() -> set[asyncio.Task[Any]]:
        task = asyncio.create_task(run_sweep(
            transport, concurrency=[5], requests_per_level=10_000, duration_per_level_s=None, warmup=0,
            workload=workload(8, 4), on_record=on_record))
        while len(logged) < 12:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    left = asyncio.run(go())
    log.close()
    assert left == set()
    assert transport.cancelled == 5 and transport.in_flight == 0
    on_disk = read_records(tmp_path / "requests.jsonl")
    assert len(on_disk) == len(logged) >= 12
    assert all(r.ok for r in on_disk)


def test_run_level_rejects_both_or_neither_budget_and_duration() -> None:
    async def go(**kwargs: Any) -> None:
        await run_level(FakeTransport(), concurrency=1, warmup=0, workload=workload(1, 1),
                        on_record=lambda r: None, **kwargs)
    with pytest.raises(ValueError):
        asyncio.run(go(requests=1, duration_s=1.0))
    with pytest.raises(ValueError):
        asyncio.run(go(requests=None, duration_s=None))


# ---------------------------------------------------------------------------------------------------
# Over loopback: a real HTTP transport, a fake TGI that counts the streams it holds open


class CountingTgi:
    def __init__(self) -> None:
        self.open = 0
        self.max_open = 0
        app = web.Application()
        app.router.add_post("/generate_stream", self.generate_stream)
        self.runner = web.AppRunner(app)

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        n = (await request.json())["parameters"]["max_new_tokens"]
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(n):
                await asyncio.sleep(random.uniform(0.001, 0.005))
                event: dict[str, Any] = {"token": {"id": i, "text": "t", "special": False}}
                if i == n - 1:
                    event["details"] = {"generated_tokens": n, "finish_reason": "length"}
                    event["generated_text"] = "t" * n
                await resp.write(b"data:" + json.dumps(event).encode() + b"\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.open -= 1


@pytest.mark.slow
def test_sweep_over_loopback_holds_c_streams_open_at_the_server() -> None:
    server = CountingTgi()
    records: list[RequestRecord] = []

    async def go() -> list[LevelResult]:
        await server.runner.setup()
        site = web.TCPSite(server.runner, "127.0.0.1", 0)
        await site.start()
        try:
            url = f"http://127.0.0.1:{server.runner.addresses[0][1]}"
            return await run_sweep(HttpTransport(url, TGI), concurrency=[1, 6], requests_per_level=18,
                                   duration_per_level_s=None, warmup=1, workload=workload(4, 5),
                                   on_record=records.append)
        finally:
            await server.runner.cleanup()

    results = asyncio.run(go())
    assert server.max_open == 6
    assert all(r.ok and r.output_tokens == 5 and len(r.token_gaps_s) == 4 for r in records)
    assert [len(r.measured) for r in results] == [18, 18]
    assert len(records) == 18 + 1 + 18 + 6


def test_a_failing_record_callback_stops_the_sweep_with_its_own_exception() -> None:
    def on_record(record: RequestRecord) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        sweep(FakeTransport(), [3], on_record=on_record)


def record(start_s: float, ttft_s: float, gaps_s: list[float], tokens: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(concurrency=1, worker=0, start_s=start_s, ok=ok,
                         e2e_s=ttft_s + sum(gaps_s) + 0.001, output_tokens=tokens, ttft_s=ttft_s,
                         token_gaps_s=gaps_s)


def test_tokens_in_window_counts_the_token_events_inside_it() -> None:
    # Token events at 1.0, 2.0, 3.0, 4.0 s.
    r = record(0.0, 1.0, [1.0, 1.0, 1.0], tokens=4)
    assert tokens_in_window([r], 0.0, 10.0) == 4
    assert tokens_in_window([r], 1.5, 3.5) == 2
    assert tokens_in_window([r], 4.5, 9.0) == 0
    # Two tokens per event when the server reports twice as many tokens as events (OpenAI chunks).
    assert tokens_in_window([record(0.0, 1.0, [1.0, 1.0, 1.0], tokens=8)], 1.5, 3.5) == 4
    assert tokens_in_window([record(0.0, 1.0, [1.0], tokens=2, ok=False)], 0.0, 10.0) == 0


def test_throughput_is_right_when_requests_complete_in_waves() -> None:
    # Equal-length requests stay in phase in a closed loop: they all complete at the same moments. With
    # one measured request per worker the window holds about one wave of completions, yet every token
    # generated inside it counts: 4 workers × 4 tokens per 50 ms = 320 tokens/s.
    cpu_wait = CpuWait()
    results, _ = sweep(FakeTransport(duration_s=(0.05, 0.05)), [4], requests_per_level=4, warmup=1)
    level = results[0]
    assert level.ramp_excluded
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"{level.throughput_tokens_per_s:.0f} tokens/s")
    assert level.throughput_tokens_per_s == pytest.approx(320, rel=0.3)

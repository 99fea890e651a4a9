"""The closed loop, the default and the published seeds' method: at concurrency C, C workers each send their
next request as the last returns.

Warm-up, ramp, measured window and stop rule are defined in `level`; throughput counts tokens where their
events fall (`summary.tokens_in_window`: a continuous-batching server keeps a closed loop's requests in
phase, so they complete in waves). Every request gets the workload's next prompt, unique by default
(`workload`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.level import DEFAULT_STOP_RULE, LevelBook, LevelProgress, LevelResult, StopRule
from sagellm.results.records import RequestRecord


async def run_level(transport: Transport, *, concurrency: int, requests: int | None,
                    duration_s: float | None, warmup: int, workload: Workload,
                    on_record: Callable[[RequestRecord], None],
                    on_progress: Callable[[LevelProgress], None] | None = None,
                    stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None,
                    repeat: int = 0) -> LevelResult:
    """Run one closed-loop level with `concurrency` workers and return its records and window."""
    book = closed_book(concurrency=concurrency, requests=requests, duration_s=duration_s, warmup=warmup,
                       on_record=on_record, on_progress=on_progress, stop_rule=stop_rule, clock_zero=clock_zero,
                       repeat=repeat)

    async def worker(index: int, session: aiohttp.ClientSession) -> None:
        sent = 0
        while True:
            warming = sent < warmup
            if warming:
                if book.stopping is not None:
                    break
            elif not book.take():
                break
            request = workload.next()
            outcome = await transport.send(session, request.prompt, request.max_new_tokens)
            record = book.record(outcome, request, warmup=warming, worker=index)
            sent += 1
            if sent == max(warmup, 1):
                book.ramp_done(index)
            book.add(record)

    async def start(session: aiohttp.ClientSession, group: asyncio.TaskGroup) -> None:
        for index in range(concurrency):
            group.create_task(worker(index, session))

    return await book.run(concurrency, start)


def closed_book(*, concurrency: int, requests: int | None, duration_s: float | None, warmup: int,
                on_record: Callable[[RequestRecord], None], on_progress: Callable[[LevelProgress], None] | None,
                stop_rule: StopRule, clock_zero: float | None, repeat: int) -> LevelBook:
    """The book of a closed-loop level (`concurrency` clients, `warmup` requests each), its arguments checked."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests (per level) and duration_s")
    zero = time.perf_counter() if clock_zero is None else clock_zero
    return LevelBook(concurrency=concurrency, request_rate=None, warmup_requests=warmup * concurrency,
                     ramp_count=concurrency, budget=requests, duration_s=duration_s, rule=stop_rule,
                     clock_zero=zero, on_record=on_record, on_progress=on_progress, repeat=repeat)

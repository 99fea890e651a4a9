"""The closed loop, the default and the published seeds' method: at concurrency C, C workers each send their
next request as the last returns.

Warm-up, ramp, measured window and stop rule are defined in `level`; throughput counts tokens where their
events fall (`summary.tokens_in_window`: a continuous-batching server keeps a closed loop's requests in
phase, so they complete in waves). Every request gets the workload's next prompt, unique by default
(`workload`).

Spawn rate: the workers' first sends are spread at `Spawn.rate` a second (worker i sends first at i ÷ rate after
the level's start), as locust's `--spawn-rate`, k6's ramping VUs and aiperf's `--concurrency-ramp-duration`
start their users. Started together, C workers stay in phase for as long as their requests last alike (exact
pacing; equal lengths on a server that keeps streams apart): every cycle then ends in one wave of C completions
and C new sends, which the client (building each request) and the server (accepting it) work through in turn, so
the wave's last request reaches the server late by the wave's length, in its TTFT. Spread, the cycles stay spread.
It changes no statistic's meaning: TTFT counts from a request's own send, and the measured window opens only once
every worker has finished its warm-up, so after every first send; a worker whose requests end before every worker
has started warms up until then (no measured request is sent below the level's concurrency). None: every worker
at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.level import DEFAULT_STOP_RULE, LevelBook, LevelProgress, LevelResult, StopRule
from sagellm.results.records import RequestRecord

SPAWN_RATE = 1000.0  # workers started a second: 512 in half a second


@dataclass(frozen=True)
class Spawn:
    """When a closed loop's workers send their first request: worker i at (phase + i × step) ÷ rate seconds after
    the level's start. A worker process runs a share of a level: its workers take their places in the level's order
    (phase, step), and `level_s` says when the level's last worker sends first."""

    rate: float = SPAWN_RATE
    phase: float = 0.0
    step: int = 1
    level_s: float = 0.0

    def delay_s(self, index: int) -> float:
        """Seconds from the level's start to worker `index`'s first send."""
        return (self.phase + index * self.step) / self.rate


DEFAULT_SPAWN = Spawn()


async def run_level(transport: Transport, *, concurrency: int, requests: int | None,
                    duration_s: float | None, warmup: int, workload: Workload,
                    on_record: Callable[[RequestRecord], None],
                    on_progress: Callable[[LevelProgress], None] | None = None,
                    stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None,
                    repeat: int = 0, spawn: Spawn | None = DEFAULT_SPAWN) -> LevelResult:
    """Run one closed-loop level with `concurrency` workers, started as `spawn` says (None: all at once), and return
    its records and window."""
    book = closed_book(concurrency=concurrency, requests=requests, duration_s=duration_s, warmup=warmup,
                       on_record=on_record, on_progress=on_progress, stop_rule=stop_rule, clock_zero=clock_zero,
                       repeat=repeat)

    unstarted = [concurrency]  # workers yet to send their first request (or to give up)

    def spawning() -> bool:
        """Whether a worker of the level has yet to send its first request."""
        return unstarted[0] > 0 or (spawn is not None and time.perf_counter() < book.started + spawn.level_s)

    async def worker(index: int, session: aiohttp.ClientSession) -> None:
        sent, started, ramping = 0, False, True
        if spawn is not None and (delay := spawn.delay_s(index)):
            await asyncio.sleep(book.started + delay - time.perf_counter())
        try:
            while True:
                # A worker whose requests end before every worker has started warms up until then, so that the
                # budget and the window begin at the level's concurrency (short requests, a slow spawn).
                warming = sent < warmup or (started and spawning())
                if warming:
                    if book.stopping is not None:
                        break
                elif not book.take():
                    break
                request = workload.next()
                if not started:
                    started, unstarted[0] = True, unstarted[0] - 1
                outcome = await transport.send(session, request.prompt, request.max_new_tokens)
                record = book.record(outcome, request, warmup=warming, worker=index)
                sent += 1
                if ramping and sent >= max(warmup, 1) and not spawning():
                    ramping = False
                    book.ramp_done(index)
                book.add(record)
        finally:
            if not started:  # it sends nothing: the others wait no more for it
                unstarted[0] -= 1

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

"""The open loop: requests sent on a schedule at a set rate, whether or not earlier ones have returned.

This is how capacity is planned for real traffic (guidellm, aiperf and k6 offer it beside concurrency):
arrivals do not slow down when the server does, so queueing shows up as latency instead of being hidden
by a closed loop that waits for it.
- **Schedule**: `constant` sends request i at i ÷ rate; `poisson` draws independent exponential gaps with
  mean 1 ÷ rate (a Poisson process), from a generator seeded per run, level and repeat.
- **In-flight cap** (`max_in_flight`): a request due while that many are in flight waits for one to
  return. It is then sent late, and so is one that the client's own event loop could not send on time.
- **Lateness** (`late_s` on every record): when the request was sent minus when it was due. The client
  falling behind its schedule is a measured fact of the level (`lateness_ms`), not hidden.
- **Over-saturation** (with `StopRule.saturation`): at each send the requests not yet answered are those in
  flight plus those due meanwhile that wait for the cap (lateness × rate); when they keep growing, or a first
  token waits past the limit, the level stops early (`saturation`), on the simulated clock (`OpenLoop.clock`).
- **Trace replay** (a workload with a trace): request i is due at the trace's arrival i ÷ the level's speed (its
  rate ÷ the trace's mean rate at speed 1), × `clock.scale`, and the schedule ends with the trace, every request
  of which is sent (the budget is the trace's); a level's rate is the trace's mean at its speed (it names the level).
Warm-up, ramp, window and stop rule are the level's (see `level`); the window ends when the next request
is not sent (the budget is spent or the duration is over), so it spans the arrivals it measured.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import aiohttp

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Request, Workload
from sagellm.bench.load.level import DEFAULT_STOP_RULE, LevelBook, LevelProgress, LevelResult, StopRule
from sagellm.bench.load.saturation import SaturationWatch
from sagellm.clock import REAL, Clock
from sagellm.results.records import RequestRecord

Arrivals = Literal["constant", "poisson"]
ARRIVALS: tuple[Arrivals, ...] = ("constant", "poisson")


@dataclass(frozen=True)
class OpenLoop:
    """An open-loop sweep: request rates (requests/s) and how arrivals are spaced."""

    rates: tuple[float, ...]
    arrivals: Arrivals = "constant"
    max_in_flight: int = 1024
    seed: int = 0
    clock: Clock = REAL  # a compressed emulator's: the schedule runs that much faster in wall time


def arrival_times(rate: float, arrivals: Arrivals, rng: random.Random) -> Iterator[float]:
    """Seconds from the level's start at which requests are due: the first at 0, then spaced by the schedule."""
    if rate <= 0:
        raise ValueError(f"request rate must be positive, got {rate}")
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(rate) if arrivals == "poisson" else 1.0 / rate


async def send_due(transport: Transport, session: aiohttp.ClientSession, request: Request, due: float,
                   slots: asyncio.Semaphore) -> tuple[RequestRecord, float]:
    """Send a scheduled request (its in-flight slot already taken, freed here): its record and lateness."""
    try:
        late = time.perf_counter() - due
        return await transport.send(session, request.prompt, request.max_new_tokens), late
    finally:
        slots.release()


async def run_rate_level(transport: Transport, *, rate: float, arrivals: Arrivals, max_in_flight: int,
                         requests: int | None, duration_s: float | None, warmup: int, workload: Workload,
                         on_record: Callable[[RequestRecord], None],
                         on_progress: Callable[[LevelProgress], None] | None = None,
                         stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None, repeat: int = 0,
                         seed: int = 0, clock: Clock = REAL, share: tuple[int, int] = (0, 1),
                         t0: float | None = None) -> LevelResult:
    """Run one open-loop level at `rate` requests/s and return its records and window.

    `rate` names the level; requests are sent at `clock.wall_rate(rate)` per wall-clock second (a compressed
    emulator serves simulated seconds faster, so the schedule is compressed with it). A worker process
    sends its `share` (k, n): arrivals k, k + n, … of the schedule starting at `t0` (`workers`); its warm-up
    is those of the level's first `warmup` arrivals, and `requests` its own measured ones.
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests (per level) and duration_s")
    zero = time.perf_counter() if clock_zero is None else clock_zero
    mine, every = share
    my_warmup = len(range(mine, warmup, every))
    if workload.trace is not None:  # the trace decides: every one of this share's arrivals, its warm-up's first
        requests, duration_s = len(range(mine, len(workload.trace.rows), every)) - my_warmup, None
    book = LevelBook(concurrency=None, request_rate=rate, warmup_requests=my_warmup, ramp_count=max(my_warmup, 1),
                     budget=requests, duration_s=duration_s, rule=stop_rule, clock_zero=zero,
                     on_record=on_record, on_progress=on_progress, repeat=repeat)
    slots = asyncio.Semaphore(max_in_flight)
    if stop_rule.saturation is not None:
        book.watch = SaturationWatch(stop_rule.saturation, clock, rate, book.load)
    in_flight = 0
    schedule: Iterator[float] = arrival_times(clock.wall_rate(rate), arrivals,
                                              random.Random(f"{seed}/arrivals/{rate:g}/{repeat}"))
    if workload.trace is not None:
        if every == 1:  # one process: the level starts at the trace's first request (workers: their coordinator)
            workload.replay_from_start()
        # A level of another speed than the trace's own (a sweep of speeds) scales its arrivals by the rates' ratio.
        pace = clock.wall_s(workload.trace.rate / rate)
        schedule = iter([t * pace for t in workload.trace.arrivals_s])

    async def one(session: aiohttp.ClientSession, request: Request, due: float, warming: bool) -> None:
        nonlocal in_flight
        try:
            outcome, late = await send_due(transport, session, request, due, slots)
        finally:
            in_flight -= 1
        record = book.record(outcome, request, warmup=warming, late_s=late)
        if len(book.records) < max(my_warmup, 1):  # the ramp: the first max(warmup, 1) completions
            book.ramp_done()
        book.add(record)

    async def start(session: aiohttp.ClientSession, group: asyncio.TaskGroup) -> None:
        nonlocal in_flight
        start = book.started if t0 is None else t0
        for index, offset in itertools.islice(enumerate(schedule), mine, None, every):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            warming = index < warmup
            if (book.stopping is not None) if warming else not book.take():
                break
            book.capped += not warming and slots.locked()
            await slots.acquire()  # the in-flight cap: a request due meanwhile is sent late
            if book.watch is not None:
                now = time.perf_counter()
                waiting = int(max(0.0, now - due) * clock.wall_rate(rate) / every)  # due meanwhile, not yet sent
                book.saturated(book.watch.sent(now - book.started, in_flight + 1 + waiting))
            in_flight += 1
            group.create_task(one(session, workload.next(), due, warming))
        else:  # a finite schedule (a trace) ran out: its window ends here, as a spent budget's does
            book.window_end = book.window_end or time.perf_counter()

    return await book.run(max_in_flight, start)

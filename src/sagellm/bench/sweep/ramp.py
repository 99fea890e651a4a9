"""`sagellm bench --ramp`: open-loop load rising in steps on one continuous schedule, for autoscaling.

A sweep runs each level alone and waits for its requests to drain; a ramp must not: load that pauses at
every step would hand the autoscaler quiet minutes a real ramp never has. So the steps share one schedule
and one connection pool, back to back: step i sends at `rates[i]` from i × step to (i + 1) × step, while
the requests of earlier steps are still in flight. Each step is booked as an open-loop level (its window is
exactly the step), so the levels, knee and report work as for a sweep.

The ramp never stops early: overload while capacity is added is what it measures (errors and timeouts are
counted, not a reason to stop). Default steps: from half one instance's predicted knee rate to 1.25 × the
fleet's maximum (max capacity × one instance's predicted max throughput), `DEFAULT_STEPS` of
`DEFAULT_STEP_S` simulated seconds each, long enough for a scale-out (about 4 minutes to alarm and
~9 minutes to start an instance, see `emulator.serving.autoscaling`) to take effect within the ramp.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

import aiohttp

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Request, Workload
from sagellm.bench.load.level import LevelBook, LevelProgress, LevelResult, StopRule
from sagellm.bench.load.open_loop import OpenLoop, arrival_times, send_due
from sagellm.emulator.frontend.loop_lag import probing
from sagellm.errors import InputError
from sagellm.planner import predict
from sagellm.profiles import Design
from sagellm.results.records import RequestRecord

DEFAULT_STEPS = 8
DEFAULT_STEP_S = 240.0  # simulated seconds per step: 32 minutes in all
START_OF_KNEE = 0.5  # the first step: this share of one instance's knee rate
PAST_FLEET_MAX = 1.25  # the last step: this multiple of the whole fleet's max throughput
_NEVER_STOP = StopRule(max_error_rate=1.0, stop_on_timeout=False)


def ramp_rates(design: Design, steps: int = DEFAULT_STEPS) -> tuple[float, ...]:
    """Request rates (requests/s) rising evenly from below one instance's knee to above the fleet's maximum."""
    one = design.shape(instance_count=1)
    sweep = tuple(2**i for i in range(13))
    curve = predict(one, design.payload, sweep, design.region)
    knee = curve.knee.requests_per_s if curve.knee else None
    top = curve.max_throughput.requests_per_s if curve.max_throughput else None
    if not knee or not top:
        raise ValueError(f"the planner predicts no usable level for one {design.instance.instance_type}")
    fleet = design.scaling.max_capacity if design.scaling else design.instance_count
    low, high = START_OF_KNEE * knee, PAST_FLEET_MAX * fleet * top
    if steps == 1:
        return (round(high, 3),)
    return tuple(round(low + (high - low) * i / (steps - 1), 3) for i in range(steps))


def ramp_steps(ramp: bool | None, request_rate: tuple[float, ...], design: Design | None) -> tuple[float, ...]:
    """The ramp's rates (empty: no ramp, a sweep): --request-rate as given, or from the planner's prediction.
    `ramp` None means: a ramp when the plan has autoscaling."""
    if not (ramp if ramp is not None else bool(design and design.scaling)):
        return ()
    if request_rate:
        return request_rate
    if design is None:
        raise InputError("--ramp: give --request-rate steps (without --profile/--model nothing predicts them)")
    try:
        return ramp_rates(design)
    except ValueError as exc:
        raise InputError(f"--ramp: {exc}; give --request-rate steps") from None


async def run_ramp(transport: Transport, *, workload: Workload, loop: OpenLoop, step_s: float,
                   on_record: Callable[[RequestRecord], None],
                   on_progress: Callable[[LevelProgress], None] | None = None,
                   on_level: Callable[[LevelResult], None] | None = None,
                   on_start: Callable[[], None] | None = None) -> list[LevelResult]:
    """Run the steps of `loop.rates` back to back, `step_s` wall seconds each; one level result per step.

    Rates are simulated requests/s: they are sent at `loop.clock.wall_rate(rate)` per wall second, like a
    sweep's open loop. `on_start` runs just before the first request (e.g. to align another clock).
    """
    if step_s <= 0:
        raise ValueError(f"step_s must be positive, got {step_s}")
    slots = asyncio.Semaphore(loop.max_in_flight)
    connector = aiohttp.TCPConnector(limit=loop.max_in_flight, limit_per_host=0)
    books: list[LevelBook] = []

    async def one(session: aiohttp.ClientSession, book: LevelBook, request: Request, due: float) -> None:
        outcome, late = await send_due(transport, session, request, due, slots)
        book.add(book.record(outcome, request, warmup=False, late_s=late))

    async def step(session: aiohttp.ClientSession, group: asyncio.TaskGroup, book: LevelBook) -> None:
        rng = random.Random(f"{loop.seed}/ramp/{book.request_rate:g}/{len(books)}")
        for offset in arrival_times(loop.clock.wall_rate(book.request_rate or 0.0), loop.arrivals, rng):
            if offset >= step_s * (1 - 1e-9):  # offsets are float sums: 10 × 0.01 s must end a 0.1 s step
                break
            due = book.started + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            book.capped += slots.locked()
            await slots.acquire()  # the in-flight cap: a request due meanwhile is sent late
            book.issued += 1
            group.create_task(one(session, book, workload.next(), due))
        book.window_end = book.deadline

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        if on_start is not None:
            on_start()
        zero = time.perf_counter()
        try:
            async with probing() as lag, asyncio.TaskGroup() as group:
                for i, rate in enumerate(loop.rates):
                    book = LevelBook(concurrency=None, request_rate=rate, warmup_requests=0, ramp_count=0,
                                     budget=None, duration_s=step_s, rule=_NEVER_STOP, clock_zero=zero,
                                     on_record=on_record, on_progress=on_progress)
                    # The step's window is the step itself: no ramp of its own on a continuous schedule.
                    book.started = book.ramp_end = zero + i * step_s
                    book.deadline = book.started + step_s
                    book.lag = lag  # one probe; each step reads its own span of it
                    books.append(book)
                    await step(session, group, book)
        except BaseExceptionGroup as group_error:  # e.g. on_record failed: raise what it raised
            raise group_error.exceptions[0] from None
    results = [book.result(lag_until=book.deadline) for book in books]
    for result in results:
        if on_level is not None:
            on_level(result)
    return results

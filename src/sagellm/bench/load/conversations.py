"""Conversations as load: each request is one turn of a conversation (`client.conversation`), sent after the
reply to the turn before it and the think time.

- **Closed loop** at concurrency C: each of C users holds one conversation at a time; it sends a turn, waits for
  the reply, thinks, sends the next, and starts a new conversation after the last turn (or a failed one).
- **Open loop** at rate R: conversations start at R per second on the open loop's schedule (constant or Poisson);
  each one's later turns follow their replies after the think time, so the request rate exceeds R by the mean
  turns. The in-flight cap holds each turn as it holds a request.
The level counts turns: the request budget, warm-up (closed loop: each user's first `warmup` turns; open loop:
the level's first `warmup` turns) and stop rule are the level's (`level`), as for single requests. Think times
are simulated seconds on a compressed emulator (`Conversations.clock`). A level runs in this process (a
worker pool's shares would split conversations' state across processes), and open loop's over-saturation watch
is not applied (a conversation's next turn waits for its reply, so the queue it reads does not grow the same way).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from sagellm.bench.client.conversation import Conversation, Conversations
from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.closed_loop import closed_book
from sagellm.bench.load.level import DEFAULT_STOP_RULE, LevelBook, LevelProgress, LevelResult, StopRule
from sagellm.bench.load.open_loop import Arrivals, OpenLoop, arrival_times
from sagellm.clock import REAL, Clock
from sagellm.results.records import RequestRecord


def _conversations(workload: Workload) -> Conversations:
    if workload.conversations is None:
        raise ValueError("a conversation level needs a workload with turns (WorkloadOptions.turns)")
    return workload.conversations


async def _talk(transport: Transport, session: aiohttp.ClientSession, book: LevelBook, workload: Workload,
                talk: Conversation, clock: Clock, *, turn_allowed: Callable[[], bool | None],
                placed: Callable[[RequestRecord, bool], None], slots: asyncio.Semaphore | None = None,
                worker: int | None = None) -> bool:
    """Run one conversation's turns (each after its think time); False once the level sends no more turns.
    `turn_allowed` answers whether the next turn is sent and as a warm-up (None: not sent), `placed` books a record."""
    while not talk.over:
        pause = clock.wall_s(talk.think_before(talk.turn + 1))
        if pause > 0:
            if book.stopping is not None or book.window_end is not None:
                return False  # the level sends nothing more: no need to think first
            await asyncio.sleep(pause)
        warming = turn_allowed()
        if warming is None:
            return False
        if slots is not None:
            await slots.acquire()  # the open loop's in-flight cap
        request = workload.turn(talk)
        reply: list[str] = []
        try:
            outcome = await transport.send(session, request.messages or request.prompt, request.max_new_tokens,
                                           reply)
        finally:
            if slots is not None:
                slots.release()
        record = book.record(outcome, request, warmup=warming, worker=worker)
        placed(record, warming)
        if not record.ok:
            break  # no reply to carry on from: the conversation ends
        talk.answered("".join(reply))
    return True


async def run_conversation_level(transport: Transport, *, concurrency: int, requests: int | None,
                                 duration_s: float | None, warmup: int, workload: Workload,
                                 on_record: Callable[[RequestRecord], None],
                                 on_progress: Callable[[LevelProgress], None] | None = None,
                                 stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None,
                                 repeat: int = 0) -> LevelResult:
    """Run one closed-loop level of conversations: `concurrency` users, each talking one conversation at a time."""
    book = closed_book(concurrency=concurrency, requests=requests, duration_s=duration_s, warmup=warmup,
                       on_record=on_record, on_progress=on_progress, stop_rule=stop_rule, clock_zero=clock_zero,
                       repeat=repeat)
    conversations = _conversations(workload)

    async def user(index: int, session: aiohttp.ClientSession) -> None:
        sent = [0]

        def allowed() -> bool | None:
            if sent[0] < warmup:
                return True if book.stopping is None else None
            return False if book.take() else None

        def placed(record: RequestRecord, warming: bool) -> None:
            sent[0] += 1
            if sent[0] == max(warmup, 1):
                book.ramp_done(index)
            book.add(record)

        while await _talk(transport, session, book, workload, conversations.next(), conversations.clock,
                          turn_allowed=allowed, placed=placed, worker=index):
            pass

    async def start(session: aiohttp.ClientSession, group: asyncio.TaskGroup) -> None:
        for index in range(concurrency):
            group.create_task(user(index, session))

    return await book.run(concurrency, start)


async def run_conversation_rate_level(transport: Transport, *, rate: float, arrivals: Arrivals, max_in_flight: int,
                                      requests: int | None, duration_s: float | None, warmup: int,
                                      workload: Workload, on_record: Callable[[RequestRecord], None],
                                      on_progress: Callable[[LevelProgress], None] | None = None,
                                      stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None,
                                      repeat: int = 0, seed: int = 0, clock: Clock = REAL) -> LevelResult:
    """Run one open-loop level of conversations: `rate` conversations start per simulated second (`clock.wall_rate(rate)`
    in wall time), each sending its turns as its replies come back."""
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests (per level) and duration_s")
    conversations = _conversations(workload)
    zero = time.perf_counter() if clock_zero is None else clock_zero
    book = LevelBook(concurrency=None, request_rate=rate, warmup_requests=warmup, ramp_count=max(warmup, 1),
                     budget=requests, duration_s=duration_s, rule=stop_rule, clock_zero=zero,
                     on_record=on_record, on_progress=on_progress, repeat=repeat)
    slots = asyncio.Semaphore(max_in_flight)
    turns_sent = [0]
    schedule = arrival_times(clock.wall_rate(rate), arrivals, random.Random(f"{seed}/arrivals/{rate:g}/{repeat}"))

    def allowed() -> bool | None:
        warming = turns_sent[0] < warmup
        if (book.stopping is not None) if warming else not book.take():
            return None
        turns_sent[0] += 1
        book.capped += not warming and slots.locked()
        return warming

    def placed(record: RequestRecord, warming: bool) -> None:
        if len(book.records) < max(warmup, 1):  # the ramp: the first max(warmup, 1) completions
            book.ramp_done()
        book.add(record)

    def spent() -> bool:
        """Whether the level sends no more turns: stopped, its budget handed out or its duration over."""
        if book.stopping is not None or book.window_end is not None:
            return True
        if book.budget is not None and book.issued >= book.budget and turns_sent[0] >= warmup:
            book.take()  # refused: the window ends now, as the single-request open loop's does at its next arrival
            return True
        return False

    async def start(session: aiohttp.ClientSession, group: asyncio.TaskGroup) -> None:
        for offset in itertools.takewhile(lambda _: not spent(), schedule):
            delay = book.started + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if spent():
                break
            group.create_task(_talk(transport, session, book, workload, conversations.next(),
                                    conversations.clock, turn_allowed=allowed, placed=placed, slots=slots))

    return await book.run(max_in_flight, start)


def conversation_level(transport: Transport, load: float,
                       open_loop: OpenLoop | None) -> functools.partial[Coroutine[Any, Any, LevelResult]]:
    """A sweep's level of conversations at `load` (a concurrency, or a rate of `open_loop`), taking the level's
    common arguments as the single-request levels take them."""
    if open_loop is None:
        return functools.partial(run_conversation_level, transport, concurrency=int(load))
    return functools.partial(run_conversation_rate_level, transport, rate=load, arrivals=open_loop.arrivals,
                             max_in_flight=open_loop.max_in_flight, seed=open_loop.seed,
                             clock=open_loop.clock)

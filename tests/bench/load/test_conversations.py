"""Conversations as load: users talk one conversation at a time (closed loop), conversations start at a rate (open
loop), each turn after the reply to the one before; the level counts turns."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import aiohttp

from sagellm.bench.client.conversation import Prompt, as_text
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.sweep.run import run_sweep
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import summarize


class EchoTransport:
    """Answers every request with `n` words naming the request, after a short wait; keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[Prompt] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def send(self, session: aiohttp.ClientSession, prompt: Prompt, max_new_tokens: int,
                   reply: list[str] | None = None) -> RequestRecord:
        t0 = time.perf_counter()
        self.sent.append(prompt)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.002)
        finally:
            self.in_flight -= 1
        if reply is not None:
            reply.extend(f" r{len(self.sent)}" for _ in range(max_new_tokens))
        return RequestRecord(ok=True, start_s=t0, e2e_s=time.perf_counter() - t0, ttft_s=0.001,
                             output_tokens=max_new_tokens)


def workload(turns: str = "3") -> Workload:
    return Workload(WorkloadOptions(turns=turns, input_tokens="6", output_tokens="2"), Payload(6, 2))


def run(transport: EchoTransport, **kwargs: Any) -> list[RequestRecord]:
    records: list[RequestRecord] = []
    options: dict[str, Any] = {"requests_per_level": 12, "duration_per_level_s": None, "warmup": 0,
                               "workload": workload(), "on_record": records.append}
    options.update(kwargs)
    asyncio.run(run_sweep(transport, **options))
    return records


def test_closed_loop_users_talk_one_conversation_at_a_time_turn_after_reply() -> None:
    transport = EchoTransport()
    records = run(transport, concurrency=[2])
    assert len(records) == 12 and transport.max_in_flight == 2  # the budget counts turns
    by_conversation: dict[int, list[RequestRecord]] = {}
    for r in records:
        assert r.conversation is not None
        by_conversation.setdefault(r.conversation, []).append(r)
    for turns in by_conversation.values():
        assert [r.turn for r in turns] == [1, 2, 3][: len(turns)]
        assert len({r.worker for r in turns}) == 1  # one user holds a conversation
        for before, after in itertools.pairwise(turns):
            assert after.start_s >= before.end_s  # the next turn waits for the reply
    # Each turn re-sends the history: 6 new words a turn, and the 2-word replies between them.
    assert sorted({r.input_tokens for r in records}) == [6, 6 + 2 + 6, 6 + 2 + 6 + 2 + 6]
    # The replies re-sent are the ones received: turn 2 of a conversation carries its turn 1's answer.
    third = next(p for p in transport.sent if not isinstance(p, str) and len(p) == 5)
    assert third[1]["role"] == "assistant" and third[1]["content"].split()[0].startswith("r")
    level = summarize(records, window_start_s=0, window_end_s=max(r.end_s for r in records))
    assert [t.turn for t in level.by_turn or ()] == [1, 2, 3]
    assert [t.request_input_tokens.mean for t in level.by_turn or ()] == [6, 14, 22]


def test_open_loop_starts_conversations_at_the_rate_and_counts_their_turns() -> None:
    transport = EchoTransport()
    records = run(transport, open_loop=OpenLoop((200.0,)), requests_per_level=9, warmup=3)
    measured = [r for r in records if not r.warmup]
    assert len(measured) == 9 and sum(r.warmup for r in records) == 3
    assert {r.request_rate for r in records} == {200.0}
    turns: dict[int, list[int]] = {}
    for r in records:
        assert r.conversation is not None and r.turn is not None
        turns.setdefault(r.conversation, []).append(r.turn)
    # Conversations start at the rate while earlier ones still talk: more than one is open at a time.
    assert len(turns) >= 4 and all(sorted(t) == list(range(1, len(t) + 1)) for t in turns.values())
    assert all(as_text(p).count("\n") == 2 * (len(p) // 2) for p in transport.sent if not isinstance(p, str))


def test_single_requests_have_no_conversation() -> None:
    transport = EchoTransport()
    records = run(transport, concurrency=[2], workload=Workload(WorkloadOptions(), Payload(6, 2)))
    assert {(r.conversation, r.turn) for r in records} == {(None, None)}
    assert summarize(records, window_start_s=0, window_end_s=1).by_turn is None

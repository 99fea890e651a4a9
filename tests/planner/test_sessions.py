"""Conversations on the simulation's clock: turns re-send their history, follow their replies after the think time,
and carry their conversation and turn; turn prompts as prefix segments."""

from __future__ import annotations

import itertools

import pytest

from sagellm.planner import Payload, StepModel
from sagellm.planner.prefix import SHARED_KEY, reply_key
from sagellm.planner.sessions import (
    SimulatedConversations,
    simulate_conversations,
    turn_segments,
)
from sagellm.planner.simulate import Served, SimulatedClosedLoop, SimulatedOpenLoop, Simulation
from sagellm.profiles import design_for
from sagellm.profiles.plan import served

USER, REPLY = 100, 20


@pytest.fixture(scope="module")
def endpoint() -> Served:
    d = design_for("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge", payload=Payload(1024, REPLY))
    return served(d.plan(), StepModel(d.shape()))


def three_turns(think_s: float = 2.0) -> SimulatedConversations:
    return SimulatedConversations(turns=lambda _: 3, sizes=lambda _c, _t: (USER, REPLY), think_s=lambda _c, _t: think_s)


def by_conversation(sim: Simulation) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in sim.requests:
        assert r.conversation is not None
        out.setdefault(r.conversation, []).append(r)
    return out


def test_a_closed_loop_conversation_resends_its_history_turn_after_reply(endpoint: Served) -> None:
    sim = simulate_conversations(endpoint, SimulatedClosedLoop(2), three_turns(2.0), requests=30, warmup=6)
    assert len(sim.measured) == 30 and sum(r.warmup for r in sim.requests) == 6
    for turns in by_conversation(sim).values():
        assert [r.turn for r in turns] == [1, 2, 3][: len(turns)]
        assert len({r.user for r in turns}) == 1
        # Turn k holds k messages and the k − 1 replies generated before it.
        assert [r.input_tokens for r in turns] == [k * USER + (k - 1) * REPLY for k in range(1, len(turns) + 1)]
        for before, after in itertools.pairwise(turns):
            assert before.ok and after.arrived_s == pytest.approx(before.end_s + 2.0)  # the think time after the reply
    # TGI's copies keep no prefix cache here: later turns carry more tokens to prefill and their first token comes
    # later.
    first = [r.first_token_s - r.arrived_s for r in sim.measured if r.turn == 1 and r.first_token_s]
    third = [r.first_token_s - r.arrived_s for r in sim.measured if r.turn == 3 and r.first_token_s]
    assert min(third) > max(first) * 0.9 and sum(third) / len(third) > sum(first) / len(first)


def test_each_user_starts_a_new_conversation_after_the_last_turn(endpoint: Served) -> None:
    sim = simulate_conversations(endpoint, SimulatedClosedLoop(1), three_turns(0.0), requests=9, warmup=0)
    assert [(r.conversation, r.turn) for r in sim.requests][:9] == [(c, t) for c in range(3) for t in (1, 2, 3)]
    ends = [r.end_s for r in sim.requests]
    assert all(b.arrived_s >= a for a, b in zip(ends, sim.requests[1:], strict=False))  # one at a time


def test_open_loop_conversations_start_at_the_rate_and_overlap(endpoint: Served) -> None:
    sim = simulate_conversations(endpoint, SimulatedOpenLoop(2.0), three_turns(1.0), requests=60, warmup=0, seed=3)
    conversations = by_conversation(sim)
    starts = sorted(turns[0].arrived_s for turns in conversations.values())
    assert len(conversations) > 20 and all(t[0].turn == 1 for t in conversations.values())
    span = starts[-1] - starts[0]
    assert 0.5 < (len(starts) - 1) / span < 4  # about the rate of 2 per second
    # Later turns arrive after their replies, among other conversations' first turns.
    assert any(r.turn == 2 for r in sim.requests[: len(sim.requests) // 2])


def test_turn_segments_chain_each_turn_onto_the_last_with_its_reply() -> None:
    one = turn_segments(7, 1, 50, shared_prefix=30)
    assert one == ((SHARED_KEY, 30), (("conversation", 7, 1), 20))
    two = turn_segments(7, 2, 40, one, reply_tokens=16)
    assert two == (*one, (reply_key(one), 16), (("conversation", 7, 2), 40))
    assert sum(tokens for _, tokens in two) == 50 + 16 + 40
    assert turn_segments(7, 1, 50) == ((("conversation", 7, 1), 50),)


def test_a_vllm_copy_serves_a_conversations_history_from_its_prefix_cache() -> None:
    # Turn k's prompt opens with turn k − 1's prompt and reply, which the copy cached as that turn ended: vLLM
    # computes only the new message (and the partial block before it), where TGI here prefills the whole history.
    d = design_for("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge", payload=Payload(1024, REPLY),
                   engine="vllm")
    sim = simulate_conversations(served(d.plan(), StepModel(d.shape())), SimulatedClosedLoop(2), three_turns(1.0),
                                 requests=30, warmup=6)
    block = served(d.plan(), StepModel(d.shape())).limits.kv_block_tokens
    for turns in by_conversation(sim).values():
        assert turns[0].cached_tokens == 0  # nothing shared before a conversation's first turn
        for before, after in itertools.pairwise(turns):
            # The whole history in whole blocks, less the reply's last token (sampled, never computed into KV).
            history = before.input_tokens + REPLY
            assert after.cached_tokens == (history - 1) // block * block

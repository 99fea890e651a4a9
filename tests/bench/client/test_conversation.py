"""Conversations in the workload: turns, think times, the history each turn re-sends, and the bodies it goes in."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sagellm.bench.client.conversation import Conversation, ThinkTimes
from sagellm.bench.client.responses import StreamState, openai_event, tgi_event
from sagellm.bench.client.transports import chat_body, tgi_body
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.errors import InputError
from sagellm.planner import Payload


def conversations(turns: str = "3", think: str | None = None, **options: object) -> Workload:
    return Workload(WorkloadOptions(turns=turns, think_time_s=think, **options), Payload(8, 4))  # type: ignore[arg-type]


def test_each_turn_resends_the_history_with_the_replies_received_and_a_new_message() -> None:
    workload = conversations("3")
    assert workload.conversations is not None
    talk = workload.conversations.next()
    first = workload.turn(talk)
    talk.answered("a reply of five words")
    second = workload.turn(talk)
    assert (first.turn, second.turn, first.conversation, second.conversation) == (1, 2, 0, 0)
    assert [m["role"] for m in second.messages or ()] == ["user", "assistant", "user"]
    assert second.messages is not None and second.messages[:2] == (first.messages or ())[:1] + (
        {"role": "assistant", "content": "a reply of five words"},)
    # One token per word: the history (8 + 5) and the new message (8).
    assert (first.input_tokens, second.input_tokens) == (8, 8 + 5 + 8)
    assert second.messages[2]["content"] != second.messages[0]["content"]  # a new message, not the first again


def test_chat_sends_the_messages_and_tgi_the_joined_text() -> None:
    talk = Conversation(0, 2, (0.0,))
    talk.ask("hello there")
    talk.answered("hi")
    messages = talk.ask("how are you")
    assert chat_body(messages, 4, "m")["messages"] == [{"role": "user", "content": "hello there"},
                                                        {"role": "assistant", "content": "hi"},
                                                        {"role": "user", "content": "how are you"}]
    assert tgi_body(messages, 4)["inputs"] == "hello there\nhi\nhow are you"
    assert chat_body("one prompt", 4, "m")["messages"] == [{"role": "user", "content": "one prompt"}]


def test_the_reply_text_is_kept_from_tgi_and_openai_streams() -> None:
    reply: list[str] = []
    st = StreamState(0.0, reply)
    tgi_event(st, {"token": {"text": " the", "special": False}}, 0.1)
    tgi_event(st, {"token": {"text": "</s>", "special": True}, "generated_text": "x", "details": {}}, 0.2)
    assert reply == [" the"] and st.events == 2
    chat: list[str] = []
    st = StreamState(0.0, chat)
    openai_event(st, {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}, 0.1)
    openai_event(st, {"choices": [{"delta": {"content": " fox"}, "finish_reason": None}]}, 0.2)
    openai_event(st, {"choices": [{"text": " dog", "finish_reason": "length"}]}, 0.3)
    assert chat == [" fox", " dog"]


def test_turns_and_think_times_are_drawn_per_conversation_from_the_seed() -> None:
    a, b = conversations("2-6", "1-3", seed=7), conversations("2-6", "1-3", seed=7)
    assert a.conversations is not None and b.conversations is not None
    drawn = [a.conversations.conversation(n) for n in range(20)]
    assert [(c.turns, c.think_s) for c in drawn] == [(c.turns, c.think_s) for c in
                                                   (b.conversations.conversation(n) for n in range(20))]
    assert {c.turns for c in drawn} > {2} and all(2 <= c.turns <= 6 for c in drawn)
    assert all(len(c.think_s) == c.turns - 1 and all(1 <= s <= 3 for s in c.think_s) for c in drawn)


def test_the_longest_request_is_the_last_turn_of_the_longest_conversation() -> None:
    workload = conversations("2-4", input_tokens="10-20", output_tokens="5")
    # 4 turns: 4 messages of up to 20 tokens and the 3 replies between them.
    assert workload.longest() == (4 * 20 + 3 * 5, 5)
    single = Workload(WorkloadOptions(input_tokens="10-20", output_tokens="5"), Payload(8, 4))
    assert single.longest() == (20, 5)


def test_the_shared_prefix_opens_only_the_first_message() -> None:
    workload = conversations("2", shared_prefix=4)
    assert workload.conversations is not None
    talk = workload.conversations.next()
    first = workload.turn(talk)
    talk.answered("ok")
    second = workload.turn(talk)
    assert second.messages is not None
    opening = first.prompt.split()[:4]
    assert second.messages[2]["content"].split()[:4] != opening
    assert len(second.messages[2]["content"].split()) == 8


@pytest.mark.parametrize(("options", "message"), [
    ({"turns": "0"}, "WorkloadOptions.turns: '0' is not a number of turns (use 3 (fixed), 3:1 (mean:stddev) or 2-6"),
    ({"turns": "three"}, "WorkloadOptions.turns: 'three' is not a number of turns"),
    ({"turns": "3", "think_time_s": "soon"}, "WorkloadOptions.think_time_s: 'soon' is not a time in seconds"),
    ({"turns": "3", "think_time_s": "3-1"}, "WorkloadOptions.think_time_s: '3-1' is an empty range"),
    ({"think_time_s": "2"}, "WorkloadOptions.think_time_s: only with WorkloadOptions.turns"),
])
def test_bad_conversation_options_are_one_line_each(options: dict[str, str], message: str) -> None:
    with pytest.raises(InputError) as caught:
        Workload(WorkloadOptions(**options), Payload(8, 4))  # type: ignore[arg-type]
    assert len(caught.value.messages) == 1 and caught.value.messages[0].startswith(message)
    assert "\n" not in caught.value.messages[0]


def test_think_time_normal_draws_stay_within_three_deviations_and_at_least_zero() -> None:
    seconds = ThinkTimes.parse("0.5:1", "x")
    rng = random.Random(0)
    draws = [seconds.draw(rng) for _ in range(2000)]
    assert min(draws) >= 0.0 and max(draws) <= 3.5 and min(draws) == 0.0  # clipped at 0 often enough to hit it
    assert str(seconds) == "0.5:1" and ThinkTimes.parse(".5", "x").mean == 0.5


def test_conversations_are_not_built_from_a_dataset(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello there"}\n')
    with pytest.raises(InputError) as caught:
        Workload(WorkloadOptions(turns="3", dataset=data), Payload(8, 4))
    assert caught.value.messages == [("WorkloadOptions.turns: not with WorkloadOptions.dataset (its prompts are "
                                     "single turns)")]

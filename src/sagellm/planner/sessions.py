"""Conversations on the simulation's clock: turns that re-send their history, sent after the reply to the turn
before and a think time, driving `simulate`'s clock and endpoint as the bench's conversation loads drive a server
(`bench.load.conversations`).

- **Closed loop** (`SimulatedClosedLoop.users`): each user talks one conversation at a time, starting the next
  after the last turn (or a failed one: there is no reply to carry on from).
- **Open loop** (`SimulatedOpenLoop.rate`): conversations start as a Poisson process at the rate; each one's later
  turns follow their replies.
Turn k's prompt is turn k−1's prompt, its reply (the tokens the simulation generated) and a new user message. The
first `warmup` turns warm the endpoint up; the next `requests` turns are measured.

Prefix caching: each turn's prompt is sent as segments `(key, tokens)`, a key standing for the prompt from its start
to the segment's end (`turn_segments`), so the copy that served turn k−1 holds its prompt and reply (planner/prefix.py:
a finished sequence's reply is cached under `reply_key` of its prompt) and serves them to turn k from its cache.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.planner.prefix import SHARED_KEY, Prefix, Segment, reply_key
from sagellm.planner.simulate import (
    DEFAULT_REQUESTS,
    DEFAULT_WARMUP,
    Served,
    SimulatedClosedLoop,
    SimulatedOpenLoop,
    SimulatedRequest,
    Simulation,
    _SimulatedRun,
    endpoint_maker,
)


def turn_segments(conversation: int, turn: int, user_tokens: int, previous: tuple[Segment, ...] = (),
                  reply_tokens: int = 0, shared_prefix: int = 0) -> tuple[Segment, ...]:
    """Turn `turn` (1-based) of a conversation as prompt segments: the first opens with the shared prefix (if any)
    and its user message; turn k is `(*turn_{k-1}, (reply_key(turn_{k-1}), reply_tokens), (new_key, user_tokens))`."""
    own = ("conversation", conversation, turn)
    if turn == 1:
        shared = min(shared_prefix, user_tokens - 1)
        first = (own, user_tokens - shared)
        return ((SHARED_KEY, shared), first) if shared > 0 else (first,)
    return (*previous, (reply_key(previous), reply_tokens), (own, user_tokens))


@dataclass(frozen=True)
class SimulatedConversations:
    """How conversations go: conversation n's turns, turn t's new user tokens and output tokens, and the seconds
    between a reply and the next turn (each a function, so a bench workload's draws can be replayed)."""

    turns: Callable[[int], int]  # conversation → turns
    sizes: Callable[[int, int], tuple[int, int]]  # (conversation, turn) → (new user tokens, output tokens)
    think_s: Callable[[int, int], float]  # (conversation, turn ≥ 2) → seconds after the previous reply
    shared_prefix: int = 0  # tokens opening every conversation's first message, shared by all


@dataclass
class _Talk:
    number: int
    user: int | None
    turns: int
    turn: int = 0
    segments: tuple[Segment, ...] = ()
    input_tokens: int = 0  # the last turn's prompt
    output_tokens: int = 0  # the last turn's reply (the ask, until it has ended)
    sent: list[SimulatedRequest] = field(default_factory=list)


class _Conversations:
    """Sends conversations' turns on a run's clock and starts the next ones as they end."""

    def __init__(self, run: _SimulatedRun, talks: SimulatedConversations):
        self.run, self.talks = run, talks
        self.pending: dict[int, tuple[int, int]] = {}  # request index → its (input, output) tokens
        self.of: dict[int, _Talk] = {}  # id(request) → its conversation
        self.started = 0
        self.sending: _Talk | None = None  # the conversation whose turn run.send is sending
        # Closed loop: what a user does once a conversation is over (starts the next); open loop: nothing.
        self.after_last: Callable[[int | None], None] | None = None  # closed loop: what a user does once a conversation is over
        self.segments: dict[int, Prefix] = {}  # request index → its prompt's segments
        run.sizes = self.pending.pop
        run.prefixes = self.segments.pop
        run.on_end = self._ended

    def start(self, user: int | None = None) -> None:
        """A new conversation sends its first turn now."""
        talk = _Talk(self.started, user, max(1, self.talks.turns(self.started)))
        self.started += 1
        self._send(talk)

    def _send(self, talk: _Talk) -> None:
        user_tokens, output_tokens = self.talks.sizes(talk.number, talk.turn + 1)
        talk.segments = turn_segments(talk.number, talk.turn + 1, user_tokens, talk.segments, talk.output_tokens,
                                      self.talks.shared_prefix)
        talk.turn += 1
        talk.input_tokens = sum(tokens for _, tokens in talk.segments)
        run = self.run
        self.pending[len(run.sent)] = (talk.input_tokens, output_tokens)
        self.segments[len(run.sent)] = talk.segments  # its copy's prefix cache holds the history it has seen
        self.sending = talk  # a refusal ends the request inside run.send, before it is tagged
        run.send(talk.user)
        req = run.sent[-1]
        req.conversation, req.turn = talk.number, talk.turn
        self.of[id(req)] = talk

    def _ended(self, req: SimulatedRequest) -> None:
        talk = self.of.pop(id(req), None) or self.sending
        assert talk is not None  # every request the run sends is a conversation's turn
        clock = self.run.clock
        if req.ok and talk.turn < talk.turns:
            talk.output_tokens = req.output_tokens
            clock.at(clock.now + self.talks.think_s(talk.number, talk.turn + 1) + self.run.front_end_s,
                     lambda: self._send(talk))
            return
        after = self.after_last
        if after is not None:
            # A refusal takes no simulated time: its user comes back once the next pass has ended (as `simulate`'s
            # closed loop does), not at the same instant for ever.
            when = clock.now if req.status != 429 else max(clock.now, self.run.endpoint.next_pass_end())
            clock.at(when + self.run.front_end_s, functools.partial(after, talk.user))


def simulate_conversations(served: Served, load: SimulatedClosedLoop | SimulatedOpenLoop,
                           talks: SimulatedConversations, *, requests: int = DEFAULT_REQUESTS,
                           warmup: int | None = None, seed: int = 0,
                           timeout_s: float | None = INVOCATION_TIMEOUT_S) -> Simulation:
    """Run a served model under conversations: `load.users` users talking one conversation at a time, or
    conversations starting at `load.rate` per second; `requests` turns measured after `warmup` (None: as
    `simulate` warms up)."""
    if isinstance(load, SimulatedOpenLoop):
        run = _SimulatedRun(endpoint_maker(served), lambda _: (0, 0), requests,
                            DEFAULT_WARMUP if warmup is None else warmup, timeout_s)
        conversations = _Conversations(run, talks)
        rng = random.Random(seed)

        def arrive() -> None:
            conversations.start()
            # Conversations' later turns are events as well: each copy runs only to the next one.
            run.clock.at(run.clock.now + rng.expovariate(load.rate), arrive)

        run.clock.at(rng.expovariate(load.rate), arrive)
    else:
        run = _SimulatedRun(endpoint_maker(served), lambda _: (0, 0), requests,
                            max(DEFAULT_WARMUP, 2 * load.users) if warmup is None else warmup, timeout_s)
        conversations = _Conversations(run, talks)
        conversations.after_last = conversations.start
        for user in range(load.users):
            start = load.starts_s[user] if user < len(load.starts_s) else 0.0
            run.clock.at(start, functools.partial(conversations.start, user))
    run.clock.run(lambda: run.measured_left == 0)
    return run.result()

"""Multi-turn conversations: how many turns each has, the think time before each next turn, and the history a
chat client re-sends.

As aiperf's multi-turn sessions (`--conversation-turn-mean`, `--conversation-turn-delay-mean`;
https://docs.nvidia.com/aiperf/tutorials/datasets-inputs/multi-turn-conversations) and guidellm's multi-turn
data: turn k of a conversation sends the whole history, every earlier user message and the reply actually
received to it, then a new user message. The OpenAI chat API gets it as a `messages` list; TGI's generate and
OpenAI completions bodies (and SageMaker's JSON) as one text, the messages' contents joined by newlines.

- **Turns** per conversation (`--turns`): a length distribution as `--input-tokens` takes it (`3`, `4:1`,
  `2-6`), drawn per conversation from (seed, conversation).
- **Think time** (`--think-time`, seconds): between a reply's end and the same conversation's next turn;
  `2`, `2:0.5` (normal, clipped at mean ± 3 sd and at 0) or `1-3` (uniform), drawn per turn.
A failed turn ends its conversation (there is no reply to carry on from).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sagellm.clock import REAL, Clock
from sagellm.errors import InputError

Message = dict[str, str]  # {"role": "user" | "assistant", "content": text}, as the OpenAI chat API takes it
Prompt = str | tuple[Message, ...]  # one text, or a conversation's messages

_SECONDS = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([:-])\s*(\d+(?:\.\d*)?|\.\d+)\s*)?$")


def as_text(prompt: Prompt) -> str:
    """A prompt as one text: a conversation's messages' contents joined by newlines (what a body without a
    messages list carries)."""
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


class Draws(Protocol):
    """A distribution of whole numbers (the workload's `Lengths`)."""

    @property
    def high(self) -> int: ...

    @property
    def mean(self) -> float: ...

    def draw(self, rng: random.Random) -> int: ...


@dataclass(frozen=True)
class ThinkTimes:
    """A think-time distribution in seconds: fixed, normal (mean:stddev) or uniform (min-max)."""

    kind: Literal["fixed", "normal", "uniform"]
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, option: str) -> ThinkTimes:
        """`2`, `2:0.5` or `1-3`; InputError naming the option otherwise."""
        m = _SECONDS.match(text)
        fix = "use 2 (fixed seconds), 2:0.5 (mean:stddev) or 1-3 (min-max)"
        if m is None:
            raise InputError(f"{option}: {text!r} is not a time in seconds ({fix})")
        a, sep, b = float(m[1]), m[2], float(m[3] or 0)
        if sep == "-" and b < a:
            raise InputError(f"{option}: {text!r} is an empty range: its minimum is above its maximum ({fix})")
        return cls("fixed", a) if sep is None else cls("normal" if sep == ":" else "uniform", a, b)

    @property
    def mean(self) -> float:
        """Its mean (the clipped normal's taken as its centre)."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    def draw(self, rng: random.Random) -> float:
        """One think time."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return min(self.a + 3 * self.b, max(0.0, self.a - 3 * self.b, rng.gauss(self.a, self.b)))

    def __str__(self) -> str:
        return {"fixed": f"{self.a:g}", "normal": f"{self.a:g}:{self.b:g}", "uniform": f"{self.a:g}-{self.b:g}"}[
            self.kind]


@dataclass
class Conversation:
    """One conversation while it runs: its number, its turns, and the history sent so far."""

    number: int  # the run's conversation `number`: its turns and think times are reproducible from the seed
    turns: int
    think_s: tuple[float, ...]  # before turns 2, 3, …: seconds after the previous reply
    messages: list[Message] = field(default_factory=list)
    turn: int = 0  # turns sent so far

    def ask(self, text: str) -> tuple[Message, ...]:
        """The next turn: the history and a new user message."""
        self.messages.append({"role": "user", "content": text})
        self.turn += 1
        return tuple(self.messages)

    def answered(self, reply: str) -> None:
        """The reply the last turn received joins the history."""
        self.messages.append({"role": "assistant", "content": reply})

    def think_before(self, turn: int) -> float:
        """Seconds between the previous reply and turn `turn` (1-based; none before the first)."""
        return self.think_s[turn - 2] if turn > 1 else 0.0

    @property
    def over(self) -> bool:
        """Whether every turn has been sent."""
        return self.turn >= self.turns


@dataclass
class Conversations:
    """Hands out conversations in order (`next()`); conversation n of a seed always has the same turns and pauses."""

    turns: Draws
    think: ThinkTimes
    seed: int = 0
    started: int = 0
    clock: Clock = REAL  # a compressed emulator's: think times pass that much faster in wall time

    def conversation(self, number: int) -> Conversation:
        """Conversation `number` of this run."""
        rng = random.Random(f"{self.seed}/conversation/{number}")
        turns = self.turns.draw(rng)
        return Conversation(number, turns, tuple(self.think.draw(rng) for _ in range(turns - 1)))

    def next(self) -> Conversation:
        """The run's next conversation."""
        number = self.started
        self.started += 1
        return self.conversation(number)

    def describe(self) -> dict[str, str]:
        """What results.json records of them."""
        return {"turns": str(self.turns), "think_time_s": str(self.think)}


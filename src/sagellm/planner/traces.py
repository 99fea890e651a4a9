"""A replayed trace as a simulated load: each request arrives at its recorded time (bench/client/trace.py reads the
files), so `plan --trace` runs the same arrivals and lengths the bench sends.

Prefix caching: a Mooncake request's `hash_ids` name its 512-token blocks, chained (an id stands for the prompt
from its start to that block's end), which is what a sequence's prefix segments `(key, tokens)` say: one segment
per block, `prefix_segments`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sagellm.planner.prefix import Segment


class _ReplayClock(Protocol):
    """The simulation's clock, as a replay uses it (simulate._ReplayClock; named here so the modules import one way)."""

    next_arrival: float | None

    def at(self, when: float, action: Callable[[], None]) -> None: ...


class _ReplayRun(Protocol):
    """A simulated run, as a replay uses it (simulate._SimulatedRun)."""

    @property
    def clock(self) -> _ReplayClock: ...

    def send(self, user: int | None = None) -> None: ...


@dataclass(frozen=True)
class SimulatedTrace:
    """Requests arriving at `arrivals_s` (simulated seconds from the first, in order), request i with the prefix
    segments `prefixes[i]` (none given: no prompt shares anything)."""

    arrivals_s: tuple[float, ...]
    prefixes: tuple[tuple[Segment, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.arrivals_s or any(b < a for a, b in itertools.pairwise(self.arrivals_s)):
            raise ValueError("a trace's arrivals must be given, in time order")


def prefix_segments(hash_ids: tuple[int, ...], input_tokens: int, block_tokens: int = 512) -> tuple[Segment, ...]:
    """A Mooncake request's prompt as prefix segments: one per block, keyed by its hash id (already a chain id:
    equal ids mean equal prompts up to there), the last one as long as the prompt leaves it."""
    out, left = [], input_tokens
    for block in hash_ids:
        n = min(block_tokens, left)
        if n <= 0:
            break
        out.append((("mooncake", block), n))
        left -= n
    return tuple(out)


def replay_trace(run: _ReplayRun, load: SimulatedTrace) -> None:
    """Schedule the trace's arrivals on the run's clock, one after another (each known in advance, so the copies
    may run ahead to it, as in the open loop)."""
    arrivals = load.arrivals_s

    def arrive(i: int) -> None:
        # Request i carries its segments `load.prefixes[i]` (simulate gives them to the run as its prefixes).
        run.send()
        if i + 1 < len(arrivals):
            schedule(i + 1)
        else:
            run.clock.next_arrival = None

    def schedule(i: int) -> None:
        run.clock.next_arrival = arrivals[i]
        run.clock.at(arrivals[i], lambda: arrive(i))

    schedule(0)

"""The bench's side of a prediction: a measured level's clients and a workload's conversations, adapted to what
results.simulated (the one prediction of a level) takes."""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Sequence

from sagellm.bench.client.workload import Workload
from sagellm.clock import REAL, Clock
from sagellm.planner.sessions import SimulatedConversations
from sagellm.results.records import RequestRecord
from sagellm.results.simulated import Offered


def arrivals(records: Sequence[RequestRecord], clock: Clock = REAL) -> list[float]:
    """When each request reached the server, in seconds on the simulated clock: the emulator's own stamp where it
    sent one (at a time scale of 0.1 a few wall milliseconds between the client and the engine are tens of
    simulated ones, enough to move a request to another prefill pass), else the client's send time. A request
    the emulator did not stamp (refused before admission) arrives its send time plus the quickest way in seen."""
    stamped = [clock.simulated_s(r.server_arrived_s) - r.start_s for r in records if r.server_arrived_s is not None]
    way_in = min(stamped, default=0.0)
    return [clock.simulated_s(r.server_arrived_s) if r.server_arrived_s is not None else r.start_s + way_in
            for r in records]


def offered(records: Sequence[RequestRecord], clock: Clock = REAL) -> Offered:
    """What a closed-loop level's clients offered, from its records (on the simulated clock; `clock` is the
    emulator's, for its arrival stamps)."""
    by_worker: dict[int, list[tuple[float, RequestRecord]]] = {}
    for at, r in sorted(zip(arrivals(records, clock), records, strict=True), key=lambda pair: pair[0]):
        by_worker.setdefault(r.worker or 0, []).append((at, r))
    zero = min((sent[0][0] for sent in by_worker.values()), default=0.0)
    starts = tuple(sent[0][0] - zero for _, sent in sorted(by_worker.items()))
    think = tuple(tuple(max(0.0, b - a - r.e2e_s) for (a, r), (b, _) in itertools.pairwise(sent))
                  for _, sent in sorted(by_worker.items()))
    warmup = sum(r.warmup for r in records)
    return Offered(starts, think, warmup, len(records) - warmup)


def talks_of(workload: Workload) -> SimulatedConversations | None:
    """A workload's conversations as the simulation takes them (its turns, lengths and think times, drawn per
    conversation and turn from its seed); None for single requests."""
    conversations = workload.conversations
    if conversations is None:
        return None
    talk = functools.lru_cache(maxsize=4096)(conversations.conversation)
    seed = workload.options.seed

    def sizes(conversation: int, turn: int) -> tuple[int, int]:
        rng = random.Random(f"{seed}/conversation/{conversation}/{turn}")
        return workload.inputs.draw(rng), workload.outputs.draw(rng)

    return SimulatedConversations(turns=lambda n: talk(n).turns, sizes=sizes,
                                  think_s=lambda n, turn: talk(n).think_before(turn),
                                  shared_prefix=workload.options.shared_prefix)

"""A level predicted from simulated requests: the plan's endpoint run by the model of the server (planner.simulate)
on a virtual clock at a load, its requests summarised as a measured level is (results.summary: same percentiles,
same token counting). `plan`, `recommend` and the bench's predicted levels all call it.

One account of the server for `plan`'s curve, the bench's predicted levels and `recommend`: the steady-state
mean model (planner.predict_point) only prunes, saying which levels the server refuses (429) or cannot finish
inside the invocation timeout.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from sagellm.clock import REAL, Clock
from sagellm.planner import Curve, Payload, Point, Shape, StepModel, curve_of, predict_point
from sagellm.planner.prefix import Prefix, Segment
from sagellm.planner.sessions import SimulatedConversations, simulate_conversations
from sagellm.planner.simulate import (
    SimulatedClosedLoop,
    SimulatedOpenLoop,
    SimulatedRequest,
    Simulation,
    simulate,
)
from sagellm.planner.traces import SimulatedTrace
from sagellm.profiles.plan import DeploymentPlan, routing_of, served
from sagellm.results.records import RequestRecord
from sagellm.results.schema import ErrorKind, LevelSummary, RequestSlo
from sagellm.results.summary import goodput_of, summarize, tokens_in_window

# Measured requests per simulated level: p90 rests on the 60 slowest, and a whole catalog takes seconds.
SIMULATED_REQUESTS = 600
# A closed loop of real clients, where none was measured (`plan`, `recommend`): the bench's own clients against the
# emulator on loopback, wall seconds, as the emulator stamped them. TURNAROUND: from a reply's last token to the same
# client's next request at the server, deciles, at concurrency 1 (the emulator on its schedule: above it, on a busy
# machine, its own lag in writing replies joins in); START_GAP: between successive clients' first requests of a
# level, median. Printed by benchmarks/plan_vs_emulator.py (max-throughput and autoscale × phi3-mini-4k and
# falcon-7b, time scale 0.2, 2 shared cores at a load average of about 8, 2026-11-27).
CLIENT_TURNAROUND_S = (0.0059, 0.0073, 0.0075, 0.0088, 0.0116, 0.0151, 0.0162, 0.0194, 0.0386)
CLIENT_START_GAP_S = 0.0002
_TURNS = 16  # turnarounds each modelled client cycles through

Sizes = Callable[[int], tuple[int, int]]  # request index → (input tokens, output tokens)
Prefixes = Callable[[int], Prefix]  # request index → its prompt's shared segments (planner/prefix.py)


def record_of(req: SimulatedRequest, concurrency: int | None, request_rate: float | None) -> RequestRecord:
    """A simulated request as the bench records one (times in seconds since the run started). The simulator
    stamps the first and last token; the tokens between are spread evenly (what ITL and throughput read)."""
    ok = req.ok and req.first_token_s is not None
    first = req.first_token_s if req.first_token_s is not None else req.arrived_s
    n = req.output_tokens if ok else 0
    gap = (req.end_s - first) / (n - 1) if n > 1 else 0.0
    return RequestRecord(
        concurrency=concurrency, request_rate=request_rate, worker=req.user, start_s=req.arrived_s,
        ok=ok, e2e_s=req.end_s - req.arrived_s, output_tokens=n, input_tokens=req.input_tokens,
        input_tokens_by="server", ttft_s=first - req.arrived_s if ok else None, token_gaps_s=[gap] * (n - 1),
        status=req.status, error_kind=cast(ErrorKind, req.error), warmup=not req.measured,
        late_s=0.0 if request_rate is not None else None, conversation=req.conversation, turn=req.turn)


def summary_of(sim: Simulation, concurrency: int | None, request_rate: float | None,
               slo: RequestSlo | None = None) -> LevelSummary:
    """The measured requests' summary; throughput (and goodput) counts every request's tokens inside the window
    (the warm-up's and the tail's too: they are the load the window saw)."""
    records = [record_of(r, concurrency, request_rate) for r in sim.requests]
    start, end = sim.window_start_s, sim.window_end_s
    if end <= start and records:  # shorter than its ramp (one request): the whole level, as the bench measures it
        start, end = min(r.start_s for r in records), max(r.start_s + r.e2e_s for r in records)
    summary = summarize(records, window_start_s=start, window_end_s=end, slo=slo)
    tokens = tokens_in_window([r for r in records if r.ok], start, end)  # it reads no warm-up flag: all of them
    ok = [r for r in records if r.ok and not r.warmup]
    mean_tokens = sum(r.output_tokens for r in ok) / len(ok) if ok else 0
    return summary.model_copy(update={
        "output_tokens": tokens, "throughput_tokens_per_s": tokens / (end - start),
        "requests_per_s": tokens / mean_tokens / (end - start) if mean_tokens else 0.0,
        "goodput": goodput_of([(records, start, end)], slo, warmup_tokens=True) if slo is not None else None})


@dataclass(frozen=True)
class Offered:
    """How a measured closed loop's clients sent: when each first sent after the level began, the gaps between
    a reply's end and the same client's next request, and the warm-up and measured requests (the load the
    endpoint saw, which a prediction of that level replays)."""

    starts_s: tuple[float, ...]
    think_s: tuple[tuple[float, ...], ...]  # per client, in the order it sent
    warmup: int
    requests: int


def modelled_clients(users: int, clock: Clock = REAL, seed: int = 0) -> SimulatedClosedLoop:
    """`users` clients as the bench's behave, seeded: each first sends a start gap after the one before, then
    again a turnaround after each reply (drawn between the measured deciles), so requests do not arrive in lockstep;
    `clock` puts those wall seconds on an emulator's clock."""
    starts = tuple(clock.simulated_s(u * CLIENT_START_GAP_S) for u in range(users))
    return SimulatedClosedLoop(users, starts, _turnarounds(users, clock, seed))


# Per (clock, seed): the stream the modelled clients' turnarounds are drawn from, and those drawn so far, client by
# client. A level's clients are the first of a larger level's (the same draws in the same order), so `plan`'s ten
# levels draw the 512 clients' once rather than 1,023 clients' (about 16,000 draws).
_DRAWN: dict[tuple[Clock, int], tuple[random.Random, list[tuple[float, ...]]]] = {}


def _turnarounds(users: int, clock: Clock, seed: int) -> tuple[tuple[float, ...], ...]:
    """The first `users` modelled clients' turnarounds, each client's `_TURNS` drawn in turn from one seeded stream."""
    rng, drawn = _DRAWN.setdefault((clock, seed), (random.Random(seed), []))

    def turnaround() -> float:
        # Between the measured deciles, linearly: two replies that end together rarely send again together.
        at = rng.uniform(0, len(CLIENT_TURNAROUND_S) - 1)
        low, high = CLIENT_TURNAROUND_S[int(at)], CLIENT_TURNAROUND_S[min(int(at) + 1, len(CLIENT_TURNAROUND_S) - 1)]
        return clock.simulated_s(low + (high - low) * (at - int(at)))

    drawn.extend(tuple(turnaround() for _ in range(_TURNS)) for _ in range(len(drawn), users))
    return tuple(drawn[:users])


def simulated_level(plan: DeploymentPlan, steps: StepModel, payload: Payload, *, concurrency: int | None = None,
                    request_rate: float | None = None, sizes: Sizes | None = None,
                    requests: int = SIMULATED_REQUESTS, offered: Offered | None = None,
                    clock: Clock = REAL, seed: int = 0, warmup: int | None = None,
                    slo: RequestSlo | None = None, prefixes: Prefixes | None = None) -> LevelSummary:
    """The summary of the plan's endpoint at a concurrency (closed loop) or a request rate (open loop, Poisson),
    every request of `payload`'s size unless `sizes` draws each one's (the bench's workload); `offered` replays
    how a measured closed loop's clients sent (its starts, gaps and request counts), else the clients are
    modelled (their turnaround on an emulator's `clock`, drawn with `seed`) after `warmup`
    requests (None: the simulator's); `slo` adds the requests' SLO attainment and goodput; `prefixes` gives each
    request's shared prefix (the bench's --shared-prefix/--prefixes), routed as the plan's endpoint routes."""
    load: SimulatedOpenLoop | SimulatedClosedLoop = (
        SimulatedOpenLoop(request_rate) if request_rate is not None else
        SimulatedClosedLoop(concurrency or 1, offered.starts_s, offered.think_s) if offered is not None else
        modelled_clients(concurrency or 1, clock, seed))
    sim = simulate(served(plan, steps), payload.input_tokens, payload.output_tokens, load, sizes=sizes,
                   requests=offered.requests if offered is not None else requests,
                   warmup=offered.warmup if offered is not None else warmup, prefixes=prefixes,
                   routing=routing_of(plan))
    return summary_of(sim, concurrency, request_rate, slo)


def simulated_trace(plan: DeploymentPlan, steps: StepModel, payload: Payload, arrivals_s: Sequence[float],
                    sizes: Sizes, request_rate: float, *, warmup: int = 0, prefixes: tuple[tuple[Segment, ...], ...] = (),
                    slo: RequestSlo | None = None) -> tuple[Simulation, LevelSummary]:
    """The plan's endpoint replaying a trace: request i arrives at `arrivals_s[i]` with `sizes(i)` tokens and the
    prompt segments `prefixes[i]` (a trace workload's), the first `warmup` warming up; the simulation and its
    summary, a level named `request_rate`."""
    sim = simulate(served(plan, steps), payload.input_tokens, payload.output_tokens,
                   SimulatedTrace(tuple(arrivals_s), prefixes), sizes=sizes, warmup=warmup)
    return sim, summary_of(sim, None, request_rate, slo)


def point_of(summary: LevelSummary, pruned: Point) -> Point:
    """A curve's point from a simulated level (p50 figures, p90 beside them); the mean model's point keeps what
    it prunes on (refused above the admission limit, past the invocation timeout)."""
    return replace(
        pruned, ms_per_token=summary.latency_ms_per_token.p50 or 0.0, ttft_ms=summary.ttft_ms.p50 or 0.0,
        itl_ms=summary.itl_ms.p50 or 0.0, e2e_s=summary.e2e_s.p50 or 0.0,
        throughput_tokens_per_s=summary.throughput_tokens_per_s, requests_per_s=summary.requests_per_s,
        ms_per_token_p90=summary.latency_ms_per_token.p90, ttft_ms_p90=summary.ttft_ms.p90)


def predicted_level(plan: DeploymentPlan, shape: Shape, payload: Payload, concurrency: int, *,
                    sizes: Sizes | None = None, requests: int = SIMULATED_REQUESTS, offered: Offered | None = None,
                    clock: Clock = REAL, slo: RequestSlo | None = None, prefixes: Prefixes | None = None
                    ) -> tuple[Point, LevelSummary | None]:
    """One closed-loop level: its point and the simulated requests' summary, unless the mean model prunes it
    (refused: nothing to simulate, no summary)."""
    pruned = predict_point(shape, payload, concurrency)
    if pruned.rejected:
        return pruned, None
    summary = simulated_level(plan, StepModel(shape), payload, concurrency=concurrency, sizes=sizes,
                              requests=requests, offered=offered, clock=clock, slo=slo,
                              prefixes=prefixes)
    # No simulated request finished inside the invocation timeout: the mean model's figures, marked past it.
    return (point_of(summary, pruned) if summary.ok else replace(pruned, within_timeout=False)), summary


def predicted_point(plan: DeploymentPlan, shape: Shape, payload: Payload, concurrency: int, *,
                    sizes: Sizes | None = None, requests: int = SIMULATED_REQUESTS,
                    offered: Offered | None = None, clock: Clock = REAL, prefixes: Prefixes | None = None
                    ) -> Point:
    """One closed-loop level's point: simulated, unless the mean model prunes it (refused: nothing to simulate)."""
    return predicted_level(plan, shape, payload, concurrency, sizes=sizes, requests=requests, offered=offered,
                           clock=clock, prefixes=prefixes)[0]


def simulated_curve(plan: DeploymentPlan, shape: Shape, payload: Payload, concurrency: Sequence[int],
                    region: str, sizes: Sizes | None = None, prefixes: Prefixes | None = None) -> Curve:
    """`plan`'s curve: every level from simulated requests (of `payload`'s size, or each drawn by `sizes`), the
    knee and cost read off them."""
    points = tuple(predicted_point(plan, shape, payload, c, sizes=sizes, prefixes=prefixes) for c in concurrency)
    curve = curve_of(shape, payload, points, region)
    how = (f"each level from {SIMULATED_REQUESTS} simulated requests (the emulator's engine on a virtual clock); "
           "p50 figures, p90 in --json")
    return replace(curve, notes=(how, *curve.notes))


def conversation_level(plan: DeploymentPlan, shape: Shape, payload: Payload, concurrency: int,
                       talks: SimulatedConversations, *, requests: int = SIMULATED_REQUESTS,
                       slo: RequestSlo | None = None) -> tuple[Point, LevelSummary | None]:
    """One closed-loop level of conversations (`concurrency` users, each talking one at a time): its point and the
    simulated turns' summary, unless the mean model prunes it at the mean turn (refused: no summary)."""
    pruned = predict_point(shape, payload, concurrency)
    if pruned.rejected:
        return pruned, None
    sim = simulate_conversations(served(plan, StepModel(shape)), SimulatedClosedLoop(concurrency), talks,
                                 requests=requests)
    summary = summary_of(sim, concurrency, None, slo)
    return (point_of(summary, pruned) if summary.ok else replace(pruned, within_timeout=False)), summary


def conversation_curve(plan: DeploymentPlan, shape: Shape, payload: Payload, concurrency: Sequence[int],
                       region: str, talks: SimulatedConversations) -> tuple[Curve, dict[int, LevelSummary]]:
    """`plan`'s curve under conversations (`planner.sessions`): each level's users talk one conversation at a time,
    its point from the simulated turns; with each simulated level's summary (its `by_turn`)."""
    points, summaries = [], {}
    for c in concurrency:
        point, summary = conversation_level(plan, shape, payload, c, talks)
        points.append(point)
        if summary is not None:
            summaries[c] = summary
    curve = curve_of(shape, payload, tuple(points), region)
    how = (f"conversations: each level from {SIMULATED_REQUESTS} simulated turns, each re-sending its history "
           "(which a vLLM or SGLang copy serves from its prefix cache); p50 figures, p90 and by-turn TTFT in --json")
    return replace(curve, notes=(how, *curve.notes)), summaries

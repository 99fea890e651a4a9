"""The emulator's engine on a virtual clock: a discrete-event simulation of an endpoint under load, in process.

The copies are the emulator's (`batching.CopyScheduler`, routed by `batching.Router`: same budgets, same
prefill-then-decode turns, same 429 and 422 answers); only the driver differs. Instead of sleeping for a
pass, the simulator moves a virtual clock to the pass's end, so a run of thousands of requests takes well
under a second and two runs with one seed are identical. A copy whose next pass ends before any other event
runs on at once (nothing could come between), decode steps are costed once per batch size (a step is
affine in the context it reads), and the turns that only decode (nothing joins, finishes or expires) run in one
tight loop (`CopyScheduler.decode_run`, up to the pass in progress at the next event), which keeps a whole-catalog search to seconds. Load is open loop (Poisson arrivals at a rate)
or closed loop (users who send again as soon as a reply ends, as the bench's workers do), or a fixed set of prompts
sent through at most so many in flight (`vllm bench serve --num-prompts N --max-concurrency c`; a burst when all are
sent at once), or a replayed trace (`traces`: each request at its recorded time). The first
requests warm the endpoint up and are marked so; then `requests` are measured, and arrivals go on until
every measured one has ended so that the tail sees the same load as the rest.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import cast

from sagellm.engines import Limits
from sagellm.planner.batching import TIMED_OUT, CopyScheduler, RequestError, Router, Sequence
from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.planner.prefix import Prefix, Routing
from sagellm.planner.steps import StepModel
from sagellm.planner.traces import SimulatedTrace, replay_trace

DEFAULT_REQUESTS = 1000  # measured requests: p99 then rests on the ten slowest
DEFAULT_WARMUP = 100  # open loop; a closed loop warms up on two requests per user (at least this many)
_PROBE = 1 << 20  # context tokens at which a decode step's slope is read (large: a precise difference)


@dataclass(frozen=True)
class Served:
    """One model behind an endpoint, as the simulation needs it: its copies' step model, the limits their server
    reads, how its engine schedules (batching.SCHEDULERS) and how many copies serve it."""

    steps: StepModel
    limits: Limits
    scheduling: str
    copies: int


@dataclass(frozen=True)
class SimulatedOpenLoop:
    """Poisson arrivals at `rate` requests per second."""

    rate: float


@dataclass(frozen=True)
class SimulatedClosedLoop:
    """`users` clients, each sending its next request as soon as its last one ends; or, where a measured closed
    loop is replayed, client u first sends at `starts_s[u]` and waits its own gaps `think_s[u]` after its replies,
    in turn (cycling), as the bench's clients did."""

    users: int
    starts_s: tuple[float, ...] = ()
    think_s: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class SimulatedPromptSet:
    """`prompts` requests and no more, at most `max_concurrency` in flight (None: all sent at once, a burst): a
    client with a semaphore, as `vllm bench serve --num-prompts --max-concurrency` at request rate inf. Every
    request is measured; none warms up."""

    prompts: int
    max_concurrency: int | None = None
    think_s: float = 0.0  # a slot's gap between a reply's end and its next request (a front end's per-request cost)


@dataclass
class SimulatedRequest:
    """What one request did, in simulated seconds since the run started."""

    arrived_s: float
    input_tokens: int
    output_tokens: int = 0  # generated
    first_token_s: float | None = None
    last_token_s: float | None = None
    error: str | None = None  # overloaded (429) | validation (422) | timeout (the invocation's deadline)
    status: int = 200
    warmup: bool = False
    measured: bool = False  # one of the `requests` the run is about (not a warm-up, not a tail filler)
    user: int | None = None  # closed loop: which client sent it
    conversation: int | None = None  # conversations (`sessions`): which one sent it, as which turn (1-based)
    turn: int | None = None
    cached_tokens: int = 0  # prompt tokens its copy's prefix cache served (vLLM, SGLang)

    @property
    def ok(self) -> bool:
        """Whether it ended with every token it asked for."""
        return self.error is None

    @property
    def end_s(self) -> float:
        """When its reply ended: the last token, or the arrival for a refusal."""
        return self.last_token_s if self.last_token_s is not None else self.arrived_s


@dataclass
class Simulation:
    """Every simulated request, and the window the measured requests arrived in."""

    requests: list[SimulatedRequest]
    window_start_s: float
    window_end_s: float

    @property
    def measured(self) -> list[SimulatedRequest]:
        """The requests the run is about."""
        return [r for r in self.requests if r.measured]


class _Clock:
    """Events in time order (ties in the order they were scheduled)."""

    def __init__(self) -> None:
        self.now = 0.0
        # Open loop: when the next request arrives (known in advance). Copies interact only through the
        # router, at arrivals, so until then each one may run ahead of the others.
        self.next_arrival: float | None = None
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def horizon(self) -> float:
        """How far a copy may run on alone: to the next arrival where arrivals are known (open loop), else
        to the next event (a closed loop's next request leaves when some reply ends)."""
        if self.next_arrival is not None:
            return self.next_arrival
        return self._events[0][0] if self._events else math.inf

    def run(self, done: Callable[[], bool]) -> None:
        while self._events and not done():
            self.now, _, action = heapq.heappop(self._events)
            action()


@dataclass(frozen=True)
class _AffineSteps(StepModel):
    """A step model (`base`: the physics', or one measured on a real server) whose decode step is costed once per
    batch size (it is affine in the context held), and each prefill pass once per size (a run's prompts are mostly
    of one length)."""

    base: StepModel = field(compare=False)
    lines: dict[int, tuple[float, float]] = field(default_factory=dict, compare=False)  # batch → (s, s per token)
    prefills: dict[tuple[int, int], float] = field(default_factory=dict, compare=False)  # (tokens, prompts) → s

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        """One prefill pass, worked out once per size (the same value: a pure function of the two); chunks after
        earlier tokens of their prompts as the base model costs them."""
        if prior_pairs:
            return self.base.prefill_s(tokens, sequences, prior_pairs)
        key = (tokens, sequences)
        if key not in self.prefills:
            self.prefills[key] = self.base.prefill_s(tokens, sequences)
        return self.prefills[key]

    def decode_floor_s(self) -> float:
        """The base model's batch-independent part of a decode step."""
        return self.base.decode_floor_s()

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        """A mixed pass as the base model costs it; one with no prompt is a decode step (from its line, as a run of
        decode steps costs it), one of whole prompts alone a prefill pass (costed once per size)."""
        if prompt_tokens <= 0:
            return self.decode_step_s(batch, context_tokens)
        if batch <= 0 and not prior_pairs:
            return self.prefill_s(prompt_tokens, prompts)
        return self.base.mixed_step_s(prompt_tokens, prompts, batch, context_tokens, prior_pairs)

    def line(self, batch: int) -> tuple[float, float]:
        """A decode step of `batch` sequences: (seconds, seconds per context token), worked out once."""
        line = self.lines.get(batch)
        if line is None:
            base = self.base
            at_zero = base.decode_step_s(batch, 0)
            line = self.lines[batch] = (at_zero, (base.decode_step_s(batch, _PROBE) - at_zero) / _PROBE)
        return line

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """One decode step, from the batch size's intercept and slope."""
        base_s, per_token_s = self.line(batch)
        return base_s + per_token_s * context_tokens


class _Endpoint:
    """The router and its copies driven on the virtual clock: each copy takes turns while it has work."""

    def __init__(self, router: Router[CopyScheduler], clock: _Clock, steps: _AffineSteps | None, front_end_s: float):
        self.router = router
        self.clock = clock
        self.steps = steps
        # Each request spends this long in the server's front end (HTTP, chat template, tokenising, the hand-over to
        # the engine core) before the scheduler sees it (its step constants' request_latency_s).
        self.front_end_s = front_end_s
        self._turns: dict[int, Iterator[float]] = {}  # copy index → its turn in progress
        self._index = {id(c): i for i, c in enumerate(router.copies)}

    def send(self, input_tokens: int, output_tokens: int, deadline_s: float | None, prefix: Prefix = 0) -> Sequence:
        """Admit a request now (RequestError as the server refuses it) and wake its copy if idle."""
        copy, seq = self.router.submit(input_tokens, output_tokens, deadline_s, self.clock.now, prefix)
        index = self._index[id(copy)]
        if index not in self._turns:  # an idle copy starts a turn now, once the caller has the sequence
            self._turns[index] = copy.turn()
            self.clock.at(self.clock.now, lambda: self._resume(index))
        return seq

    def next_pass_end(self) -> float:
        """When the soonest pass in progress ends (now, if no copy is busy)."""
        return min((self.router.copies[i].sim_s for i in self._turns), default=self.clock.now)

    def _resume(self, index: int) -> None:
        """Go on with a copy's turns until its next pass ends past the horizon."""
        copy = self.router.copies[index]
        turn = self._turns[index]
        while True:
            if next(turn, None) is None:  # the turn is over: stamped and ended what it had to
                if not (copy.queue or copy.running):
                    del self._turns[index]
                    return
                horizon = self.clock.horizon()
                if self.steps and copy.decode_run(horizon, self.steps.line):  # decode-only turns at once
                    if copy.sim_s > horizon:  # the last one is in progress at the next event: resume at its end
                        self._turns[index] = iter(())
                        self.clock.at(copy.sim_s, lambda: self._resume(index))
                        return
                    self.clock.now = copy.sim_s
                turn = self._turns[index] = copy.turn()
                continue
            if copy.sim_s > self.clock.horizon():
                self.clock.at(copy.sim_s, lambda: self._resume(index))
                return
            self.clock.now = copy.sim_s  # nothing is due before this pass ends: run on


class _SimulatedRun:
    """One simulated run: who sends what when, and what happened to each request."""

    def __init__(self, endpoint_of: Callable[[_Clock], _Endpoint], sizes: Callable[[int], tuple[int, int]],
                 requests: int, warmup: int, timeout_s: float | None):
        self.clock = _Clock()
        self.endpoint = endpoint_of(self.clock)
        # A request was sent its front end's latency before it reaches the engine, and a client that sends again as
        # a reply ends reaches the engine that long after. No pass waits for it.
        self.front_end_s = self.endpoint.front_end_s
        for copy in self.endpoint.router.copies:
            copy.on_end = self._ended
        self.sizes = sizes
        self.requests, self.warmup, self.timeout_s = requests, warmup, timeout_s
        self.sent: list[SimulatedRequest] = []
        self._of: dict[Sequence, SimulatedRequest] = {}  # in flight
        self.measured_left = requests
        self.on_end: Callable[[SimulatedRequest], None] = lambda _: None
        self.prefix = 0  # every request opens with this many tokens shared by all (a prefix cache can hold them)
        self.prefixes: Callable[[int], Prefix] | None = None  # request i's prompt segments, where they vary

    def send(self, user: int | None = None) -> None:
        """A request arrives now."""
        n = len(self.sent)
        input_tokens, output_tokens = self.sizes(n)
        req = SimulatedRequest(self.clock.now - self.front_end_s, input_tokens, warmup=n < self.warmup,
                               measured=self.warmup <= n < self.warmup + self.requests, user=user)
        self.sent.append(req)
        deadline = req.arrived_s + self.timeout_s if self.timeout_s is not None else None
        try:
            prefix = self.prefixes(n) if self.prefixes is not None else min(self.prefix, input_tokens)
            seq = self.endpoint.send(input_tokens, output_tokens, deadline, prefix)
        except RequestError as exc:
            req.error, req.status = exc.error_type, exc.status
            self._end(req)
            return
        self._of[seq] = req

    def _ended(self, seq: Sequence) -> None:
        req = self._of.pop(seq)
        req.output_tokens, req.first_token_s, req.last_token_s = seq.generated, seq.first_token_s, seq.last_token_s
        req.cached_tokens = seq.cached_tokens
        if seq.state == TIMED_OUT:
            req.error, req.status = "timeout", 424  # SageMaker's ModelError for a model past its 60 s
        self._end(req)

    def _end(self, req: SimulatedRequest) -> None:
        if req.measured:
            self.measured_left -= 1
        self.on_end(req)

    def result(self) -> Simulation:
        measured = [r for r in self.sent if r.measured]
        return Simulation(self.sent, measured[0].arrived_s, measured[-1].arrived_s)


Load = SimulatedOpenLoop | SimulatedClosedLoop | SimulatedPromptSet | SimulatedTrace


def simulate(served: Served, input_tokens: int, output_tokens: int, load: Load, *,
             requests: int = DEFAULT_REQUESTS, warmup: int | None = None, seed: int = 0,
             timeout_s: float | None = INVOCATION_TIMEOUT_S,
             sizes: Callable[[int], tuple[int, int]] | None = None, every_pass: bool = False,
             prefix_tokens: int = 0, prefixes: Callable[[int], Prefix] | None = None,
             routing: Routing | None = None) -> Simulation:
    """Run a served model (its copies, the limits its server reads, its engine's scheduling) under a load on a
    virtual clock; `sizes` gives request i's (input, output) tokens where they vary (a bench's workload);
    `every_pass`: each pass asks the step model itself, one by one (a study that records the passes), where a run
    otherwise costs decode steps from a line per batch size and runs decode-only turns at once; `prefix_tokens`:
    every prompt opens with that many tokens shared by all (what the engines' prefix caches serve); `prefixes`
    gives request i's prompt segments instead (planner/prefix.py); `routing`: how the endpoint picks a copy (least
    outstanding requests by default)."""
    endpoint_of = endpoint_maker(served, every_pass, routing)
    size_of = sizes or (lambda _: (input_tokens, output_tokens))
    if isinstance(load, SimulatedTrace):  # every request of the trace; the first `warmup` (default none) warm up
        skip = warmup or 0
        run = _SimulatedRun(endpoint_of, size_of, len(load.arrivals_s) - skip, skip, timeout_s)
        replay_trace(run, load)
    elif isinstance(load, SimulatedPromptSet):
        run = _SimulatedRun(endpoint_of, size_of, load.prompts, 0, timeout_s)
        _prompt_set(run, load)
    elif isinstance(load, SimulatedOpenLoop):
        run = _SimulatedRun(endpoint_of, size_of, requests, DEFAULT_WARMUP if warmup is None else warmup, timeout_s)
        _open_loop(run, load.rate, random.Random(seed))
    else:
        run = _SimulatedRun(endpoint_of, size_of, requests,
                            max(DEFAULT_WARMUP, 2 * load.users) if warmup is None else warmup, timeout_s)
        _closed_loop(run, load)
    if prefixes is None and isinstance(load, SimulatedTrace) and load.prefixes:
        prefixes = load.prefixes.__getitem__  # a Mooncake trace's blocks, shared where their ids are
    run.prefix, run.prefixes = prefix_tokens, prefixes
    run.clock.run(lambda: run.measured_left == 0)
    return run.result()


def endpoint_maker(served: Served, every_pass: bool = False,
                   routing: Routing | None = None) -> Callable[[_Clock], _Endpoint]:
    """What builds a run's endpoint on its clock: the served model's copies behind its router (see `simulate`)."""
    step_model = served.steps if every_pass else _AffineSteps(served.steps.shape, base=served.steps)

    def endpoint_of(clock: _Clock) -> _Endpoint:
        return _Endpoint(Router(served.limits, [CopyScheduler(step_model, served.limits, scheduling=served.scheduling)
                                                for _ in range(served.copies)], routing),
                         clock, None if every_pass else cast(_AffineSteps, step_model), served.steps.k.request_latency_s)

    return endpoint_of


def run_inputs(served: Served) -> tuple[Hashable, ...]:
    """Everything `simulate` reads of a served model: the step times' inputs, a copy's limits, how its engine
    schedules and the number of copies. Served models with equal inputs run alike under one load, sizes and seed,
    whatever their instance type or price (instance types with the same accelerators; LMI and vLLM, which schedule
    alike)."""
    return served.steps.inputs, served.limits, served.scheduling, served.copies


def _open_loop(run: _SimulatedRun, rate: float, rng: random.Random) -> None:
    def arrive() -> None:
        run.send()
        schedule(run.clock.now + rng.expovariate(rate))

    def schedule(when: float) -> None:
        run.clock.next_arrival = when
        run.clock.at(when, arrive)

    schedule(rng.expovariate(rate))


def _closed_loop(run: _SimulatedRun, load: SimulatedClosedLoop) -> None:
    replies = [0] * load.users  # per client: replies so far (which of its gaps comes next)

    def think(user: int) -> float:
        gaps = load.think_s[user] if user < len(load.think_s) else ()
        replies[user] += 1
        return gaps[(replies[user] - 1) % len(gaps)] if gaps else 0.0

    def again(req: SimulatedRequest) -> None:
        # The next request leaves as the reply ends: after the pass that ended it, like an HTTP client would.
        # A refusal takes no simulated time, so a refused client comes back once the next pass has ended
        # (sending again at once would refuse it again at the same instant, for ever).
        user = req.user
        assert user is not None  # a closed loop's requests carry their client
        when = run.clock.now if req.status != 429 else max(run.clock.now, run.endpoint.next_pass_end())
        run.clock.at(when + think(user) + run.front_end_s, lambda: run.send(user))

    run.on_end = again
    for user in range(load.users):
        run.clock.at(load.starts_s[user] if user < len(load.starts_s) else 0.0, _sender(run, user))


def _prompt_set(run: _SimulatedRun, load: SimulatedPromptSet) -> None:
    """Each of min(concurrency, prompts) slots sends at once, and again as its reply ends, until all are sent."""
    slots = load.prompts if load.max_concurrency is None else min(load.max_concurrency, load.prompts)
    left = [load.prompts - slots]  # prompts no slot has taken yet (sends scheduled for one instant count as taken)

    def again(req: SimulatedRequest) -> None:
        if left[0] > 0:
            left[0] -= 1
            user = req.user
            run.clock.at(run.clock.now + load.think_s + run.front_end_s, lambda: run.send(user))

    run.on_end = again
    for user in range(slots):
        run.clock.at(0.0, _sender(run, user))


def _sender(run: _SimulatedRun, user: int) -> Callable[[], None]:
    return lambda: run.send(user)

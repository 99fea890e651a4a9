"""Continuous batching without a clock: what one model copy does in each turn, and how requests reach a copy.

One piece of scheduling drives both the emulator (copies.py: asyncio, paced on wall time) and the
simulator (simulate.py: discrete events on a virtual clock). A copy's turn (`CopyScheduler.turn`) expires
requests past their deadline, admits queued ones into the running batch within the KV, prefill and batch
budgets, runs a prefill pass for the newly admitted then a decode step, and stamps each pass's tokens on
the copy's simulated clock. It yields each pass's modelled duration; the driver lets that time pass on its
own clock (sleeping, or moving the virtual clock) before the turn goes on. `Router` sends each request to
the least-loaded copy and answers as TGI does: 429 above the admission limit, 422 for invalid lengths.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from sagellm.catalog import find_instance
from sagellm.engines import Engine, Limits, engine_for
from sagellm.errors import InputError
from sagellm.planner import Shape, StepModel
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

if TYPE_CHECKING:
    import asyncio

QUEUED, RUNNING, DONE, TIMED_OUT, CANCELLED = "queued", "running", "done", "timed_out", "cancelled"


class RequestError(Exception):
    """A request the server refuses, as TGI answers it: HTTP status and `{"error", "error_type"}`."""

    def __init__(self, status: int, error_type: str, message: str):
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


class InvocationTimeout(Exception):
    """The request outlived its deadline (SageMaker's 60 s invocation timeout)."""


class Cancelled(Exception):
    """The emulator stopped while the request was in flight."""


class Sequence:
    """One admitted request inside a copy: how many tokens it has, and its waiter (emulator only)."""

    __slots__ = (
        "_waiter",
        "arrived_s",
        "deadline_s",
        "first_token_s",
        "generated",
        "input_tokens",
        "last_token_s",
        "max_new_tokens",
        "state",
    )

    def __init__(self, input_tokens: int, max_new_tokens: int, arrived_s: float, deadline_s: float | None):
        self.input_tokens = input_tokens
        self.max_new_tokens = max_new_tokens
        self.generated = 0
        self.state = QUEUED
        self.arrived_s = arrived_s  # when the request arrived, on the copy's clock (the driver's, less its lag)
        self.first_token_s: float | None = None  # on the copy's simulated clock
        self.last_token_s: float | None = None
        self.deadline_s = deadline_s  # on the copy's clock, or None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def reserved_tokens(self) -> int:
        """KV tokens the sequence holds a claim on while it runs."""
        return self.input_tokens + self.max_new_tokens

    @property
    def active(self) -> bool:
        """Whether it is still queued or running."""
        return self.state in (QUEUED, RUNNING)

    async def progress(self) -> AsyncIterator[int]:
        """Yield the number of tokens generated so far, each time it grows, until the sequence ends."""
        seen = 0
        while True:
            if self.generated > seen:
                seen = self.generated
                yield seen
                continue
            if self.state == DONE:
                return
            if self.state == TIMED_OUT:
                raise InvocationTimeout()
            if self.state == CANCELLED:
                raise Cancelled()
            import asyncio  # here: the simulator (plan, recommend) runs these copies without an event loop

            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    def wake(self) -> None:
        """Tell a waiting reader that the sequence moved on (nothing to do without one)."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)


class CopyScheduler:
    """One model copy without a clock of its own: a queue, a running batch within the budgets, its turns."""

    def __init__(self, steps: StepModel, limits: Limits, time_scale: float = 1.0):
        self.steps = steps
        self.limits = limits
        self.time_scale = time_scale  # simulated seconds per modelled second (the emulator runs faster)
        self.queue: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_reserved = 0
        self.context = 0  # KV tokens the running sequences hold (prompts and tokens generated so far)
        self.completed = 0
        self.timed_out = 0
        self.cancelled = 0
        self.busy_s = 0.0  # modelled seconds spent in prefill or decode passes (the GPU busy)
        self.sim_s = 0.0  # the simulated clock: when the current pass ends
        self.on_end: Callable[[Sequence], None] | None = None  # told of every sequence that ends
        self._next_deadline = math.inf  # no sequence expires before this (a lower bound)

    @property
    def in_flight(self) -> int:
        """Requests queued or running (what TGI's admission limit counts)."""
        return len(self.queue) + len(self.running)

    def submit(self, seq: Sequence) -> None:
        """Queue an admitted request; a turn prefills it as soon as the budgets allow."""
        self.queue.append(seq)
        if seq.deadline_s is not None:
            self._next_deadline = min(self._next_deadline, seq.deadline_s)

    def cancel(self, seq: Sequence) -> None:
        """The client went away (or the invocation timed out): free the sequence's slot and KV at once."""
        if seq.active:
            self.retire(seq, CANCELLED)

    def retire(self, seq: Sequence, state: str) -> None:
        """End a sequence (done, timed out or cancelled), freeing what it held."""
        if seq.state == QUEUED:
            self.queue.remove(seq)
        elif seq.state == RUNNING:
            self.running.remove(seq)
            self.kv_reserved -= seq.reserved_tokens
            self.context -= seq.input_tokens + seq.generated
        seq.state = state
        if state == DONE:
            self.completed += 1
        elif state == TIMED_OUT:
            self.timed_out += 1
        else:
            self.cancelled += 1
        seq.wake()
        if self.on_end is not None:
            self.on_end(seq)

    def turn(self) -> Iterator[float]:
        """One turn from the copy's clock: expire, admit, prefill the admitted, one decode step; yields each
        pass's modelled seconds (the driver lets them pass) and stamps its tokens once the driver resumes it."""
        if self.queue and not self.running:  # an idle copy starts on the first arrival
            self.sim_s = max(self.sim_s, self.queue[0].arrived_s)
        self.expire(self.sim_s)
        batch = self.admit()
        if batch:
            # A prefill pass for the newly admitted requests; decoding of the others pauses meanwhile. Each prompt
            # attends to itself only: the pass's attention grows with each prompt's length, not with their sum.
            yield self._advance(self.steps.prefill_s(sum(s.input_tokens for s in batch), len(batch)))
            self.emit([s for s in batch if s.state == RUNNING])
        if self.running:
            yield self._advance(self.steps.decode_step_s(len(self.running), self.context))
            self.emit(self.running)

    def decode_run(self, until_s: float, line: Callable[[int], tuple[float, float]]) -> int:
        """Between turns, run now, back to back, the turns to come that would only decode and end by `until_s` on
        the copy's clock (the simulator's next arrival or event): turns in which no sequence finishes or expires and
        no queued one can join. A decode step of `batch` sequences costs `line(batch)` = (s, s per context token),
        as the simulator's step model costs it; each turn is costed and stamped as `turn` would (the same additions
        in the same order, so the clocks read the same to the last bit). Returns how many ran. The simulator's:
        nothing waits on a token there, and one generator turn per decode step was most of a whole-catalog
        `recommend`."""
        running = self.running  # between turns: each has its first token (the prefill pass's)
        if not running or not self._blocked():
            return 0
        last = min(s.max_new_tokens - s.generated for s in running) - 1  # the turn that finishes one is turn's
        n, scale, deadline_s = len(running), self.time_scale, self._next_deadline
        base_s, per_token_s = line(n)
        sim_s, busy_s, context, done = self.sim_s, self.busy_s, self.context, 0
        for _ in range(last):
            if sim_s >= deadline_s:  # the turn would expire a sequence first
                break
            step_s = base_s + per_token_s * context
            end_s = sim_s + step_s * scale
            if end_s > until_s:
                break
            sim_s = end_s
            busy_s += step_s
            context += n
            done += 1
        if done:
            self.sim_s, self.busy_s, self.context = sim_s, busy_s, context
            for seq in running:
                seq.generated += done
                seq.last_token_s = sim_s
        return done

    def _blocked(self) -> bool:
        """No queued request can join the batch until a running one leaves: the queue is empty, or its head has
        arrived and does not fit the KV, prefill or batch budget (only a leaving sequence frees them)."""
        if not self.queue:
            return True
        head, lim = self.queue[0], self.limits
        if head.arrived_s > self.sim_s:
            return False  # it may arrive (on this clock) within the run
        return (self.kv_reserved + head.reserved_tokens > lim.max_batch_total_tokens
                or head.input_tokens > lim.max_batch_prefill_tokens
                or (lim.max_batch_size is not None and len(self.running) >= lim.max_batch_size))

    def _advance(self, modelled_s: float) -> float:
        self.busy_s += modelled_s
        self.sim_s += modelled_s * self.time_scale
        return modelled_s

    def admit(self) -> list[Sequence]:
        """Move queued requests (in order) into the batch while the KV, prefill and batch budgets allow; only
        those that arrived by now on the copy's clock (a driver that resumes late has seen later ones)."""
        lim = self.limits
        batch: list[Sequence] = []
        prefill = 0
        while self.queue and self.queue[0].arrived_s <= self.sim_s:
            seq = self.queue[0]
            fits_kv = self.kv_reserved + seq.reserved_tokens <= lim.max_batch_total_tokens
            fits_prefill = prefill + seq.input_tokens <= lim.max_batch_prefill_tokens
            fits_batch = lim.max_batch_size is None or len(self.running) < lim.max_batch_size
            # A request larger than an empty copy's budgets still runs alone rather than wait forever.
            alone = not self.running and not batch
            if not alone and not (fits_kv and fits_prefill and fits_batch):
                break
            self.queue.popleft()
            seq.state = RUNNING
            self.running.append(seq)
            self.kv_reserved += seq.reserved_tokens
            self.context += seq.input_tokens
            prefill += seq.input_tokens
            batch.append(seq)
        return batch

    def emit(self, seqs: list[Sequence]) -> None:
        """One token for each of `seqs` at the simulated end of the pass; finished ones leave the batch."""
        now = self.sim_s
        finished = []
        self.context += len(seqs)
        for seq in seqs:
            seq.generated += 1
            if seq.first_token_s is None:
                seq.first_token_s = now
            seq.last_token_s = now
            if seq.generated >= seq.max_new_tokens:
                finished.append(seq)
            elif seq._waiter is not None:  # a reader waits (the emulator); checked here, as this runs per token
                seq.wake()
        for seq in finished:
            self.retire(seq, DONE)

    def expire(self, now: float) -> None:
        """Retire every sequence whose deadline has passed at `now` on the copy's clock."""
        if now < self._next_deadline:
            return
        held = (*self.queue, *self.running)
        for seq in [s for s in held if s.deadline_s is not None and now >= s.deadline_s]:
            self.retire(seq, TIMED_OUT)
        self._next_deadline = min((s.deadline_s for s in (*self.queue, *self.running) if s.deadline_s is not None),
                                  default=math.inf)


def served_shape(plan: DeploymentPlan, deployment: ModelDeployment) -> tuple[Shape, Engine, Limits]:
    """The planner shape of one copy, the pinned server's engine and the limits it reads from the environment
    (with its own defaults where one is unset); InputError where no KV cache fits."""
    instance = find_instance(plan.instance_type)
    engine = engine_for(plan.container, neuron=instance.is_neuron)
    # The server generation's step constants, as the plan's prediction uses them (TGI 3 is not TGI 1).
    shape = Shape(model=deployment.model(), instance=instance, tp_degree=deployment.tp_degree,
                  quantization=deployment.quantization, generation=engine.generation(plan.container_version).name)
    limits = engine.limits(plan.container_version, deployment.environment, shape.kv_capacity_tokens,
                           shape.model.max_context)
    if limits.max_batch_total_tokens <= 0:
        raise InputError(f"models.{deployment.name}: {deployment.model_id} does not fit "
                         f"{plan.instance_type} at TP {deployment.tp_degree}: no room for the KV cache")
    return shape, engine, limits


C = TypeVar("C", bound=CopyScheduler)


class Router(Generic[C]):
    """The copies of one model behind the endpoint, and how a request is admitted to one of them."""

    def __init__(self, limits: Limits, copies: list[C]):
        self.limits = limits
        self.copies = copies
        self.rejected_overloaded = 0
        self.rejected_validation = 0
        self.peak_in_flight = 0  # most requests queued or running at once since the publisher last read it
        self._next = 0

    def submit(self, input_tokens: int, max_new_tokens: int | None, deadline_s: float | None,
               arrived_s: float) -> tuple[C, Sequence]:
        """Admit a request to the least-loaded copy (ties in turn), as TGI would: 429 first, then 422."""
        copy = self._pick()
        lim = self.limits
        if lim.max_concurrent_requests is not None and copy.in_flight >= lim.max_concurrent_requests:
            self.rejected_overloaded += 1
            raise RequestError(429, "overloaded", "Model is overloaded")
        if max_new_tokens is None:  # TGI: generate up to the total-token cap
            max_new_tokens = max(1, lim.max_total_tokens - input_tokens)
        try:
            self._validate(input_tokens, max_new_tokens)
        except RequestError:
            self.rejected_validation += 1
            raise
        seq = Sequence(input_tokens, max_new_tokens, arrived_s, deadline_s)
        copy.submit(seq)
        self.peak_in_flight = max(self.peak_in_flight, sum(c.in_flight for c in self.copies))
        return copy, seq

    def _pick(self) -> C:
        n = len(self.copies)
        order = [self.copies[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        return min(order, key=lambda c: c.in_flight)

    def _validate(self, input_tokens: int, max_new_tokens: int) -> None:
        lim = self.limits
        if input_tokens == 0:
            raise RequestError(422, "validation", "Input validation error: `inputs` cannot be empty")
        if max_new_tokens <= 0:
            raise RequestError(422, "validation",
                               "Input validation error: `max_new_tokens` must be strictly positive")
        if input_tokens > lim.max_input_tokens:
            raise RequestError(422, "validation", f"Input validation error: `inputs` tokens must be <= "
                                                  f"{lim.max_input_tokens}. Given: {input_tokens}")
        if input_tokens + max_new_tokens > lim.max_total_tokens:
            raise RequestError(422, "validation",
                               f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
                               f"{lim.max_total_tokens}. Given: {input_tokens} `inputs` tokens and "
                               f"{max_new_tokens} `max_new_tokens`")

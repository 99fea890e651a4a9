"""Continuous batching in simulated time: one engine loop per model copy, driven by the planner's step model.

Each copy runs one asyncio task that alternates a prefill pass (for queued requests that fit the KV
budget) with a decode step (one token for every running sequence), and sleeps for each pass's modelled
duration × `time_scale`. Token waiters are woken at step ends, so there is one timer per step, not one per
request. Sleeps are chained on deadlines (a late wake-up is made up on the next step) so the average pace
stays exact despite ~1 ms timer granularity; a debt larger than `_MAX_DEBT_S` is dropped and reported.
Tokens are stamped on the simulated clock (`_sim`, in wall seconds): it advances by exactly each pass's
modelled duration × `time_scale`, and a pass that admits requests starts no earlier than they arrived.
Unlike the pacing schedule it never drops a debt, so a request's stamps are free of the event loop's
jitter and stalls (which a time scale of 0.1 would otherwise multiply by ten); only the admission of a
later arrival moves it forward, when the loop has fallen that far behind.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator

from sagellm.catalog import find_instance
from sagellm.engines import Limits, engine_for
from sagellm.errors import InputError
from sagellm.planner import Shape, StepModel
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

_MAX_DEBT_S = 0.05  # real seconds an engine may run behind its schedule before it stops catching up

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
    """One admitted request inside a copy: how many tokens it has, and its waiter."""

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
        self.arrived_s = arrived_s  # perf_counter() when the request arrived
        self.first_token_s: float | None = None  # on the simulated clock (see the module docstring)
        self.last_token_s: float | None = None
        self.deadline_s = deadline_s  # perf_counter() deadline, or None
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
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)


class CopyEngine:
    """One model copy: a queue, a running batch within the KV budget, and the loop that steps it."""

    def __init__(self, steps: StepModel, limits: Limits, time_scale: float):
        self.steps = steps
        self.limits = limits
        self.time_scale = time_scale
        self.queue: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_reserved = 0
        self.completed = 0
        self.timed_out = 0
        self.cancelled = 0
        self.max_behind_s = 0.0  # worst lateness of a step against the schedule, real seconds
        self.busy_s = 0.0  # simulated seconds spent in prefill or decode passes (the GPU busy)
        self._clock = 0.0  # perf_counter() at which the current pass is due to end (pacing)
        self._sim = 0.0  # the simulated clock: when the current pass ends in the simulation
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        """Requests queued or running (what TGI's admission limit counts)."""
        return len(self.queue) + len(self.running)

    def start(self) -> None:
        """Start the engine loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop and end every sequence (their waiters raise `Cancelled`)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for seq in list(self.queue) + list(self.running):
            self._retire(seq, CANCELLED)

    def submit(self, seq: Sequence) -> None:
        """Queue an admitted request; the loop prefills it as soon as the KV budget allows."""
        self.queue.append(seq)
        self._work.set()

    def cancel(self, seq: Sequence) -> None:
        """The client went away (or the invocation timed out): free the sequence's slot and KV at once."""
        if seq.active:
            self._retire(seq, CANCELLED)

    def _retire(self, seq: Sequence, state: str) -> None:
        if seq.state == QUEUED:
            self.queue.remove(seq)
        elif seq.state == RUNNING:
            self.running.remove(seq)
            self.kv_reserved -= seq.reserved_tokens
        seq.state = state
        if state == DONE:
            self.completed += 1
        elif state == TIMED_OUT:
            self.timed_out += 1
        else:
            self.cancelled += 1
        seq._wake()

    async def _run(self) -> None:
        while True:
            if not self.queue and not self.running:
                self._work.clear()
                await self._work.wait()
                self._clock = time.perf_counter()
            self._expire()
            batch = self._admit()
            if batch:
                # A pass cannot start before its requests arrive (an idle server starts on arrival).
                self._sim = max(self._sim, *(s.arrived_s for s in batch))
                # A prefill pass for the newly admitted requests; decoding of the others pauses meanwhile.
                await self._sleep(self.steps.prefill_s(sum(s.input_tokens for s in batch)))
                self._emit([s for s in batch if s.state == RUNNING])
            if self.running:
                context = sum(s.input_tokens + s.generated for s in self.running)
                await self._sleep(self.steps.decode_step_s(len(self.running), context))
                self._emit(self.running)

    def _admit(self) -> list[Sequence]:
        """Move queued requests (in order) into the batch while the KV and prefill budgets allow."""
        lim = self.limits
        batch: list[Sequence] = []
        prefill = 0
        while self.queue:
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
            prefill += seq.input_tokens
            batch.append(seq)
        return batch

    def _emit(self, seqs: list[Sequence]) -> None:
        """One token for each of `seqs` at the simulated end of the pass; finished ones leave the batch."""
        now = self._sim
        finished = []
        for seq in seqs:
            seq.generated += 1
            if seq.first_token_s is None:
                seq.first_token_s = now
            seq.last_token_s = now
            if seq.generated >= seq.max_new_tokens:
                finished.append(seq)
            else:
                seq._wake()
        for seq in finished:
            self._retire(seq, DONE)

    def _expire(self) -> None:
        now = time.perf_counter()
        late = [s for s in (*self.queue, *self.running) if s.deadline_s is not None and now >= s.deadline_s]
        for seq in late:
            self._retire(seq, TIMED_OUT)

    async def _sleep(self, simulated_s: float) -> None:
        self.busy_s += simulated_s
        self._sim += simulated_s * self.time_scale
        self._clock += simulated_s * self.time_scale
        delay = self._clock - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
            return
        self.max_behind_s = max(self.max_behind_s, -delay)
        if -delay > _MAX_DEBT_S:
            self._clock = time.perf_counter()
        await asyncio.sleep(0)


class ModelServer:
    """One model of the endpoint (a variant's model or an inference component): its limits and copies."""

    def __init__(self, plan: DeploymentPlan, deployment: ModelDeployment, time_scale: float):
        self.deployment = deployment
        instance = find_instance(plan.instance_type)
        shape = Shape(model=deployment.model(), instance=instance, tp_degree=deployment.tp_degree,
                      quantization=deployment.quantization)
        # The pinned server reads its limits from the environment, with its own defaults where one is unset.
        self.engine = engine_for(plan.container, neuron=instance.is_neuron)
        self.limits = self.engine.limits(plan.container_version, deployment.environment, shape.kv_capacity_tokens,
                                    shape.model.max_context)
        if self.limits.max_batch_total_tokens <= 0:
            raise InputError(f"models.{deployment.name}: {deployment.model_id} does not fit "
                             f"{plan.instance_type} at TP {deployment.tp_degree}: no room for the KV cache")
        self.shape = shape
        self._steps = StepModel(shape)
        self._time_scale = time_scale
        # Copies behind the endpoint: per instance (inference components) × instances.
        n_copies = deployment.copy_count * plan.initial_instance_count
        self.copies = [CopyEngine(self._steps, self.limits, time_scale) for _ in range(n_copies)]
        self.retired: list[CopyEngine] = []  # removed by a scale-in: they finish what they hold, take nothing new
        self.rejected_overloaded = 0
        self.rejected_validation = 0
        self.peak_in_flight = 0  # most requests queued or running at once since the publisher last read it
        self._next = 0

    def start(self) -> None:
        """Start every copy's engine loop."""
        for copy in self.copies:
            copy.start()

    async def stop(self) -> None:
        """Stop every copy."""
        for copy in self.copies + self.retired:
            await copy.stop()

    def resize(self, instances: int) -> None:
        """Autoscaling: the copies of `instances` instances; new ones start now, removed ones stop taking requests."""
        wanted = max(1, self.deployment.copy_count * instances)
        while len(self.copies) < wanted:
            copy = CopyEngine(self._steps, self.limits, self._time_scale)
            copy.start()
            self.copies.append(copy)
        while len(self.copies) > wanted:
            self.retired.append(self.copies.pop())
        self._next %= len(self.copies)

    def submit(self, input_tokens: int, max_new_tokens: int | None, deadline_s: float | None,
               arrived_s: float) -> tuple[CopyEngine, Sequence]:
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

    def _pick(self) -> CopyEngine:
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

    def stats(self) -> dict[str, object]:
        """Counters for `/metrics`."""
        return {
            "copies": len(self.copies),
            "running": sum(len(c.running) for c in self.copies),
            "queued": sum(len(c.queue) for c in self.copies),
            "completed": sum(c.completed for c in self.copies),
            "timed_out": sum(c.timed_out for c in self.copies),
            "cancelled": sum(c.cancelled for c in self.copies),
            "rejected_overloaded": self.rejected_overloaded,
            "rejected_validation": self.rejected_validation,
            "engine_max_behind_s": max(c.max_behind_s for c in self.copies),
        }

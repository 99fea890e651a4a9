"""Continuous batching paced on wall time: one asyncio engine loop per model copy (batching.py schedules).

Each copy runs one asyncio task that takes turns (`CopyScheduler.turn`: a prefill pass for queued requests
that fit the budgets, then a decode step) and sleeps for each pass's modelled duration × `clock.scale`. Token
waiters are woken at step ends, so there is one timer per step, not one per request. Tokens are stamped on the
copy's clock (`sim_s`, in wall seconds): it advances by exactly each pass's modelled duration × `clock.scale`,
and an idle copy starts on the first arrival, so a request's stamps are free of the event loop's jitter and
stalls (which a time scale of 0.1 would otherwise multiply by ten). Passes are paced on that clock plus how far
the copy runs behind the wall clock: a late wake-up is made up on the next pass, so the average pace stays exact
despite ~1 ms timer granularity; a debt larger than `_MAX_DEBT_S` is not made up but added to how far the copy
runs behind, and reported. Arrivals and invocation deadlines are put on the copy's clock (their wall time less
that lag). A turn expires what is past its deadline at its start on that clock and admits only what arrived by
then: a copy that resumes late has already seen requests that reached it during the pass it was sleeping off,
and letting them in at once would spare them the rest of that pass, which the simulator (and a server) does not.

The engine's front end (its step constants' `request_latency_s`: HTTP, chat template, tokenising, the hand-over to
the engine core) sits between the HTTP arrival and the copy: `ModelServer.submit` queues a request with its arrival
that long later on the copy's clock, so no turn admits it before then, while the copy's passes go on and no timer
waits for it (0 for TGI: nothing changes). `plan`'s simulation puts it in the same place (planner/simulate.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

from sagellm.clock import REAL, Clock
from sagellm.engines import Limits
from sagellm.planner import StepModel
from sagellm.planner.batching import (
    CANCELLED,
    Cancelled,
    CopyScheduler,
    InvocationTimeout,
    RequestError,
    Router,
    Sequence,
)
from sagellm.planner.prefix import Prefix, Segment, word_segments
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment, routing_of, served_shape

__all__ = ["Cancelled", "CopyEngine", "InvocationTimeout", "ModelServer", "RequestError", "Sequence"]

_MAX_DEBT_S = 0.05  # real seconds an engine may run behind its schedule before it stops catching up


class CopyEngine(CopyScheduler):
    """One model copy on the event loop: its turns on its own clock, paced on perf_counter()."""

    def __init__(self, steps: StepModel, limits: Limits, clock: Clock, scheduling: str = "tgi"):
        super().__init__(steps, limits, clock, scheduling)
        self.max_behind_s = 0.0  # worst lateness of a step against the schedule, real seconds
        self._behind_s = 0.0  # wall clock less the copy's clock: debts not made up since the copy was last idle
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

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
            self.retire(seq, CANCELLED)

    def submit(self, seq: Sequence) -> None:
        """Queue an admitted request (its arrival and deadline put on the copy's clock, never arriving before one
        queued earlier) and wake the loop."""
        seq.arrived_s -= self._behind_s
        if seq.deadline_s is not None:
            seq.deadline_s -= self._behind_s
        if self.queue:
            seq.arrived_s = max(seq.arrived_s, self.queue[-1].arrived_s)
        super().submit(seq)
        self._work.set()

    async def _run(self) -> None:
        while True:
            if not self.queue and not self.running:
                self._work.clear()
                self._behind_s = 0.0  # idle, the copy is on time: it starts on the next arrival
                await self._work.wait()
            for modelled_s in self.turn():
                await self._pace(modelled_s)

    async def _pace(self, modelled_s: float) -> None:
        """Sleep until the pass is due to end on the copy's clock (catching up on a small debt)."""
        delay = self.sim_s + self._behind_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
            return
        self.max_behind_s = max(self.max_behind_s, -delay)
        if -delay > _MAX_DEBT_S:
            self._behind_s -= delay
        await asyncio.sleep(0)


class ModelServer(Router[CopyEngine]):
    """One model of the endpoint (a variant's model or an inference component): its limits and copies."""

    def __init__(self, plan: DeploymentPlan, deployment: ModelDeployment, clock: Clock = REAL):
        self.deployment = deployment
        self.shape, self.engine, limits = served_shape(plan, deployment)
        self._steps = StepModel(self.shape)
        self._clock = clock
        # Wall seconds from a request's HTTP arrival to its copy's scheduler seeing it: the engine's front end, as
        # `plan` simulates it (planner/simulate.py `_SimulatedRun.front_end_s`).
        self.front_end_s = clock.wall_s(self._steps.k.request_latency_s)
        # Copies behind the endpoint: per instance (inference components) × instances.
        n_copies = deployment.copy_count * plan.initial_instance_count
        super().__init__(limits, [CopyEngine(self._steps, limits, clock, self.engine.scheduling)
                                  for _ in range(n_copies)], routing_of(plan))
        # Prompts are cut into segments of whole KV blocks where a prefix cache (vLLM, SGLang) or KV-aware
        # routing reads them; SGLang's radix cache is token-granular: its prompts are cut every 16 words.
        self._segment_words = max(limits.kv_block_tokens, 16) if (
            self.engine.scheduling != "tgi" or self.routing.strategy == "kv-aware") else 0
        self.retired: list[CopyEngine] = []  # removed by a scale-in: they finish what they hold, take nothing new

    def submit(self, input_tokens: int, max_new_tokens: int | None, deadline_s: float | None,
               arrived_s: float, prefix: Prefix = 0, prefix_key: Hashable | None = None) -> tuple[CopyEngine, Sequence]:
        """Route and queue a request that reached the endpoint at `arrived_s`: its copy sees it the front end's
        latency later (its deadline still runs from `arrived_s`, as SageMaker's does)."""
        return super().submit(input_tokens, max_new_tokens, deadline_s, arrived_s + self.front_end_s, prefix,
                              prefix_key)

    def prefix_of(self, text: str, body: bytes | None) -> tuple[tuple[Segment, ...], Hashable | None]:
        """A prompt's segments (chained hashes of whole blocks of words) and, for prefix-aware routing, what stands
        for its first PrefixLength bytes of the InvokeEndpoint body, or characters of its text elsewhere (the
        OpenAI API: the messages' text)."""
        segments = word_segments(text, self._segment_words) if self._segment_words else ()
        if self.routing.strategy != "prefix-aware":
            return segments, None
        length = self.routing.prefix_length
        return segments, hash(body[:length] if body is not None else text[:length])

    def reply_segments(self, text: str, generated_text: Callable[[int], str]
                       ) -> Callable[[int], tuple[Segment, ...]] | None:
        """The segments of a prompt followed by its first n generated tokens' text (what a conversation's next
        turn sends back), where copies keep a prefix cache."""
        if not self._segment_words or self.engine.scheduling == "tgi":
            return None
        words = self._segment_words
        return lambda n: word_segments(f"{text}{generated_text(n)}", words)

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
        self.set_copies(max(1, self.deployment.copy_count * instances))

    def set_copies(self, wanted: int) -> None:
        """Copy scaling (inference components): `wanted` copies, down to zero (then nothing takes requests)."""
        while len(self.copies) < wanted:
            copy = CopyEngine(self._steps, self.limits, self._clock, self.engine.scheduling)
            copy.start()
            self.copies.append(copy)
        while len(self.copies) > wanted:
            self.retired.append(self.copies.pop())
        self._next %= max(1, len(self.copies))

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
            "engine_max_behind_s": max((c.max_behind_s for c in self.copies), default=0.0),
            # vLLM's names (vllm 0.30.0 v1/metrics/loggers.py: vllm:prefix_cache_queries and vllm:prefix_cache_hits,
            # in prompt tokens), over every copy this model had.
            "prefix_cache_queries": sum(c.prefix_queries for c in self.copies + self.retired),
            "prefix_cache_hits": sum(c.prefix_hits for c in self.copies + self.retired),
        }

"""Continuous batching without a clock: what one model copy does in each turn, and how requests reach a copy.

One piece of scheduling drives both the emulator (copies.py: asyncio, paced on wall time) and the
simulator (simulate.py: discrete events on a virtual clock). A copy's turn (`CopyScheduler.turn`) expires
requests past their deadline, admits queued ones into the running batch within the KV, prefill and batch
budgets, runs a prefill pass for the newly admitted then a decode step, and stamps each pass's tokens on
the copy's simulated clock. It yields each pass's modelled duration; the driver lets that time pass on its
own clock (sleeping, or moving the virtual clock) before the turn goes on. vLLM's and SGLang's copies keep a
prefix cache (planner/prefix.py). `Router` sends each request to a copy as the endpoint's routing strategy picks
(the least loaded by default) and answers as TGI does: 429 above the admission limit, 422 for invalid lengths.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from sagellm.clock import REAL, Clock
from sagellm.engines import Limits
from sagellm.planner.prefix import (
    CHARS_PER_TOKEN,
    Prefix,
    PrefixCache,
    Routing,
    chain_ends,
    reply_key,
    route_key,
    segments_of,
)
from sagellm.planner.steps import StepModel

if TYPE_CHECKING:
    import asyncio

QUEUED, RUNNING, DONE, TIMED_OUT, CANCELLED = "queued", "running", "done", "timed_out", "cancelled"
# SGLang 0.5.20's admission estimate (sglang/srt/environ.py:584-588, managers/schedule_policy.py:79-81, fields/
# schedule.py:74-84): the share of the running sequences' remaining output it keeps room for starts at 0.7, falls by
# (0.7 - 0.7 × 0.14) / 600 per decode step, is reset from the data after a retraction and to 0.7 when idle.
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7
SGLANG_MIN_RATIO_FACTOR = 0.14
SGLANG_RATIO_DECAY = (SGLANG_INIT_NEW_TOKEN_RATIO - SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_RATIO_FACTOR) / 600
SGLANG_RETRACT_DECODE_STEPS = 20
SGLANG_CLIP_MAX_NEW = 4096  # CLIP_MAX_NEW_TOKENS_ESTIMATION
SGLANG_MAX_PREFILL_TOKENS = 16384  # max_prefill_tokens: a prefill batch's input tokens


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
        "cached_tokens",
        "computed",
        "deadline_s",
        "ends",
        "first_token_s",
        "generated",
        "held",
        "input_tokens",
        "insert_at",
        "last_token_s",
        "max_new_tokens",
        "next_segment",
        "pinned",
        "prefix",
        "reply_segments",
        "segments",
        "shared",
        "state",
    )

    def __init__(self, input_tokens: int, max_new_tokens: int, arrived_s: float, deadline_s: float | None,
                 prefix: Prefix = 0):
        self.input_tokens = input_tokens
        # Its prompt's shareable segments (planner/prefix.py), those that fit in the prompt, and where each ends.
        self.segments: tuple[tuple[Hashable, int], ...] = ()
        self.ends: tuple[int, ...] = ()
        if prefix:
            segments = segments_of(prefix)
            ends = chain_ends(segments)
            n = next((i for i, end in enumerate(ends) if end > input_tokens), len(ends))
            self.segments, self.ends = segments[:n], ends[:n]
        self.prefix = self.ends[-1] if self.ends else 0  # tokens its segments cover
        self.next_segment = 0  # paged schedulers: the first of its segments it has not yet passed to the cache
        # Computed tokens at which that one is complete.
        self.insert_at: float = self.ends[0] if self.ends else math.inf
        self.pinned: list[Hashable] = []  # cached segments it uses (not evicted while it runs)
        # Where there is text (the emulator): the segments of its prompt followed by its first n generated tokens,
        # so its reply is cached under the keys the next turn's prompt will carry.
        self.reply_segments: Callable[[int], tuple[tuple[Hashable, int], ...]] | None = None
        self.cached_tokens = 0  # prompt tokens its copy's prefix cache served at its (last) admission
        self.shared = 0  # of the KV tokens it holds, those the copy's prefix cache holds for everyone
        self.max_new_tokens = max_new_tokens
        self.generated = 0
        self.state = QUEUED
        self.arrived_s = arrived_s  # when the request arrived, on the copy's clock (the driver's, less its lag)
        self.first_token_s: float | None = None  # on the copy's simulated clock
        self.last_token_s: float | None = None
        self.deadline_s = deadline_s  # on the copy's clock, or None
        # Paged schedulers (vLLM, SGLang): tokens whose KV has been computed, and KV tokens held (whole blocks).
        self.computed = 0
        self.held = 0
        self._waiter: asyncio.Future[None] | None = None

    @property
    def reserved_tokens(self) -> int:
        """KV tokens the sequence holds a claim on while it runs."""
        return self.input_tokens + self.max_new_tokens

    @property
    def pending(self) -> int:
        """Tokens to compute before the next one is sampled: the rest of the prompt (and, after a preemption, of
        what it had generated), or 1 while decoding."""
        return self.input_tokens + self.generated - self.computed

    @property
    def prefilling(self) -> bool:
        """Whether its next pass computes prompt (or, after a preemption, recomputes) tokens rather than decoding
        one: more than one token to go, or none sampled yet."""
        return self.pending > 1 or self.generated == 0

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
    """One model copy without a clock of its own: a queue, a running batch within the budgets, its turns, as the
    copy's engine schedules them (`scheduling`: one of SCHEDULERS)."""

    def __init__(self, steps: StepModel, limits: Limits, clock: Clock = REAL, scheduling: str = "tgi"):
        self.steps = steps
        self.limits = limits
        self.clock = clock  # an emulator's: its wall seconds per modelled (simulated) second
        self.scheduling = scheduling
        self._turn = SCHEDULERS[scheduling]
        self.kv_free = limits.max_batch_total_tokens  # paged schedulers: KV tokens no sequence holds
        self.cache = PrefixCache(limits.kv_block_tokens)  # paged schedulers: cached prompt segments
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache (vLLM's vllm:prefix_cache_queries)
        self.prefix_hits = 0  # of those, tokens it served (vllm:prefix_cache_hits)
        self.new_token_ratio = SGLANG_INIT_NEW_TOKEN_RATIO  # SGLang's estimate of the decode tokens still to come
        self.queue: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_reserved = 0
        self.context = 0  # KV tokens the running sequences hold (prompts and tokens generated so far)
        self.completed = 0
        self.timed_out = 0
        self.cancelled = 0
        self.preempted = 0  # paged schedulers: sequences whose KV was freed to be recomputed
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
        if state == DONE and seq.computed and (seq.segments or seq.reply_segments is not None):
            self._cache_reply(seq)
        self.kv_free += seq.held - seq.shared
        seq.held = seq.shared = 0
        if seq.pinned:
            self.cache.release(seq.pinned)
            seq.pinned = []
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
        """One turn from the copy's clock, as its engine schedules: yields each pass's modelled seconds (the driver
        lets them pass) and stamps its tokens once the driver resumes it."""
        if self.queue and not self.running:  # an idle copy starts on the first arrival
            self.sim_s = max(self.sim_s, self.queue[0].arrived_s)
        self.expire(self.sim_s)
        yield from self._turn(self)

    def reserved_turn(self) -> Iterator[float]:
        """TGI: admit what the reserved KV and the prefill budget allow, prefill the admitted (decoding pauses),
        then one decode step."""
        batch = self.admit()
        if batch:
            # A prefill pass for the newly admitted requests; decoding of the others pauses meanwhile. Each prompt
            # attends to itself only: the pass's attention grows with each prompt's length, not with their sum.
            yield self._advance(self.steps.prefill_s(sum(s.input_tokens for s in batch), len(batch)))
            self.emit([s for s in batch if s.state == RUNNING])
        if self.running:
            yield self._advance(self.steps.decode_step_s(len(self.running), self.context))
            self.emit(self.running)

    def paged_turn(self) -> Iterator[float]:
        """vLLM V1 (Scheduler.schedule, vllm 0.30.0 v1/core/sched/scheduler.py:561-1300): one forward pass within a
        token budget (max_num_batched_tokens): the running sequences first, in admission order (a decode takes 1
        token, a partly prefilled prompt the rest it can), then waiting prompts, first come first served, each
        chunked into what is left. KV blocks are taken as tokens are computed, nothing reserved for the output;
        when they run out the latest admitted sequence is preempted (its KV freed, recomputed later from the front
        of the queue) and nobody new is admitted that step. A waiting prompt is admitted only when blocks for all
        of it are free (scheduler_reserve_full_isl)."""
        budget = self.limits.max_batch_prefill_tokens
        steps: list[tuple[Sequence, int]] = []
        preempted = False
        for seq in list(self.running):
            if budget <= 0 or seq.state != RUNNING:
                break
            pending = seq.input_tokens + seq.generated - seq.computed  # (inlined: hot)
            n = pending if pending < budget else budget  # noqa: FURB136 (min, inlined: a call per sequence per pass)
            # Within the blocks it holds, nothing to take (most decode steps); else take or preempt.
            if seq.computed + n > seq.held and self._make_room(seq, n):
                preempted = True
            if seq.state != RUNNING:  # it was the latest admitted itself
                break
            steps.append((seq, n))
            budget -= n
        while (not preempted and budget > 0 and self.queue and self.queue[0].arrived_s <= self.sim_s
               and (self.limits.max_batch_size is None or len(self.running) < self.limits.max_batch_size)):
            seq = self.queue[0]
            # The whole prompt's blocks must be free (less a cached prefix), unless nothing runs (a prompt over the
            # pool runs alone).
            if self._blocks(seq.pending - self._hit(seq)) > self._room(seq) and self.running:
                break
            n = self._admit(seq, budget)
            steps.append((seq, n))
            budget -= n
        if steps:
            yield self._advance(self._forward_s(steps))
            self._computed(steps)

    def _make_room(self, seq: Sequence, n: int) -> bool:
        """Take the KV blocks a running sequence needs for `n` more tokens, preempting the latest admitted (to the
        front of the queue) while they are not free; whether any was preempted. A sequence alone runs whatever the
        pool holds (it could never run otherwise)."""
        preempted = False
        while (seq.computed + n > seq.held and seq.state == RUNNING
               and not self._take_blocks(seq, n, force=len(self.running) == 1)):
            preempted = True
            self._preempt(self.running[-1], front=True)
        return preempted

    def alternating_turn(self) -> Iterator[float]:
        """SGLang (Scheduler.get_next_batch_to_run, sglang 0.5.20 managers/scheduler.py:3562-3700): a prefill
        (extend) pass whenever waiting prompts can be admitted, decoding paused; else one decode step. A prefill
        takes the prompt being chunked first, then waiting ones in arrival order while their prompt plus all of
        their output (at most 4096) fits the KV left after the running sequences' expected output (remaining ×
        new_token_ratio), within chunked_prefill_size tokens (the last one chunked). Out of KV in decode, the
        sequence with the fewest output tokens (ties: longest prompt) is retracted to the back of the queue."""
        steps = self._sglang_extend()
        if steps:
            yield self._advance(self._forward_s(steps))  # prompt chunks only: decoding waits
            self._computed(steps)
            return
        if not self.running:
            self.new_token_ratio = SGLANG_INIT_NEW_TOKEN_RATIO  # on_idle
            return
        self._sglang_retract()
        steps = [(s, 1) for s in self.running]
        for seq, n in steps:
            self._take_blocks(seq, n, force=True)
        yield self._advance(self.steps.decode_step_s(len(steps), sum(s.computed for s, _ in steps)))
        self._computed(steps)

    def _sglang_extend(self) -> list[tuple[Sequence, int]]:
        """SGLang's prefill (extend) batch: the prompt being chunked, then the waiting prompts its admission rule
        lets in (see alternating_turn), each admitted with its chunk; empty when none can run."""
        chunk = min(self.limits.max_batch_prefill_tokens, SGLANG_MAX_PREFILL_TOKENS)
        steps: list[tuple[Sequence, int]] = []
        chunked = next((s for s in self.running if s.prefilling), None)
        if chunked is not None:
            n = min(chunked.pending, chunk)
            self._take_blocks(chunked, n, force=True)
            steps.append((chunked, n))
            chunk -= n
        expected = sum(min(s.max_new_tokens - s.generated, SGLANG_CLIP_MAX_NEW) for s in self.running)
        room = (self.kv_free + self.cache.unpinned) - expected * self.new_token_ratio
        while (chunk > 0 and self.queue and self.queue[0].arrived_s <= self.sim_s
               and (self.limits.max_batch_size is None or len(self.running) < self.limits.max_batch_size)):
            seq = self.queue[0]
            need = seq.pending + min(seq.max_new_tokens - seq.generated, SGLANG_CLIP_MAX_NEW) + 1
            if need >= room and (self.running or steps):
                break
            n = self._admit(seq, chunk)
            steps.append((seq, n))
            room -= need
            chunk -= n
            if n < seq.pending:  # one prompt is chunked at a time
                break
        return steps

    def _sglang_retract(self) -> None:
        """Before SGLang's decode step: out of KV, retract sequences to the back of the queue (fewest output tokens
        first, ties the longest prompt) and reset the new-token ratio from what is left; else decay the ratio."""
        retracted = False
        while len(self.running) > 1 and self.kv_free + self.cache.unpinned < len(self.running):
            retracted = True
            self._preempt(max(self.running, key=lambda s: (-s.generated, s.input_tokens)), front=False)
        if retracted:
            left = self.running
            self.new_token_ratio = min(1.0, (sum(s.generated for s in left) + SGLANG_RETRACT_DECODE_STEPS * len(left))
                                       / (sum(s.max_new_tokens for s in left) + 1))
        else:
            self.new_token_ratio = max(SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_RATIO_FACTOR,
                                       self.new_token_ratio - SGLANG_RATIO_DECAY)

    def _admit(self, seq: Sequence, budget: int) -> int:
        """Start the queue's head and give it the KV for its first `budget` tokens at most; how many it takes."""
        self._start(seq)
        n = min(seq.pending, budget)
        self._take_blocks(seq, n, force=True)
        return n

    @property
    def cached_prefix(self) -> int:
        """KV tokens the prefix cache holds (whole blocks)."""
        return self.cache.held

    def _lookup(self, seq: Sequence) -> tuple[int, int]:
        """A waiting sequence's cached chain: how many of its segments, and the prompt tokens they serve (whole
        blocks, at most all but the prompt's last token, as vLLM's get_computed_blocks and SGLang's match_prefix)."""
        if seq.computed or not seq.segments or not self.cache.held:
            return 0, 0
        n = self.cache.longest(seq.segments)
        if not n:
            return 0, 0
        hit = min(seq.ends[n - 1], self.cache.end(seq.segments[n - 1][0]), seq.input_tokens - 1)
        return n, hit - hit % self.limits.kv_block_tokens

    def _hit(self, seq: Sequence) -> int:
        """The prefix-cache hit `_start` would give a waiting sequence."""
        return self._lookup(seq)[1]

    def _room(self, seq: Sequence) -> int:
        """KV tokens a waiting sequence may take: the free ones and the cached ones nobody uses, less those of
        its own hit (it will use them)."""
        if not self.cache.unpinned:
            return self.kv_free
        n, _ = self._lookup(seq)
        return self.kv_free + self.cache.unpinned - (self.cache.unpinned_in(seq.segments[:n]) if n else 0)

    def held_prefix(self, segments: tuple[tuple[Hashable, int], ...], input_tokens: int) -> int:
        """Prompt tokens of `segments` this copy's cache would serve now (KV-aware routing reads it)."""
        n = self.cache.longest(segments) if self.cache.held else 0
        if not n:
            return 0
        hit = min(chain_ends(segments[:n])[-1], self.cache.end(segments[n - 1][0]), input_tokens - 1)
        return hit - hit % self.limits.kv_block_tokens

    def _blocks(self, tokens: int) -> int:
        """KV tokens `tokens` take in whole blocks."""
        block = self.limits.kv_block_tokens
        return -(-tokens // block) * block

    def _take_blocks(self, seq: Sequence, n: int, force: bool = False) -> bool:
        """Give `seq` the blocks `n` more computed tokens need; False (nothing taken) when too few are free, unless
        `force` (a sequence that must run although the pool is short: it runs alone)."""
        more = self._blocks(seq.computed + n) - seq.held
        if more > self.kv_free and self.cache.unpinned:  # cached segments nobody uses make room, oldest first
            self.kv_free += self.cache.evict(more - self.kv_free)
        if more > self.kv_free and not force:
            return False
        seq.held += more
        self.kv_free -= more
        return True

    def _start(self, seq: Sequence) -> None:
        """Move the queue's head into the running batch; a shared prefix the cache holds is not computed again
        (vLLM's and SGLang's prefix caches, on by default: whole blocks, at most all but the prompt's last token)."""
        self.queue.popleft()
        seq.state = RUNNING
        self.running.append(seq)
        if seq.computed == 0:
            self.prefix_queries += seq.input_tokens
            n, hit = self._lookup(seq)
            seq.cached_tokens = hit
            if n:
                keys = [key for key, _ in seq.segments[:n]]
                self.cache.pin(keys)
                seq.pinned = keys
                seq.next_segment = n
                seq.insert_at = seq.ends[n] if n < len(seq.ends) else math.inf
                seq.computed = seq.held = seq.shared = hit
                self.prefix_hits += hit

    def _preempt(self, seq: Sequence, *, front: bool) -> None:
        """Free a running sequence's KV and queue it again (front: vLLM; back: SGLang) to be recomputed."""
        self.running.remove(seq)
        self.kv_free += seq.held - seq.shared
        seq.held = seq.computed = seq.shared = 0
        if seq.pinned:
            self.cache.release(seq.pinned)
            seq.pinned = []
        seq.next_segment = 0
        seq.insert_at = seq.ends[0] if seq.ends else math.inf
        seq.state = QUEUED
        self.preempted += 1
        if front:
            self.queue.appendleft(seq)
        else:
            self.queue.append(seq)

    def _forward_s(self, steps: list[tuple[Sequence, int]]) -> float:
        """One forward pass over decodes and prompt chunks together: the weights read once, the decodes' attention
        over their KV, each chunk's over itself and the tokens of its prompt already in the KV cache."""
        prompt_tokens = prompts = batch = context = pairs = 0
        for seq, n in steps:  # one pass, `prefilling` inlined: this runs once a step over the whole batch
            if seq.input_tokens + seq.generated - seq.computed > 1 or seq.generated == 0:
                prompt_tokens += n
                prompts += 1
                pairs += n * seq.computed
            else:
                batch += 1
                context += seq.computed
        return self.steps.mixed_step_s(prompt_tokens, prompts, batch, context, pairs)

    def _computed(self, steps: list[tuple[Sequence, int]]) -> None:
        """After a pass: the tokens it computed are held; each sequence whose prompt (or last token) is done
        samples its next token."""
        ready = []
        for seq, n in steps:
            if seq.state == RUNNING:
                seq.computed += n
                if seq.computed >= seq.insert_at:
                    self._cache_segments(seq)
                if seq.computed == seq.input_tokens + seq.generated:  # nothing pending (inlined: hot)
                    ready.append(seq)
        self.emit(ready)

    def _cache_segments(self, seq: Sequence) -> None:
        """The segments `seq` has now computed stay in the cache for later requests (their whole blocks pass from
        the sequence to the cache: held for everyone, not freed with it); one another sequence cached meanwhile
        is not cached twice (this copy of it is freed with the sequence); a chain whose parent was evicted stops."""
        cache, ends = self.cache, seq.ends
        i = seq.next_segment
        while i < len(ends) and seq.computed >= ends[i]:
            key = seq.segments[i][0]
            if key not in cache.entries:
                if i and seq.segments[i - 1][0] not in cache.entries:
                    i = len(ends)
                    break
                tokens = cache.charge(ends, i)
                cache.insert(key, tokens, ends[i], pinned=True)
                seq.pinned.append(key)
                seq.shared += tokens
            i += 1
        seq.next_segment = i
        seq.insert_at = ends[i] if i < len(ends) else math.inf

    def _cache_reply(self, seq: Sequence) -> None:
        """A finished sequence whose segments cover its prompt leaves its generated tokens' whole blocks cached
        under `reply_key` (vLLM V1 caches full blocks of output tokens too), for a conversation's next turn; where
        the sequence has text, under the keys of its prompt and reply's whole blocks."""
        if seq.reply_segments is not None:
            self._cache_text_reply(seq, seq.reply_segments(seq.generated))
            return
        last = seq.segments[-1][0]
        key = reply_key(seq.segments)
        if seq.ends[-1] < seq.input_tokens or last not in self.cache.entries or key in self.cache.entries:
            return
        tokens = self.cache.charge((*seq.ends, seq.computed), len(seq.ends))
        if tokens > 0:
            self.cache.insert(key, tokens, seq.computed, pinned=False)
            seq.shared += tokens

    def _cache_text_reply(self, seq: Sequence, full: tuple[tuple[Hashable, int], ...]) -> None:
        """Cache the whole blocks past its prompt's segments that it computed (its blocks pass to the cache)."""
        cache, ends = self.cache, chain_ends(full)
        for i in range(len(seq.segments), len(full)):
            key = full[i][0]
            if ends[i] > seq.computed or (i and full[i - 1][0] not in cache.entries):
                return
            if key not in cache.entries:
                tokens = cache.charge(ends, i)
                cache.insert(key, tokens, ends[i], pinned=False)
                seq.shared += tokens

    def decode_run(self, until_s: float, line: Callable[[int], tuple[float, float]]) -> int:
        """Between turns, run now, back to back, the turns to come that would only decode, up to the first that ends
        past `until_s` on the copy's clock (the simulator's next arrival or event: that pass is in progress when it
        comes, and the driver waits for its end): turns in which no sequence finishes or expires and no queued one
        can join. A decode step of `batch` sequences costs `line(batch)` = (s, s per context token), as the
        simulator's step model costs it; each turn is costed and stamped as `turn` would (the same additions in the
        same order, so the clocks read the same to the last bit). Returns how many ran (`sim_s` past `until_s`: the
        last one crossed it). The simulator's: nothing waits on a token there, and one generator turn per decode
        step was most of a whole-catalog `recommend`."""
        running = self.running  # between turns: each has its first token (the prefill pass's)
        if not running or not self._blocked():
            return 0
        paged, sgl = self.scheduling == "vllm", self.scheduling == "sglang"
        decoding = self._all_decoding(paged or sgl)
        if decoding is None:
            return 0
        fewest, computed = decoding
        last = fewest - 1  # the turn that finishes one is turn's
        n, scale, deadline_s = len(running), self.clock.scale, self._next_deadline
        if paged:
            last = self._steps_in_blocks(last)
        elif sgl:
            last = min(last, self.kv_free // n)  # a page a token: past that, a step retracts first
        head = self.queue[0] if sgl and self.queue else None
        base_s, per_token_s = line(n)
        context = computed if paged or sgl else self.context
        if head is None:
            sim_s, busy_s, context, done = _decode_steps(self.sim_s, self.busy_s, context, base_s, per_token_s, n,
                                                         scale, last, until_s, deadline_s)
            ratio = _decayed_ratio(self.new_token_ratio, done) if sgl else self.new_token_ratio
        else:
            sim_s, busy_s, context, done, ratio = self._sglang_decode_steps(head, context, base_s, per_token_s, last,
                                                                           until_s, deadline_s)
        if done:
            self.sim_s, self.busy_s = sim_s, busy_s
            if sgl:
                self.new_token_ratio = ratio
            self._stamp_decode_run(done, sim_s, None if paged or sgl else context)
        return done

    def _all_decoding(self, paged: bool) -> tuple[int, int] | None:
        """decode_run's precondition over the running batch in one pass (it runs between most turns): None where a
        paged engine's sequence still has a prompt to compute (no decode-only run then), else (the fewest output
        tokens any has left, the KV tokens they have computed)."""
        fewest, computed = math.inf, 0
        for s in self.running:
            if paged and s.input_tokens + s.generated - s.computed != 1:  # pending: a prompt to compute
                return None
            left = s.max_new_tokens - s.generated
            if left < fewest:  # noqa: PLR1730 (min, inlined: a call per sequence per run)
                fewest = left
            computed += s.computed
        return int(fewest), computed

    def _stamp_decode_run(self, done: int, sim_s: float, context: int | None) -> None:
        """After `done` decode-only steps ending at `sim_s`: each running sequence's tokens; TGI's reserved context
        (`context`), or for the paged engines (None) the blocks each one's new tokens need (within what decode_run
        found free), as _take_blocks would take them."""
        running = self.running
        if context is not None:
            self.context = context
            for seq in running:
                seq.generated += done
                seq.last_token_s = sim_s
            return
        block, taken = self.limits.kv_block_tokens, 0
        for seq in running:
            seq.generated += done
            seq.last_token_s = sim_s
            seq.computed += done
            more = -(-seq.computed // block) * block - seq.held
            seq.held += more
            taken += more
        self.kv_free -= taken

    def _sglang_decode_steps(self, head: Sequence, context: int, base_s: float, per_token_s: float, last: int,
                             until_s: float, deadline_s: float) -> tuple[float, float, int, int, float]:
        """decode_run's steps for SGLang with a waiting prompt: before each, alternating_turn's test whether the
        falling estimate lets the head in (the free KV less the running sequences' remaining output, at most 4096
        each, × the ratio); → (sim_s, busy_s, context, steps, ratio)."""
        running = self.running
        need = head.pending + min(head.max_new_tokens - head.generated, SGLANG_CLIP_MAX_NEW) + 1
        ratio, floor = self.new_token_ratio, SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_RATIO_FACTOR
        # Cached segments no running sequence uses are free to SGLang's test (it evicts them to admit).
        n, scale, kv_free = len(running), self.clock.scale, self.kv_free + self.cache.unpinned
        full = self.limits.max_batch_size is not None and n >= self.limits.max_batch_size  # no slot: it waits
        remaining = [s.max_new_tokens - s.generated for s in running]
        # Where none is clipped (at most 4096 to go), `done` steps from now they expect the sum less n × done.
        clipped, total = max(remaining) > SGLANG_CLIP_MAX_NEW, sum(remaining)
        sim_s, busy_s, done = self.sim_s, self.busy_s, 0
        for _ in range(last):
            if sim_s >= deadline_s:  # the turn would expire a sequence first
                break
            if head.arrived_s <= sim_s and not full:
                expected = sum(min(r - done, SGLANG_CLIP_MAX_NEW) for r in remaining) if clipped else total - n * done
                if need < (kv_free - n * done) - expected * ratio:
                    break  # the turn would prefill the head first
            step_s = base_s + per_token_s * context
            sim_s += step_s * scale
            busy_s += step_s
            context += n
            done += 1
            ratio = max(floor, ratio - SGLANG_RATIO_DECAY)
            if sim_s > until_s:  # in progress when the next event comes
                break
        return sim_s, busy_s, context, done, ratio

    def _steps_in_blocks(self, most: int) -> int:
        """How many of `most` decode steps the running sequences can take before they need more KV blocks than
        are free (the blocks needed grow with the steps: the largest count that fits, by bisection)."""
        block = self.limits.kv_block_tokens
        # A sequence that has computed c tokens needs a new block at each step that takes it past a multiple of the
        # block: the first after (-c) % block steps (its room), then every `block` steps. So the blocks k steps
        # take follow from how many sequences have each room, however large the batch.
        rooms = [0] * block
        now = held = 0
        for s in self.running:
            rooms[-s.computed % block] += 1
            now -= -s.computed // block
            held += s.held
        now = now * block - held  # as _blocks, summed: what they lack now (nothing, between passes)
        counts = [(room, count) for room, count in enumerate(rooms) if count]

        def more(k: int) -> int:
            return now + block * sum(count * (1 + (k - 1 - room) // block) for room, count in counts if room < k)
        if more(most) <= self.kv_free:  # they all fit (the usual case: one sum, not a bisection)
            return most
        low, high = 0, most
        while low < high:
            mid = (low + high + 1) // 2
            if more(mid) <= self.kv_free:
                low = mid
            else:
                high = mid - 1
        return low

    def _blocked(self) -> bool:
        """No queued request can join the batch until a running one leaves: the queue is empty, or its head has
        arrived and does not fit the KV, prefill or batch budget (only a leaving sequence frees them)."""
        if not self.queue:
            return True
        head, lim = self.queue[0], self.limits
        if self.scheduling == "sglang":  # checked step by step in decode_run as the estimate falls
            return True
        if head.arrived_s > self.sim_s:
            return False  # it may arrive (on this clock) within the run
        if self.scheduling == "vllm":  # its whole prompt's blocks, or a running slot (the blocks free only shrink)
            return (self._blocks(head.pending - self._hit(head)) > self._room(head)
                    or (lim.max_batch_size is not None and len(self.running) >= lim.max_batch_size))
        return (self.kv_reserved + head.reserved_tokens > lim.max_batch_total_tokens
                or head.input_tokens > lim.max_batch_prefill_tokens
                or (lim.max_batch_size is not None and len(self.running) >= lim.max_batch_size))

    def _advance(self, modelled_s: float) -> float:
        self.busy_s += modelled_s
        self.sim_s += self.clock.wall_s(modelled_s)
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


def _decayed_ratio(ratio: float, steps: int) -> float:
    """SGLang's new-token ratio after `steps` decode steps: one decay a step, to its floor (where it stays)."""
    floor = SGLANG_INIT_NEW_TOKEN_RATIO * SGLANG_MIN_RATIO_FACTOR
    for _ in range(steps):
        ratio = max(floor, ratio - SGLANG_RATIO_DECAY)
        if ratio == floor:
            break
    return ratio


def _decode_steps(sim_s: float, busy_s: float, context: int, base_s: float, per_token_s: float, n: int, scale: float,
                  most: int, until_s: float, deadline_s: float) -> tuple[float, float, int, int]:
    """decode_run's steps without a waiting prompt to test: at most `most`, up to the first that ends past `until_s`,
    none started at or past `deadline_s`; → (sim_s, busy_s, context, steps)."""
    done = 0
    if scale == 1.0 and max(sim_s, until_s) < deadline_s:
        # The usual case, in fewer operations with the same results: no step starts past until_s, so none at a
        # deadline, and seconds × 1.0 are the same seconds.
        for _ in range(most):
            step_s = base_s + per_token_s * context
            sim_s += step_s
            busy_s += step_s
            context += n
            done += 1
            if sim_s > until_s:
                break
        return sim_s, busy_s, context, done
    for _ in range(most):
        if sim_s >= deadline_s:  # the turn would expire a sequence first
            break
        step_s = base_s + per_token_s * context
        sim_s += step_s * scale
        busy_s += step_s
        context += n
        done += 1
        if sim_s > until_s:  # in progress when the next event comes
            break
    return sim_s, busy_s, context, done


# How each engine schedules a copy (Engine.scheduling names one); docs/planner.md says where they differ.
SCHEDULERS: dict[str, Callable[[CopyScheduler], Iterator[float]]] = {
    "tgi": CopyScheduler.reserved_turn,
    "vllm": CopyScheduler.paged_turn,
    "sglang": CopyScheduler.alternating_turn,
}


C = TypeVar("C", bound=CopyScheduler)


class Router(Generic[C]):
    """The copies of one model behind the endpoint, and how a request is admitted to one of them (`routing`:
    SageMaker's strategy; least outstanding requests by default)."""

    def __init__(self, limits: Limits, copies: list[C], routing: Routing | None = None):
        self.limits = limits
        self.copies = copies
        self.routing = routing or Routing()
        self.rejected_overloaded = 0
        self.rejected_validation = 0
        self.peak_in_flight = 0  # most requests queued or running at once since the publisher last read it
        self._next = 0
        self._rng = random.Random(0)  # RANDOM routing, seeded: two runs route alike
        self._served: dict[Hashable, C] = {}  # PREFIX_AWARE: the copy that last served each leading prefix

    def submit(self, input_tokens: int, max_new_tokens: int | None, deadline_s: float | None,
               arrived_s: float, prefix: Prefix = 0, prefix_key: Hashable | None = None) -> tuple[C, Sequence]:
        """Admit a request to a copy as the routing picks it, as TGI would: 429 first, then 422. `prefix`: its
        prompt's segments; `prefix_key`: what stands for its first `routing.prefix_length` bytes or characters
        (prefix-aware routing; derived from the segments when not given)."""
        strategy = self.routing.strategy
        if strategy == "least-outstanding":
            copy = self._pick()
        elif strategy == "random":
            copy = self._rng.choice(self.copies)
        elif strategy == "prefix-aware":
            if prefix_key is None:
                prefix_key = route_key(segments_of(prefix), -(-self.routing.prefix_length // CHARS_PER_TOKEN))
            copy = self._pick_by_prefix(prefix_key)
        else:
            copy = self._pick_by_cache(segments_of(prefix), input_tokens)
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
        seq = Sequence(input_tokens, max_new_tokens, arrived_s, deadline_s, prefix)
        copy.submit(seq)
        self.peak_in_flight = max(self.peak_in_flight, sum(c.in_flight for c in self.copies))
        return copy, seq

    def _pick(self) -> C:
        n = len(self.copies)
        order = [self.copies[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        return min(order, key=lambda c: c.in_flight)

    def _pick_by_prefix(self, key: Hashable | None) -> C:
        """PREFIX_AWARE: the copy that served this leading prefix, unless its in-flight requests reached the
        concurrency threshold (or it left); else the least loaded, which serves that prefix from now on."""
        copy = self._served.get(key) if key is not None else None
        if copy is None or copy not in self.copies or copy.in_flight >= self.routing.concurrency_threshold:
            copy = self._pick()
        if key is not None:
            self._served[key] = copy
        return copy

    def _pick_by_cache(self, segments: tuple[tuple[Hashable, int], ...], input_tokens: int) -> C:
        """KV_AWARE: the copy whose prefix cache holds the longest start of the prompt, ties to the fewest in
        flight; copies at the admission limit are too busy; no match: least outstanding. (AWS says it weighs the
        match against how busy each copy is without a formula: this weighs busy only at the admission limit.)"""
        least = self._pick()
        if not segments:
            return least
        limit = self.limits.max_concurrent_requests
        held = [(c.held_prefix(segments, input_tokens), c) for c in self.copies
                if limit is None or c.in_flight < limit]
        best = max((h for h, _ in held), default=0)
        if best <= 0:
            return least
        return min((c for h, c in held if h == best), key=lambda c: c.in_flight)

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

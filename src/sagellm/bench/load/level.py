"""One level of a sweep while it runs and after: its book-keeping, window, stop rule and result.

Shared by the closed loop (`closed_loop`) and the open loop (`open_loop`); definitions:
- **Warm-up**: closed loop, each worker's first `warmup` requests; open loop, the level's first `warmup`
  requests. They are logged with `warmup=True` and left out of the statistics and of the stop rule (one
  error rate everywhere: the report's, warm-up excluded).
- **Ramp**: from the level's start until the warm-up is done: every worker has completed its warm-up
  requests (closed loop) or the first max(warmup, 1) requests have completed (open loop); until then
  connections are opening and the first burst of prefills runs.
- **Measured window** (throughput = output tokens ÷ window): from the end of the ramp until the first
  request that is no longer sent (the budget is spent, or the duration is over); after it the requests
  in flight drain (the tail). If a level is too short to have such a window, it is the whole level and
  `ramp_excluded` is False. A closed loop's window ends instead at the last completion, within it, of the
  worker whose warm-up ended the ramp, so it spans whole request cycles: on a continuous-batching server
  equal-length streams move in phase (prompts prefilled together finish together), and a cycle's prefill
  passes bunch up while the rest of it only decodes, so a window that ends mid-cycle over-weights one
  phase (13 % too high on the emulator at 99 streams, all prefills at one end of the window).
- **Client health**: an event-loop probe runs beside the requests (`bottleneck`); the level records its
  mean lag and, open loop, how many requests waited for the in-flight cap, so `LevelResult.bottleneck` can
  say when the load generator, not the endpoint, limited the level.
- **Stop rule**: after a level, escalation stops when more than `max_error_rate` of its measured
  requests failed, or when any measured request timed out. Within a level, once such an outcome is
  certain (a timeout, or with a request budget more errors than the rate allows), no new requests are
  sent; those in flight finish.
- **Over-saturation** (open loop, `StopRule.saturation`): the requests not yet answered keep growing, or a first
  token waits past a limit (`saturation`); the level stops sending at once, its requests in flight finish, and
  it is recorded as over-saturated (`LevelResult.over_saturated`: why and when) with its partial statistics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp

from sagellm.bench.client.workload import Request
from sagellm.bench.load.bottleneck import client_bottleneck
from sagellm.bench.load.saturation import OverSaturated, SaturationRule, SaturationWatch
from sagellm.clock import REAL, Clock
from sagellm.emulator.frontend.loop_lag import LoopLag, probing
from sagellm.results.records import RequestRecord
from sagellm.results.schema import load_name
from sagellm.results.summary import errors_by_kind, tokens_in_window


def cycle_end(records: list[RequestRecord], worker: int, start_s: float, end_s: float) -> float | None:
    """A closed loop's window end in whole cycles: the last completion by `end_s` of a request `worker` (the
    one whose warm-up ended the ramp) sent from `start_s` on (seconds since the run's start)."""
    return max((r.end_s for r in records if r.worker == worker and start_s <= r.start_s and r.end_s <= end_s),
               default=None)


@dataclass(frozen=True)
class StopRule:
    """When a level says the endpoint is past its limit."""

    max_error_rate: float = 0.05  # of the measured requests of the level (warm-up excluded)
    stop_on_timeout: bool = True
    saturation: SaturationRule | None = None  # open loop only (see `saturation`); None: never stop early for it


DEFAULT_STOP_RULE = StopRule()


@dataclass(frozen=True)
class LevelProgress:
    """Reported after every completed request (for a progress display)."""

    load: str  # the level's name: `16` (concurrency) or `4/s` (request rate)
    concurrency: int | None
    completed: int  # requests finished at this level, warm-up included
    planned: int | None  # warm-up + budget with a request budget; None with a duration
    errors: int
    elapsed_s: float  # since the level started
    duration_s: float | None  # the measured duration asked for, if any
    request_rate: float | None = None
    repeat: int = 0


@dataclass
class LevelResult:
    """One run of a level: its records and the window its throughput is measured over."""

    concurrency: int | None
    records: list[RequestRecord]  # every record of the level, warm-up included (marked)
    started_s: float  # seconds since the run started
    ended_s: float
    window_start_s: float
    window_end_s: float
    ramp_excluded: bool
    window_output_tokens: float  # output tokens generated inside the window (see summary.tokens_in_window)
    stopped_reason: str | None = None  # why escalation stops after this level; None to go on
    errors_by_kind: dict[str, int] = field(default_factory=dict)  # measured requests (warm-up excluded)
    request_rate: float | None = None
    repeat: int = 0
    ramp_worker: int | None = None  # closed loop: the worker whose warm-up ended the ramp
    loop_lag_ms: float | None = None  # the client's mean event-loop lag over the level (worst worker's)
    capped: int = 0  # open loop: measured requests that waited for the in-flight cap
    over_saturated: OverSaturated | None = None  # open loop: stopped early, past saturation (see `saturation`)

    def bottleneck(self, clock: Clock = REAL) -> str | None:
        """Why the load generator was this level's bottleneck, or None when it kept up (see `bottleneck`);
        `clock`: the open loop's."""
        measured = self.measured
        late = [r.late_s for r in measured if r.late_s is not None]
        return client_bottleneck(request_rate=self.request_rate, late_s=late, capped=self.capped,
                                 measured=len(measured), loop_lag_ms=self.loop_lag_ms, clock=clock)

    @property
    def load(self) -> str:
        """The level's name: `16` (concurrency) or `4/s` (request rate)."""
        return load_name(self.concurrency, self.request_rate)

    @property
    def measured(self) -> list[RequestRecord]:
        """The records that count in the statistics (warm-up excluded)."""
        return [r for r in self.records if not r.warmup]

    @property
    def window_s(self) -> float:
        """Length of the measured window."""
        return self.window_end_s - self.window_start_s

    @property
    def throughput_tokens_per_s(self) -> float:
        """Output tokens generated in the window ÷ its length."""
        return self.window_output_tokens / self.window_s if self.window_s > 0 else 0.0


class LevelBook:
    """Book-keeping of one level while it runs (single event loop, so no locks)."""

    def __init__(self, *, concurrency: int | None, request_rate: float | None, warmup_requests: int,
                 ramp_count: int, budget: int | None, duration_s: float | None, rule: StopRule,
                 clock_zero: float, on_record: Callable[[RequestRecord], None],
                 on_progress: Callable[[LevelProgress], None] | None = None, repeat: int = 0):
        self.concurrency = concurrency
        self.request_rate = request_rate
        self.warmup_requests = warmup_requests  # warm-up requests of the whole level
        self.budget = budget
        self.duration_s = duration_s
        self.rule = rule
        self.clock_zero = clock_zero
        self.repeat = repeat
        self.on_record = on_record
        self.on_progress = on_progress
        self.started = time.perf_counter()
        self.issued = 0  # measured requests handed out
        self.records: list[RequestRecord] = []
        self.errors = 0  # warm-up included (progress shows every failure)
        self.measured_errors = 0
        self.in_ramp = ramp_count  # ramp_done() calls still to come before the ramp ends
        self.ramp_end: float | None = None
        self.ramp_worker: int | None = None  # closed loop: the worker whose warm-up ended the ramp
        self.deadline: float | None = None
        self.window_end: float | None = None
        self.stopping: str | None = None
        self.capped = 0  # open loop: measured requests that waited for the in-flight cap
        self.lag: LoopLag | None = None  # the event-loop probe running beside the level
        self.watch: SaturationWatch | None = None  # open loop with `rule.saturation`: set by the open loop
        self.over_saturated: OverSaturated | None = None

    @property
    def load(self) -> str:
        return load_name(self.concurrency, self.request_rate)

    @property
    def planned(self) -> int | None:
        return None if self.budget is None else self.budget + self.warmup_requests

    def take(self) -> bool:
        """Whether another measured request may be sent; marks the window's end when not."""
        now = time.perf_counter()
        if self.stopping is None:
            if self.budget is not None and self.issued < self.budget:
                self.issued += 1
                return True
            if self.budget is None and (self.deadline is None or now < self.deadline):
                return True
        if self.window_end is None:
            self.window_end = self.deadline if self.stopping is None and self.deadline is not None else now
        return False

    def ramp_done(self, worker: int | None = None) -> None:
        """One of the ramp's completions (a worker's warm-up; an open loop's first requests) happened."""
        self.in_ramp -= 1
        if self.in_ramp == 0:
            self.ramp_end = time.perf_counter()
            self.ramp_worker = worker
            if self.watch is not None:
                self.watch.ramp_ended(self.ramp_end - self.started)
            if self.duration_s is not None:
                self.deadline = self.ramp_end + self.duration_s

    def record(self, record: RequestRecord, request: Request, *, warmup: bool, worker: int | None = None,
               late_s: float | None = None) -> RequestRecord:
        """A transport's record placed in this level: which level, worker and request sent it, its start in
        seconds since the run started, and the workload's input token count where the server gave none."""
        by_server = record.input_tokens_by == "server"
        return dataclasses.replace(
            record, concurrency=self.concurrency, request_rate=self.request_rate, repeat=self.repeat,
            worker=worker, request=request.index, start_s=record.start_s - self.clock_zero, warmup=warmup,
            conversation=request.conversation, turn=request.turn,
            late_s=late_s, input_tokens=record.input_tokens if by_server else request.input_tokens,
            input_tokens_by=record.input_tokens_by if by_server else request.counted_by)

    def saturated(self, found: OverSaturated | None) -> None:
        """Stop the level as over-saturated when `found` says so (and nothing stopped it before)."""
        if found is not None and self.stopping is None:
            self.stopping, self.over_saturated = "over-saturated", found

    def add(self, record: RequestRecord) -> None:
        """A request finished: book it, then hand it to `on_record` and report progress."""
        self.records.append(record)
        if self.watch is not None:
            self.saturated(self.watch.answered(time.perf_counter() - self.started, record))
        if not record.ok:
            self.errors += 1
            self.measured_errors += not record.warmup
            if self.stopping is None and not record.warmup:
                if record.error_kind == "timeout" and self.rule.stop_on_timeout:
                    self.stopping = "timeout"
                elif self.budget is not None and self.measured_errors > self.rule.max_error_rate * self.budget:
                    self.stopping = "errors"
        self.on_record(record)
        if self.on_progress is not None:
            self.on_progress(self.progress())

    async def run(self, limit: int,
                  start: Callable[[aiohttp.ClientSession, asyncio.TaskGroup], Awaitable[None]]) -> LevelResult:
        """Run the level: `start` creates its requests' tasks in a group, over at most `limit` connections."""
        # TCP_NODELAY: aiohttp sets it on every connection it opens (base_protocol.connection_made).
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            self.started = time.perf_counter()
            try:
                async with probing() as self.lag, asyncio.TaskGroup() as group:
                    await start(session, group)
            except BaseExceptionGroup as group_error:  # e.g. on_record failed: raise what it raised
                raise group_error.exceptions[0] from None
        return self.result()

    def progress(self) -> LevelProgress:
        """Where the level stands now."""
        return LevelProgress(self.load, self.concurrency, len(self.records), self.planned, self.errors,
                             time.perf_counter() - self.started, self.duration_s, self.request_rate, self.repeat)

    def result(self, lag_until: float | None = None) -> LevelResult:
        """The finished level; its loop lag is the probe's from its start to `lag_until` (default: now)."""
        ended = time.perf_counter()
        start, end = self.ramp_end, self.window_end
        z = self.clock_zero
        if self.stopping is None and self.ramp_worker is not None and start is not None and end is not None:
            last = cycle_end(self.records, self.ramp_worker, start - z, end - z)  # see the module docstring
            end = end if last is None else last + z
        ramp_excluded = start is not None and end is not None and end > start
        if not ramp_excluded:
            start, end = self.started, ended
        assert start is not None and end is not None
        measured = [r for r in self.records if not r.warmup]
        errors = errors_by_kind(measured)
        return LevelResult(
            concurrency=self.concurrency, request_rate=self.request_rate, repeat=self.repeat,
            records=self.records, started_s=self.started - z, ended_s=ended - z, window_start_s=start - z,
            window_end_s=end - z, ramp_excluded=ramp_excluded, stopped_reason=self._stopped_reason(errors, len(measured)),
            window_output_tokens=tokens_in_window(measured, start - z, end - z),
            errors_by_kind=errors, ramp_worker=self.ramp_worker, capped=self.capped,
            over_saturated=self.over_saturated,
            loop_lag_ms=self.lag.mean_ms(self.started, lag_until or ended) if self.lag is not None else None,
        )

    def _stopped_reason(self, errors: dict[str, int], total: int) -> str | None:
        if self.over_saturated is not None:
            return self.over_saturated.reason
        at = f"request rate {self.load}" if self.request_rate is not None else f"concurrency {self.load}"
        return error_stop_reason(errors, total, at, self.rule)


def error_stop_reason(errors: dict[str, int], total: int, at: str, rule: StopRule) -> str | None:
    """Why escalation stops after a level whose `total` measured requests failed as `errors` says (None: go on)."""
    if total == 0:
        return None
    if rule.stop_on_timeout and errors["timeout"]:
        return (f"{errors['timeout']} of {total} requests timed out (the 60 s invocation timeout or "
                f"the client timeout) at {at}")
    failed = sum(errors.values())
    if failed / total > rule.max_error_rate:
        kinds = ", ".join(f"{n} {kind}" for kind, n in errors.items() if n)
        return f"error rate {failed / total:.1%} > {rule.max_error_rate:.0%} at {at} ({kinds})"
    return None

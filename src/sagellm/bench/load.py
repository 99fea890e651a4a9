"""The closed-loop sweep: for each concurrency C, C workers each send their next request as the last returns.

Definitions (the report and the summary rely on them):
- **Warm-up**: each worker's first `warmup` requests of every level (a new level opens new connections,
  so a worker's first request also pays for connecting). They are logged with `warmup=True` and left
  out of the statistics and of the stop rule (one error rate everywhere: the report's, warm-up excluded).
- **Ramp**: from the level's start until every worker has completed its warm-up requests (its first
  request when `warmup=0`). Until then the level is still starting: connections opening and the first
  burst of C prefills, with no request yet sent back-to-back.
- **Measured window** (for throughput = output tokens ÷ window): from the end of the ramp until the
  first worker finds no more work (with a request budget), or for `duration_per_level_s` seconds
  after the ramp (with a duration); after it fewer than C requests are in flight (the tail). If a level
  is too short to have such a window, it is the whole level and `ramp_excluded` is False.
- **Tokens in the window**: each ok request's output tokens are spread evenly over its token events
  (TGI: one event per token) and counted where the events fall inside the window. Counting whole
  requests by when they completed would be lumpy: a continuous-batching server keeps a closed loop's
  requests in phase, so they complete in waves, and a window holds one wave more or less by chance.
- **Stop rule**: after a level, escalation stops when more than `max_error_rate` of its measured
  requests failed, or when any measured request timed out (the 60 s invocation timeout, or the client
  timeout). Within a level, once such an outcome is certain (a timeout, or with a request budget more
  errors than the rate allows), no new requests are sent; those in flight finish.
Cancelling `run_sweep` cancels the requests in flight; every finished record has already gone to
`on_record`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from sagellm.bench.records import RequestRecord
from sagellm.bench.summary import errors_by_kind, tokens_in_window
from sagellm.bench.transports import Transport


@dataclass(frozen=True)
class StopRule:
    """When a level says the endpoint is past its limit."""

    max_error_rate: float = 0.05  # of the measured requests of the level (warm-up excluded)
    stop_on_timeout: bool = True


@dataclass(frozen=True)
class LevelProgress:
    """Reported after every completed request (for a progress bar)."""

    concurrency: int
    completed: int  # requests finished at this level, warm-up included
    planned: int | None  # warm-up + budget with a request budget; None with a duration
    errors: int
    elapsed_s: float  # since the level started
    duration_s: float | None  # the measured duration asked for, if any


@dataclass
class LevelResult:
    """One concurrency level: its records and the window its throughput is measured over."""

    concurrency: int
    records: list[RequestRecord]  # every record of the level, warm-up included (marked)
    started_s: float  # seconds since the run started
    ended_s: float
    window_start_s: float
    window_end_s: float
    ramp_excluded: bool
    window_output_tokens: float  # output tokens generated inside the window (see the module docstring)
    stopped_reason: str | None = None  # why escalation stops after this level; None to go on
    errors_by_kind: dict[str, int] = field(default_factory=dict)  # measured requests (warm-up excluded)

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


class _Level:
    """Book-keeping of one level while it runs (single event loop, so no locks)."""

    def __init__(self, concurrency: int, warmup: int, budget: int | None, duration_s: float | None,
                 rule: StopRule, clock_zero: float):
        self.concurrency = concurrency
        self.warmup = warmup
        self.budget = budget
        self.duration_s = duration_s
        self.rule = rule
        self.clock_zero = clock_zero
        self.started = time.perf_counter()
        self.issued = 0  # measured requests handed out
        self.records: list[RequestRecord] = []
        self.errors = 0  # warm-up included (progress shows every failure)
        self.measured_errors = 0
        self.in_ramp = concurrency  # workers that have not completed their warm-up yet
        self.ramp_end: float | None = None
        self.deadline: float | None = None
        self.window_end: float | None = None
        self.stopping: str | None = None

    @property
    def planned(self) -> int | None:
        return None if self.budget is None else self.budget + self.warmup * self.concurrency

    def take(self) -> bool:
        """Whether a worker may send another measured request; marks the window's end when not."""
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

    def ramp_done(self) -> None:
        """A worker completed its warm-up (or first) request."""
        self.in_ramp -= 1
        if self.in_ramp == 0:
            self.ramp_end = time.perf_counter()
            if self.duration_s is not None:
                self.deadline = self.ramp_end + self.duration_s

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if not record.ok:
            self.errors += 1
            self.measured_errors += not record.warmup
            if self.stopping is None and not record.warmup:
                if record.error_kind == "timeout" and self.rule.stop_on_timeout:
                    self.stopping = "timeout"
                elif self.budget is not None and self.measured_errors > self.rule.max_error_rate * self.budget:
                    self.stopping = "errors"

    def result(self) -> LevelResult:
        ended = time.perf_counter()
        start, end = self.ramp_end, self.window_end
        ramp_excluded = start is not None and end is not None and end > start
        if not ramp_excluded:
            start, end = self.started, ended
        measured = [r for r in self.records if not r.warmup]
        errors = errors_by_kind(measured)
        z = self.clock_zero
        return LevelResult(
            concurrency=self.concurrency, records=self.records, started_s=self.started - z,
            ended_s=ended - z, window_start_s=start - z, window_end_s=end - z,  # type: ignore[operator]
            ramp_excluded=ramp_excluded, stopped_reason=self._stopped_reason(errors, len(measured)),
            window_output_tokens=tokens_in_window(measured, start - z, end - z),  # type: ignore[operator]
            errors_by_kind=errors,
        )

    def _stopped_reason(self, errors: dict[str, int], total: int) -> str | None:
        if total == 0:
            return None
        if self.rule.stop_on_timeout and errors["timeout"]:
            return (f"{errors['timeout']} of {total} requests timed out (the 60 s invocation timeout or "
                    f"the client timeout) at concurrency {self.concurrency}")
        failed = sum(errors.values())
        if failed / total > self.rule.max_error_rate:
            kinds = ", ".join(f"{n} {kind}" for kind, n in errors.items() if n)
            return (f"error rate {failed / total:.1%} > {self.rule.max_error_rate:.0%} at concurrency "
                    f"{self.concurrency} ({kinds})")
        return None


async def run_level(transport: Transport, *, concurrency: int, requests: int | None,
                    duration_s: float | None, warmup: int, prompt: str, input_tokens: int,
                    output_tokens: int, on_record: Callable[[RequestRecord], None],
                    on_progress: Callable[[LevelProgress], None] | None = None,
                    stop_rule: StopRule = StopRule(), clock_zero: float | None = None) -> LevelResult:
    """Run one closed-loop level with `concurrency` workers and return its records and window."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if (requests is None) == (duration_s is None):
        raise ValueError("give exactly one of requests (per level) and duration_s")
    zero = time.perf_counter() if clock_zero is None else clock_zero
    level = _Level(concurrency, warmup, requests, duration_s, stop_rule, zero)

    async def worker(index: int, session: aiohttp.ClientSession) -> None:
        sent = 0
        while True:
            warming = sent < warmup
            if warming:
                if level.stopping is not None:
                    break
            elif not level.take():
                break
            outcome = await transport.send(session, prompt, output_tokens)
            record = outcome.to_record(concurrency=concurrency, worker=index, clock_zero=zero,
                                       input_tokens=input_tokens, warmup=warming)
            sent += 1
            if sent == max(warmup, 1):
                level.ramp_done()
            level.add(record)
            on_record(record)
            if on_progress is not None:
                on_progress(LevelProgress(concurrency, len(level.records), level.planned, level.errors,
                                          time.perf_counter() - level.started, duration_s))

    # TCP_NODELAY: aiohttp sets it on every connection it opens (base_protocol.connection_made).
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        level.started = time.perf_counter()
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(concurrency):
                    group.create_task(worker(index, session))
        except BaseExceptionGroup as group_error:  # e.g. on_record failed: raise what it raised
            raise group_error.exceptions[0] from None
    return level.result()


async def run_sweep(transport: Transport, *, concurrency: list[int],
                    requests_per_level: int | Callable[[int], int] | None,
                    duration_per_level_s: float | None, warmup: int, input_tokens: int, output_tokens: int,
                    prompt_fn: Callable[[int], str], on_record: Callable[[RequestRecord], None],
                    on_progress: Callable[[LevelProgress], None] | None = None,
                    on_level: Callable[[LevelResult], None] | None = None,
                    stop_rule: StopRule = StopRule()) -> list[LevelResult]:
    """Run the levels in order until one says stop; times in the records count from the sweep's start.

    `requests_per_level` is the measured requests per level, on top of `warmup` per worker, or a function
    of the level's concurrency (e.g. a few × concurrency, so every worker loops). `on_level` gets each
    finished level at once, so an interrupted sweep keeps the levels it completed. The prompt is built once (`prompt_fn(input_tokens)`)
    and sent by every request.
    """
    if (requests_per_level is None) == (duration_per_level_s is None):
        raise ValueError("give exactly one of requests_per_level and duration_per_level_s")
    prompt = prompt_fn(input_tokens)
    zero = time.perf_counter()
    results: list[LevelResult] = []
    for c in concurrency:
        budget = requests_per_level(c) if callable(requests_per_level) else requests_per_level
        result = await run_level(transport, concurrency=c, requests=budget,
                                 duration_s=duration_per_level_s, warmup=warmup, prompt=prompt,
                                 input_tokens=input_tokens, output_tokens=output_tokens, on_record=on_record,
                                 on_progress=on_progress, stop_rule=stop_rule, clock_zero=zero)
        results.append(result)
        if on_level is not None:
            on_level(result)
        if result.stopped_reason is not None:
            break
    return results

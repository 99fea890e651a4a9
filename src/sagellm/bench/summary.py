"""Per-level summary of request records, and what is read off a measured sweep: knee, max, SLO, cost."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from sagellm.bench.records import ERROR_KINDS, RequestRecord
from sagellm.planner.curve import knee_index

# A level is "usable" (may be the knee, the max-throughput point or the best under an SLO) when none of
# its requests hit the invocation timeout and at most this fraction of them failed for any reason: the
# same fraction that stops the sweep (load.StopRule), so the last level a sweep keeps going past is usable.
MAX_ERROR_RATE = 0.05

KNEE_DEFINITION = "maximum of throughput ÷ p50 ms/token among usable levels"


def max_definition(max_error_rate: float = MAX_ERROR_RATE) -> str:
    """How the max-throughput point was picked, for the report."""
    return f"highest throughput among levels with no timeouts and error rate ≤ {max_error_rate:.0%}"


class Stats(BaseModel):
    """Distribution of one metric; None where there was no sample."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


class LevelSummary(BaseModel):
    """What one concurrency level measured (warm-up excluded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int
    requests: int
    ok: int
    errors: dict[str, int]  # every error kind, zero included
    error_rate: float
    retries: int
    window_s: float
    output_tokens: float  # generated inside the window (token events counted where they fall)
    throughput_tokens_per_s: float
    requests_per_s: float
    latency_ms_per_token: Stats  # e2e ÷ output tokens per request (the published definition)
    ttft_ms: Stats
    itl_ms: Stats  # pooled inter-token gaps of all ok requests
    e2e_s: Stats
    client_overhead_ms: Stats | None = None  # client e2e − server e2e, where the server reported it


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100), linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def stats(values: Sequence[float]) -> Stats:
    """p50, p90, p99 and mean of a sample."""
    if not values:
        return Stats()
    return Stats(
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
        mean=sum(values) / len(values),
    )


def tokens_in_window(records: Sequence[RequestRecord], start_s: float, end_s: float) -> float:
    """Output tokens of ok requests generated in [start_s, end_s], spread evenly over each one's token events."""
    total = 0.0
    for r in records:
        if not r.ok or r.output_tokens <= 0:
            continue
        if r.ttft_s is None:  # no token events (not streamed): all tokens at the end
            total += r.output_tokens if start_s <= r.end_s <= end_s else 0
            continue
        first = r.start_s + r.ttft_s
        if first > end_s or r.end_s < start_s:
            continue
        per_event = r.output_tokens / (1 + len(r.itl_s))
        if start_s <= first and r.end_s <= end_s:
            total += r.output_tokens
            continue
        t = first
        inside = 1 if start_s <= t <= end_s else 0
        for gap in r.itl_s:
            t += gap
            if t > end_s:
                break
            if t >= start_s:
                inside += 1
        total += inside * per_event
    return total


def summarize(records: Sequence[RequestRecord], *, window_start_s: float, window_end_s: float) -> LevelSummary:
    """Summarize one level; throughput counts the tokens generated inside the window.

    Counting tokens where their events fall, not requests where they complete, matters: a batching
    server keeps a closed loop's requests in phase, so they complete in waves that a window edge
    would cut whole.
    """
    levels = {r.concurrency for r in records}
    if len(levels) != 1:
        raise ValueError(f"records must belong to exactly one concurrency level, got {sorted(levels)}")
    if window_end_s <= window_start_s:
        raise ValueError(f"empty window [{window_start_s}, {window_end_s}]")
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    errors: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for r in measured:
        if not r.ok:
            errors[r.error_kind or "other"] += 1
    window_s = window_end_s - window_start_s
    tokens = tokens_in_window(measured, window_start_s, window_end_s)
    mean_tokens = sum(r.output_tokens for r in ok) / len(ok) if ok else 0
    overhead = [(r.e2e_s - r.server_e2e_s) * 1000 for r in ok if r.server_e2e_s is not None]
    return LevelSummary(
        concurrency=levels.pop(),
        requests=len(measured),
        ok=len(ok),
        errors=errors,
        error_rate=(len(measured) - len(ok)) / len(measured) if measured else 0.0,
        retries=sum(r.retries for r in measured),
        window_s=window_s,
        output_tokens=tokens,
        throughput_tokens_per_s=tokens / window_s,
        requests_per_s=tokens / mean_tokens / window_s if mean_tokens else 0.0,
        latency_ms_per_token=stats([r.e2e_s / r.output_tokens * 1000 for r in ok if r.output_tokens > 0]),
        ttft_ms=stats([r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
        itl_ms=stats([gap * 1000 for r in ok for gap in r.itl_s]),
        e2e_s=stats([r.e2e_s for r in ok]),
        client_overhead_ms=stats(overhead) if overhead else None,
    )


L = TypeVar("L", bound=LevelSummary)


def is_usable(level: LevelSummary, max_error_rate: float = MAX_ERROR_RATE) -> bool:
    """No timeouts, error rate within the limit, and something measured."""
    return (
        level.errors.get("timeout", 0) == 0
        and level.error_rate <= max_error_rate
        and level.throughput_tokens_per_s > 0
        and level.latency_ms_per_token.p50 is not None
    )


def _usable_sorted(levels: Sequence[L], max_error_rate: float) -> list[L]:
    return sorted((lv for lv in levels if is_usable(lv, max_error_rate)), key=lambda lv: lv.concurrency)


def knee(levels: Sequence[L], *, max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The measured knee: maximum of throughput ÷ p50 ms/token among usable levels (as the planner's)."""
    usable = _usable_sorted(levels, max_error_rate)
    i = knee_index([lv.throughput_tokens_per_s for lv in usable],
                   [lv.latency_ms_per_token.p50 or 0.0 for lv in usable])
    return None if i is None else usable[i]


def _best(levels: list[L], key: Callable[[L], float]) -> L | None:
    # max() keeps the first of equal keys: the lowest concurrency, since the list is sorted.
    return max(levels, key=key, default=None)


def max_throughput(levels: Sequence[L], *, max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The highest-throughput usable level (no timeouts, error rate ≤ max_error_rate)."""
    return _best(_usable_sorted(levels, max_error_rate), lambda lv: lv.throughput_tokens_per_s)


def best_under_slo(levels: Sequence[L], slo_ms_per_token: float, *,
                   max_error_rate: float = MAX_ERROR_RATE) -> L | None:
    """The highest-throughput usable level whose p50 ms/token is within the SLO."""
    within = [lv for lv in _usable_sorted(levels, max_error_rate)
              if (lv.latency_ms_per_token.p50 or math.inf) <= slo_ms_per_token]
    return _best(within, lambda lv: lv.throughput_tokens_per_s)


def usd_per_h(price_per_instance_h: float | None, instance_count: int) -> float | None:
    """Endpoint $/h = catalog on-demand price × instance count."""
    return None if price_per_instance_h is None else price_per_instance_h * instance_count



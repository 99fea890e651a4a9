"""Per-level summary of request records: percentiles, and tokens counted where their events fall."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sagellm.bench.records import RequestRecord
from sagellm.results.schema import ERROR_KINDS, LevelSummary, Stats


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
    """p50, p90, p95, p99 and mean of a sample."""
    if not values:
        return Stats()
    return Stats(
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p95=percentile(values, 95),
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

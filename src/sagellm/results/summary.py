"""Per-level summary of request records: percentiles, per-request ITL, tokens counted where their events fall,
SLO attainment and goodput, and the spread of repeated runs of a level."""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate, chain, repeat
from typing import Any

from sagellm.results.records import RequestRecord
from sagellm.results.schema import ERROR_KINDS, Goodput, LevelSummary, RequestSlo, Spread, Stats, TurnSummary

# Metrics whose spread across repeats is reported (each repeat's own value).
SPREAD_METRICS: tuple[str, ...] = (
    "throughput_tokens_per_s", "requests_per_s", "error_rate",
    "slo_attainment", "goodput.requests_per_s", "goodput.tokens_per_s",
    *(f"{m}.{s}" for m in ("latency_ms_per_token", "ttft_ms", "itl_ms", "e2e_s")
      for s in ("p50", "p90", "p95", "p99", "mean")),
)

# One run of a level: its records and the window its throughput is measured over.
TimedRun = tuple[Sequence[RequestRecord], float, float]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100), linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    return _percentile_of_sorted(ordered.__getitem__, len(ordered), q)


def _percentile_of_sorted(at: Callable[[int], float], n: int, q: float) -> float:
    """The q-th percentile of n sorted values, `at(i)` the i-th smallest."""
    pos = (n - 1) * q / 100
    lo = math.floor(pos)
    low, high = at(lo), at(min(lo + 1, n - 1))
    return low + (high - low) * (pos - lo)


def _four_percentiles(at: Callable[[int], float], n: int, mean: float) -> Stats:
    """p50, p90, p95 and p99 of n sorted values (`at(i)` the i-th smallest), with their mean."""
    return Stats(p50=_percentile_of_sorted(at, n, 50), p90=_percentile_of_sorted(at, n, 90),
                 p95=_percentile_of_sorted(at, n, 95), p99=_percentile_of_sorted(at, n, 99), mean=mean)


def stats(values: Sequence[float]) -> Stats:
    """p50, p90, p95, p99 and mean of a sample."""
    if not values:
        return Stats()
    ordered = sorted(values)  # once for the four
    return _four_percentiles(ordered.__getitem__, len(ordered), sum(values) / len(values))


def stats_of_runs(runs: Sequence[tuple[float, int]]) -> Stats:
    """stats() of the values `runs` lists as (value, times in a row), in order, without the list: the same
    percentiles (the same values sorted) and mean (the same sum, added in the same order)."""
    n = sum(count for _, count in runs)
    if n == len(runs):  # no repeats (a measured level's gaps): the plain list sorts faster than pairs
        return stats([value for value, _ in runs])
    ordered = sorted((value, count) for value, count in runs if count)
    ends = list(accumulate(count for _, count in ordered))  # ends[i]: how many of the sorted values are ≤ run i's

    def at(i: int) -> float:  # the i-th smallest value
        return ordered[bisect_right(ends, i)][0]

    return _four_percentiles(at, n, sum(chain.from_iterable(repeat(value, count) for value, count in runs)) / n)


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
        per_event = r.output_tokens / (1 + len(r.token_gaps_s))
        if start_s <= first and r.end_s <= end_s:
            total += r.output_tokens
            continue
        t = first
        inside = 1 if start_s <= t <= end_s else 0
        for gap in r.token_gaps_s:
            t += gap
            if t > end_s:
                break
            if t >= start_s:
                inside += 1
        total += inside * per_event
    return total


def summarize(records: Sequence[RequestRecord], *, window_start_s: float, window_end_s: float,
              slo: RequestSlo | None = None) -> LevelSummary:
    """Summarize one run of a level; throughput counts the tokens generated inside the window.

    Counting tokens where their events fall, not requests where they complete, matters: a batching
    server keeps a closed loop's requests in phase, so they complete in waves that a window edge
    would cut whole.
    """
    return summarize_runs([(records, window_start_s, window_end_s)], slo)


def meets(record: RequestRecord, slo: RequestSlo) -> bool:
    """Whether a request met every per-request SLO: it succeeded and each figure the SLO limits is at or under its
    limit (vLLM's benchmark_serving `--goodput` test). One output token has no inter-token time (0, as vLLM
    counts it); a TTFT the record lacks (not streamed) cannot be shown to meet its limit, so it misses."""
    if not record.ok:
        return False
    per_token = slo.per_token_ms
    if slo.ttft_ms is not None or per_token is not None:
        if record.ttft_s is None:
            return False
        if slo.ttft_ms is not None and record.ttft_s * 1000 > slo.ttft_ms:
            return False
        if per_token is not None and (record.itl_s or 0.0) * 1000 > per_token:
            return False
    return slo.e2e_ms is None or record.e2e_s * 1000 <= slo.e2e_ms


def goodput_of(runs: Sequence[TimedRun], slo: RequestSlo, *, warmup_tokens: bool = False) -> Goodput:
    """The rates of the requests that met the SLO, counted as throughput and requests/s are: their tokens inside
    the windows (the warm-up's too where `warmup_tokens`, as a prediction counts the load its window saw), and
    requests from those tokens and the mean output of a measured one."""
    good = [([r for r in run if meets(r, slo) and (warmup_tokens or not r.warmup)], start, end)
            for run, start, end in runs]
    tokens = sum(tokens_in_window(run, start, end) for run, start, end in good)
    window_s = sum(end - start for _, start, end in runs)
    measured = [r for run, _, _ in good for r in run if not r.warmup]
    return Goodput(requests_per_s=_requests_per_s(measured, tokens, window_s), tokens_per_s=tokens / window_s)


def errors_by_kind(records: Sequence[RequestRecord]) -> dict[str, int]:
    """Failed requests by kind, every kind present (zero included)."""
    errors: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for r in records:
        if not r.ok:
            errors[r.error_kind or "other"] += 1
    return errors


def summarize_runs(runs: Sequence[TimedRun], slo: RequestSlo | None = None) -> LevelSummary:
    """Summarize a level run once or more (`--repeats`): every request of every run in the statistics,
    throughput over the runs' windows together, and with several runs the spread of each run's own figures;
    with per-request SLOs, the share of measured requests that met them (a failed one misses) and their goodput."""
    records = _one_level(runs)
    first = records[0]
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    window_s = sum(end - start for _, start, end in runs)
    tokens = sum(tokens_in_window([r for r in run if not r.warmup], start, end) for run, start, end in runs)
    open_loop = first.request_rate is not None
    return LevelSummary(
        concurrency=first.concurrency if not open_loop else None, request_rate=first.request_rate,
        repeats=len(runs),
        requests=len(measured),
        ok=len(ok),
        errors=errors_by_kind(measured),
        error_rate=(len(measured) - len(ok)) / len(measured) if measured else 0.0,
        refused_no_capacity=sum(r.no_capacity for r in measured),
        retries=sum(r.retries for r in measured),
        window_s=window_s,
        output_tokens=tokens,
        throughput_tokens_per_s=tokens / window_s,
        requests_per_s=_requests_per_s(ok, tokens, window_s),
        **_distributions(ok),
        **(_pacing(runs, measured, window_s) if open_loop else {}),
        client_overhead_ms=_client_overhead_ms(ok),
        **(_slo_figures(runs, measured, slo) if slo is not None else {}),
        spread=spread([summarize_runs([run], slo) for run in runs]) if len(runs) > 1 else None,
        by_turn=by_turn(measured),
    )


def _pacing(runs: Sequence[TimedRun], measured: Sequence[RequestRecord], window_s: float) -> dict[str, Any]:
    """An open loop's schedule as kept: how late requests were sent, and the rate achieved."""
    return {"lateness_ms": _lateness_ms(measured), "achieved_request_rate": _sent(runs) / window_s}


def _slo_figures(runs: Sequence[TimedRun], measured: Sequence[RequestRecord], slo: RequestSlo) -> dict[str, Any]:
    """The share of measured requests that met the SLOs (a failed one misses), and the goodput."""
    attainment = sum(meets(r, slo) for r in measured) / len(measured) if measured else None
    return {"slo_attainment": attainment, "goodput": goodput_of(runs, slo)}


def _one_level(runs: Sequence[TimedRun]) -> list[RequestRecord]:
    """Every record of the runs; ValueError unless they are of one level and each window has a length."""
    records = [r for run, _, _ in runs for r in run]
    levels = {r.load for r in records}
    if len(levels) != 1:
        raise ValueError(f"records must belong to exactly one level, got {sorted(levels)}")
    for _, start, end in runs:
        if end <= start:
            raise ValueError(f"empty window [{start}, {end}]")
    return records


def _requests_per_s(ok: Sequence[RequestRecord], tokens: float, window_s: float) -> float:
    """Requests completed per second, from the tokens in the window and the mean output of an ok request."""
    mean_tokens = sum(r.output_tokens for r in ok) / len(ok) if ok else 0
    return tokens / mean_tokens / window_s if mean_tokens else 0.0


def by_turn(measured: Sequence[RequestRecord]) -> list[TurnSummary] | None:
    """The measured requests of conversations by turn (TTFT, e2e and input tokens of the ok ones); None when no
    request was a conversation's turn."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in measured:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    if not turns:
        return None
    out = []
    for turn, records in sorted(turns.items()):
        ok = [r for r in records if r.ok]
        out.append(TurnSummary(turn=turn, requests=len(records), ok=len(ok),
                               ttft_ms=stats([r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
                               e2e_s=stats([r.e2e_s for r in ok]),
                               request_input_tokens=stats([float(r.input_tokens) for r in ok])))
    return out


def _distributions(ok: Sequence[RequestRecord]) -> dict[str, Stats]:
    """The per-request statistics of the ok requests, by LevelSummary field."""
    itl = stats([r.itl_s * 1000 for r in ok if r.itl_s is not None])
    return {
        "latency_ms_per_token": stats([r.e2e_s / r.output_tokens * 1000 for r in ok if r.output_tokens > 0]),
        "ttft_ms": stats([r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
        "itl_ms": itl,
        "tpot_ms": itl,
        "token_gap_ms": stats_of_runs(_token_gap_runs_ms(ok)),
        "e2e_s": stats([r.e2e_s for r in ok]),
        "request_input_tokens": stats([float(r.input_tokens) for r in ok]),
        "request_output_tokens": stats([float(r.output_tokens) for r in ok]),
    }


def _token_gap_runs_ms(ok: Sequence[RequestRecord]) -> list[tuple[float, int]]:
    """Every token gap of the requests, in ms, in order, as (gap, times in a row). A simulated request's gaps are one
    value repeated (results.simulated.record_of): one run each, so a simulated level's 150,000 gaps are neither
    listed nor sorted one by one (that was most of its summary)."""
    out: list[tuple[float, int]] = []
    for r in ok:
        gaps = r.token_gaps_s
        if gaps and gaps.count(gaps[0]) == len(gaps):
            out.append((gaps[0] * 1000, len(gaps)))
        else:
            out += [(gap * 1000, 1) for gap in gaps]
    return out


def _lateness_ms(measured: Sequence[RequestRecord]) -> Stats:
    """How late an open loop sent each request against its schedule."""
    return stats([r.late_s * 1000 for r in measured if r.late_s is not None])


def _sent(runs: Sequence[TimedRun]) -> int:
    """Measured requests sent inside their run's window (an open loop's achieved rate)."""
    return sum(1 for run, start, end in runs for r in run if not r.warmup and start <= r.start_s <= end)


def _client_overhead_ms(ok: Sequence[RequestRecord]) -> Stats | None:
    """Client e2e − server e2e of the ok requests, where the server reports its own (the emulator)."""
    overhead = [(r.client_e2e_s - r.server_e2e_s) * 1000 for r in ok
                if r.client_e2e_s is not None and r.server_e2e_s is not None]
    return stats(overhead) if overhead else None


def _value(summary: LevelSummary, metric: str) -> float | None:
    obj: Any = summary
    for part in metric.split("."):
        obj = getattr(obj, part) if obj is not None else None  # goodput is None without SLOs
    return obj


def spread(summaries: Sequence[LevelSummary]) -> dict[str, Spread]:
    """Mean, sample standard deviation, min and max of each SPREAD_METRICS figure across runs of a level."""
    out = {}
    for metric in SPREAD_METRICS:
        values = [v for s in summaries if (v := _value(s, metric)) is not None]
        if values:
            out[metric] = Spread(mean=statistics.fmean(values),
                                 stddev=statistics.stdev(values) if len(values) > 1 else 0.0,
                                 min=min(values), max=max(values))
    return out

"""A server's Prometheus `/metrics` (vLLM, TGI): scraped before and after a level, the differences reported.

Counters give their increase; histograms their increase in count and sum, so a mean over the level (bucket
edges differ between servers and versions, so no percentiles are estimated). The metric names are each
engine's (sagellm.engines: vLLM's in lmi, TGI's in tgi).
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from datetime import datetime

from sagellm.engines import ENGINES
from sagellm.errors import TargetError
from sagellm.results.schema import ServerMetric, ServerMetrics, ServerStats

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")

# results name → unit, in the order the results list them
HISTOGRAM_UNITS = {"e2e_latency_ms": "ms", "ttft_ms": "ms", "itl_ms": "ms", "time_per_token_ms": "ms",
                   "queue_time_ms": "ms"}
COUNTER_UNITS = {"requests": "count", "prompt_tokens": "tokens", "generation_tokens": "tokens",
                 "prefix_cache_queries": "tokens", "prefix_cache_hits": "tokens"}
# results name → (unit, every engine's candidate histograms in seconds / samples whose increase is reported)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    key: (unit, tuple(n for e in ENGINES.values() for n in e.histograms.get(key, ())))
    for key, unit in HISTOGRAM_UNITS.items()
}
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    key: (unit, tuple(n for e in ENGINES.values() for n in e.counters.get(key, ())))
    for key, unit in COUNTER_UNITS.items()
}


def parse(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text exposition, summed over its label sets (buckets left out)."""
    out: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m is None or m[1].endswith("_bucket"):
            continue  # comments (# HELP, # TYPE), blank lines, histogram buckets
        try:
            out[m[1]] += float(m[3])
        except ValueError:
            continue
    return dict(out)


def scrape(base: str, timeout_s: float = 5.0) -> dict[str, float]:
    """GET `{base}/metrics` and parse it; TargetError when the server has none."""
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=timeout_s) as reply:
            return parse(reply.read().decode("utf-8", errors="replace"))
    except OSError as exc:
        raise TargetError(f"{base}/metrics: cannot be scraped: {exc}") from None


def known(samples: dict[str, float]) -> bool:
    """Whether a scrape holds any metric this module reads (a vLLM or TGI server's)."""
    names = [n for _, candidates in (*HISTOGRAMS.values(), *COUNTERS.values()) for n in candidates]
    return any(n in samples or f"{n}_count" in samples for n in names)


def differences(before: dict[str, float], after: dict[str, float], start: datetime,
                end: datetime) -> ServerMetrics:
    """What the server counted between two scrapes."""
    metrics: dict[str, ServerMetric] = {}
    for key, (unit, names) in HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_count" in after), None)
        if name is None:
            continue
        count = after[f"{name}_count"] - before.get(f"{name}_count", 0.0)
        total_ms = (after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)) * 1000
        stats = ServerStats(count=count, sum=total_ms, avg=total_ms / count if count else None)
        metrics[key] = ServerMetric(unit=unit, name=name, stats=stats)  # type: ignore[arg-type]
    for key, (unit, names) in COUNTERS.items():
        name = next((n for n in names if n in after), None)
        if name is not None:
            metrics[key] = ServerMetric(unit=unit, name=name,  # type: ignore[arg-type]
                                        stats=ServerStats(sum=after[name] - before.get(name, 0.0)))
    return ServerMetrics(source="prometheus", window_start=start, window_end=end, metrics=metrics)

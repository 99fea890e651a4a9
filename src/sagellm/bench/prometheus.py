"""A server's Prometheus `/metrics` (vLLM, TGI): scraped before and after a level, the differences reported.

Counters give their increase; histograms their increase in count and sum, so a mean over the level (bucket
edges differ between servers and versions, so no percentiles are estimated). Names (vLLM 0.10–0.12 and TGI
3.x, from their sources): vLLM serves Counters with `_total` appended; it renamed
`time_per_output_token_seconds` to `inter_token_latency_seconds` in 0.11, so both are tried, newest first.
TGI has no TTFT histogram; its `tgi_request_mean_time_per_token_duration` is inference time ÷ generated
tokens, prefill included, so it is reported as `time_per_token_ms`, not as ITL.
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from datetime import datetime

from sagellm.errors import TargetError
from sagellm.results.schema import ServerMetric, ServerMetrics, ServerStats

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)")

# results name → (unit, candidate histograms in seconds, newest name first)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "e2e_latency_ms": ("ms", ("vllm:e2e_request_latency_seconds", "tgi_request_duration")),
    "ttft_ms": ("ms", ("vllm:time_to_first_token_seconds",)),
    "itl_ms": ("ms", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
    "time_per_token_ms": ("ms", ("tgi_request_mean_time_per_token_duration",)),
    "queue_time_ms": ("ms", ("vllm:request_queue_time_seconds", "tgi_request_queue_duration")),
}
# results name → (unit, candidate samples whose increase is reported)
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests": ("count", ("vllm:request_success_total", "tgi_request_count")),
    "prompt_tokens": ("tokens", ("vllm:prompt_tokens_total", "tgi_request_input_length_sum")),
    "generation_tokens": ("tokens", ("vllm:generation_tokens_total", "tgi_request_generated_tokens_sum")),
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

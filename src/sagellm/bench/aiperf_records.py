"""AIPerf's per-request export (`profile_export.jsonl`) as the bench's request records, so a level AIPerf measured is
summarised, gated and reported by the same code, with the same definitions, as a level the bench's own client ran.

One JSON object a line: `metadata` (when the request started, its phase), `metrics` (`{"value", "unit"}` per metric)
and `error` (`{"code", "type", "message"}` or null). Field names as AIPerf wrote them (both spellings are read):

| record | AIPerf (0.1.x, e.g. examples/artifacts/run1 @7c31f57) | AIPerf (later: docs/tutorials/working-with-profile-exports.md) |
|---|---|---|
| start | metadata.timestamp_ns | metadata.request_start_ns |
| end (failed request) | — (e2e 0) | metadata.request_end_ns |
| warm-up | metadata.credit_phase == "warmup" | metadata.benchmark_phase == "warmup" |
| TTFT | metrics.ttft (ms) | metrics.time_to_first_token (ms) |
| e2e | metrics.request_latency (ms) | the same |
| output tokens | metrics.output_sequence_length (reasoning included), else output_token_count | the same |
| input tokens | metrics.input_sequence_length (AIPerf's tokenizer) | the same |
| token gaps | metrics.inter_chunk_latency (ms, one per chunk after the first) | the same |

AIPerf's ITL is the bench's: (e2e − TTFT) ÷ (output tokens − 1) per request (AIPerf docs/metrics-reference.md), and
both take percentiles by linear interpolation, so the bench's figures from these records are AIPerf's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sagellm.bench.client.responses import classify_http_error
from sagellm.errors import TargetError
from sagellm.results.records import RequestRecord
from sagellm.results.schema import ErrorKind

EXPORT = "profile_export.jsonl"  # AIPerf's per-request export, by the name AIPerf gives it


def _value(metrics: dict[str, Any], *names: str) -> Any:
    """The value of the first metric present under one of its names (None when none is)."""
    for name in names:
        metric = metrics.get(name)
        if isinstance(metric, dict) and metric.get("value") is not None:
            return metric["value"]
    return None


def _error(error: dict[str, Any]) -> tuple[ErrorKind, str, int | None]:
    """The bench's kind, message and HTTP status of an AIPerf error (its code is an HTTP status where there was one)."""
    code, kind_text, message = error.get("code"), str(error.get("type") or "error"), str(error.get("message") or "")
    if isinstance(code, int) and 100 <= code < 600:
        kind, text = classify_http_error(code, json.dumps({"error": message, "error_type": kind_text}))
        if code == 499:  # AIPerf's own cancellation (--request-cancellation-rate): the client ended it
            kind = "client"
        return kind, f"{kind_text}: {text}", code
    kind = "timeout" if "timeout" in kind_text.lower() else "other"
    return kind, f"{kind_text}: {message}", None


def record_of(row: dict[str, Any]) -> tuple[int, RequestRecord]:
    """One AIPerf record as (its start in ns since the epoch, a request record with start_s 0)."""
    meta, metrics = row.get("metadata") or {}, row.get("metrics") or {}
    start_ns = meta.get("request_start_ns") or meta.get("timestamp_ns")
    if not isinstance(start_ns, int):
        raise TypeError("metadata has no request_start_ns or timestamp_ns")
    warmup = (meta.get("benchmark_phase") or meta.get("credit_phase")) == "warmup"
    input_tokens = int(_value(metrics, "input_sequence_length", "error_isl") or 0)
    error = row.get("error")
    if error:
        kind, message, status = _error(error)
        end_ns = meta.get("request_end_ns")
        e2e_s = (end_ns - start_ns) / 1e9 if isinstance(end_ns, int) and end_ns >= start_ns else 0.0
        return start_ns, RequestRecord(ok=False, e2e_s=e2e_s, input_tokens=input_tokens,
                                       input_tokens_by="tokenizer", status=status, error_kind=kind, error=message,
                                       warmup=warmup)
    latency_ms = _value(metrics, "request_latency")
    if latency_ms is None:
        raise ValueError("a request without an error has no request_latency")
    ttft_ms = _value(metrics, "time_to_first_token", "ttft")
    gaps = _value(metrics, "inter_chunk_latency") or []
    return start_ns, RequestRecord(
        ok=True, e2e_s=float(latency_ms) / 1000, ttft_s=None if ttft_ms is None else float(ttft_ms) / 1000,
        output_tokens=int(_value(metrics, "output_sequence_length", "output_token_count") or 0),
        input_tokens=input_tokens, input_tokens_by="tokenizer", token_gaps_s=[float(g) / 1000 for g in gaps],
        status=200, warmup=warmup)


def read_export(lines: Iterable[str], where: str) -> list[RequestRecord]:
    """AIPerf's per-request export as request records, their starts in seconds since its first request (TargetError
    naming the line that is not an AIPerf record)."""
    timed = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            timed.append(record_of(row))
        except (ValueError, TypeError, AttributeError) as exc:
            raise TargetError(f"{where}:{number}: not an AIPerf request record ({exc})") from None
    if not timed:
        raise TargetError(f"{where}: no request records (AIPerf sent no request?)")
    first = min(start for start, _ in timed)
    for start, record in timed:
        record.start_s = (start - first) / 1e9
    return [record for _, record in sorted(timed, key=lambda pair: pair[0])]

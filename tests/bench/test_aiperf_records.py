"""AIPerf's per-request export read as the bench's records: the bench's statistics of them are AIPerf's own.

The fixture is a real AIPerf run, verbatim: ai-dynamo/aiperf examples/artifacts/run1/ at commit
7c31f57933ad8a452db7737d05dba2b29cd6bf8c (`profile_export.jsonl`, 100 requests to gpt-oss-20b at concurrency 100,
10 % cancelled by AIPerf, and AIPerf's own aggregate of them, `profile_export_aiperf.json`). Read from the export:
metadata.timestamp_ns / credit_phase, metrics ttft, request_latency, output_sequence_length, input_sequence_length,
inter_chunk_latency, and error.{code,type,message} (bench/aiperf_records.py lists both AIPerf spellings).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagellm.bench.aiperf_records import read_export, record_of
from sagellm.bench.aws_job import level_of
from sagellm.errors import TargetError
from sagellm.results.summary import summarize_runs

RUN = Path(__file__).parents[1] / "fixtures" / "aiperf" / "run1"


def aiperf_aggregate() -> dict:
    return json.loads((RUN / "profile_export_aiperf.json").read_text())["records"]


def test_the_bench_summarises_aiperfs_records_as_aiperf_does() -> None:
    records = read_export((RUN / "profile_export.jsonl").read_text().splitlines(), "run1")
    level = level_of(records, concurrency=100, request_rate=None, offset_s=0.0, at="concurrency 100")
    summary = summarize_runs([(level.records, level.window_start_s, level.window_end_s)])
    aiperf = aiperf_aggregate()

    assert (summary.requests, summary.ok) == (aiperf["request_count"]["avg"] + aiperf["error_request_count"]["avg"],
                                              aiperf["request_count"]["avg"])
    assert summary.errors["client"] == aiperf["error_request_count"]["avg"]  # AIPerf's cancellations (HTTP 499)
    for ours, theirs, scale in ((summary.ttft_ms, aiperf["ttft"], 1), (summary.e2e_s, aiperf["request_latency"], 1e-3),
                                (summary.itl_ms, aiperf["inter_token_latency"], 1)):
        for stat in ("p50", "p90", "p95", "p99"):
            assert getattr(ours, stat) == pytest.approx(theirs[stat] * scale, rel=1e-9), stat
        assert ours.mean == pytest.approx(theirs["avg"] * scale, rel=1e-9)
    assert summary.request_output_tokens.mean == pytest.approx(aiperf["output_sequence_length"]["avg"], rel=1e-9)
    # AIPerf's throughput: its output tokens over its duration, first request sent to last response; the window's.
    assert summary.throughput_tokens_per_s == pytest.approx(aiperf["output_token_throughput"]["avg"], rel=1e-6)
    assert level.stopped_reason is not None and "11 client" in level.stopped_reason  # 11 % failed > 5 %


def test_later_aiperfs_field_names_and_a_failed_requests_end_are_read() -> None:
    # The fields as docs/tutorials/working-with-profile-exports.md (ai-dynamo/aiperf @13992dbd) shows them.
    start = 1759813207532900363
    ok = {"metadata": {"request_start_ns": start, "request_end_ns": start + 297_525_228, "benchmark_phase": "warmup"},
          "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                      "time_to_first_token": {"value": 255.886568, "unit": "ms"},
                      "request_latency": {"value": 297.525228, "unit": "ms"},
                      "output_sequence_length": {"value": 9, "unit": "tokens"},
                      "inter_chunk_latency": {"value": [4.9, 5.3], "unit": "ms"}}, "error": None}
    failed = {"metadata": {"request_start_ns": start + 10**9, "request_end_ns": start + 3 * 10**9,
                           "benchmark_phase": "profiling"},
              "metrics": {"error_isl": {"value": 550, "unit": "tokens"}},
              "error": {"code": 429, "type": "HTTPError", "message": "Too Many Requests"}}

    first, second = read_export([json.dumps(ok), "", json.dumps(failed)], "export")

    assert (first.warmup, first.ok, first.output_tokens, first.input_tokens) == (True, True, 9, 550)
    assert first.ttft_s == pytest.approx(0.255886568) and first.e2e_s == pytest.approx(0.297525228)
    assert first.token_gaps_s == pytest.approx([0.0049, 0.0053])
    assert first.itl_s == pytest.approx((0.297525228 - 0.255886568) / 8)
    assert (second.ok, second.error_kind, second.status, second.start_s) == (False, "overloaded", 429, 1.0)
    assert second.e2e_s == pytest.approx(2.0) and "Too Many Requests" in (second.error or "")


def test_a_line_that_is_no_aiperf_record_is_named_by_its_number() -> None:
    good = (RUN / "profile_export.jsonl").read_text().splitlines()[0]
    with pytest.raises(TargetError, match=r"s3://b/k:2: not an AIPerf request record"):
        read_export([good, '{"metadata": {}}'], "s3://b/k")
    with pytest.raises(TargetError, match="no request records"):
        read_export([], "s3://b/k")
    assert record_of(json.loads(good))[1].error_kind == "client"

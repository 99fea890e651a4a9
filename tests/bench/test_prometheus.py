"""The http target's server-side figures: the server's Prometheus `/metrics` scraped around every level."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench_helpers import request_lines, results_of, sagellm
from pacing_server import pacing_server_process
from sagellm.bench import prometheus

NOW = datetime(2026, 1, 1, tzinfo=UTC)

VLLM_BEFORE = """
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="m",le="0.3"} 1.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 1.5
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 2.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.04
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
"""
VLLM_AFTER = """
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 6.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 5.5
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 6.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.12
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2.0
vllm:generation_tokens_total{engine="0",model_name="m"} 500.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 5000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 3000.0
vllm:cache_config_info{block_size="16",note="a } and spaces"} 1.0
"""
TGI_AFTER = """
tgi_request_count 10
tgi_request_duration_count 10
tgi_request_duration_sum 20.0
tgi_request_mean_time_per_token_duration_count 10
tgi_request_mean_time_per_token_duration_sum 0.3
tgi_request_generated_tokens_sum 1000
tgi_request_input_length_sum 5000
"""


def test_parse_sums_label_sets_and_skips_comments_and_buckets() -> None:
    samples = prometheus.parse(VLLM_BEFORE + VLLM_AFTER.replace("vllm:", "x:"))
    assert samples["vllm:request_success_total"] == 2.0
    assert samples["vllm:e2e_request_latency_seconds_count"] == 2.0
    assert not any(name.endswith("_bucket") for name in samples)
    assert samples["x:cache_config_info"] == 1.0  # a label value with a brace and spaces


def test_only_vllm_or_tgi_metrics_count_as_known() -> None:
    assert prometheus.known(prometheus.parse(TGI_AFTER))
    assert prometheus.known(prometheus.parse(VLLM_AFTER))
    assert not prometheus.known(prometheus.parse('{"emulated": true}\nprocess_cpu_seconds_total 3.5\n'))


def test_differences_give_counter_increases_and_histogram_means_over_the_level() -> None:
    block = prometheus.differences(prometheus.parse(VLLM_BEFORE), prometheus.parse(VLLM_AFTER), NOW, NOW)
    assert block.source == "prometheus" and block.period_s is None
    e2e = block.metrics["e2e_latency_ms"]
    assert (e2e.name, e2e.unit) == ("vllm:e2e_request_latency_seconds", "ms")
    assert (e2e.stats.count, e2e.stats.sum, e2e.stats.avg) == (4.0, 4000.0, 1000.0)
    # vLLM before 0.11 names its ITL histogram time_per_output_token_seconds: the fallback is read.
    assert block.metrics["itl_ms"].name == "vllm:time_per_output_token_seconds"
    assert block.metrics["itl_ms"].stats.avg == pytest.approx(20.0)
    assert block.metrics["requests"].stats.sum == 4.0
    assert block.metrics["generation_tokens"].stats.sum == 400.0
    assert "ttft_ms" not in block.metrics  # not exposed: left out
    # The prefix cache's prompt tokens looked up and served over the level: its hit rate is their ratio.
    queries, hits = block.metrics["prefix_cache_queries"], block.metrics["prefix_cache_hits"]
    assert (queries.name, queries.unit, queries.stats.sum) == ("vllm:prefix_cache_queries_total", "tokens", 4000.0)
    assert hits.stats.sum == 2400.0


def test_tgi_names_map_to_the_same_metrics_and_its_time_per_token_is_not_itl() -> None:
    block = prometheus.differences({}, prometheus.parse(TGI_AFTER), NOW, NOW)
    assert block.metrics["requests"].stats.sum == 10
    assert block.metrics["e2e_latency_ms"].stats.avg == 2000.0
    assert block.metrics["time_per_token_ms"].stats.avg == 30.0
    assert "itl_ms" not in block.metrics
    assert block.metrics["prompt_tokens"].stats.sum == 5000


@pytest.mark.slow
def test_an_http_bench_reports_what_the_servers_metrics_counted_per_level(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pacing_server_process(itl_s=0.002, ttft_s=0.01) as server:
        ran = sagellm("bench", "--target", "http", "--url", server.url, "--api", "tgi", "--concurrency", "1,2",
                      "--requests-per-level", "4", "--warmup", "1", "--output-tokens", "16", "--out", str(out))
    assert ran.returncode == 0, ran.stderr[-2000:]
    sent: dict[int, int] = {}
    for line in request_lines(out):
        sent[line["concurrency"]] = sent.get(line["concurrency"], 0) + 1
    levels = results_of(out)["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        server_side = lv["server"]
        assert server_side["source"] == "prometheus"
        metrics = server_side["metrics"]
        assert metrics["requests"]["stats"]["sum"] == sent[lv["concurrency"]]  # warm-up included
        assert metrics["generation_tokens"]["stats"]["sum"] == 16 * sent[lv["concurrency"]]
        # The server's e2e ends at its last write; the client's a little later: never above it.
        server_ms, client_ms = metrics["e2e_latency_ms"]["stats"]["avg"], lv["e2e_s"]["mean"] * 1000
        assert 0.5 * client_ms <= server_ms <= client_ms * 1.05

"""summarize() on synthetic records; knee, max-throughput, SLO and cost picks on synthetic levels."""

from __future__ import annotations

import pytest

from sagellm.bench import summary
from sagellm.bench.records import ERROR_KINDS, RequestRecord
from sagellm.bench.summary import LevelSummary, Stats, percentile, summarize
from sagellm.planner.curve import Point, knee_index, knee_of, usd_per_1m_tokens


def rec(*, c: int = 4, start: float = 1.0, e2e: float = 1.0, tokens: int = 100, ok: bool = True,
        **kw) -> RequestRecord:
    return RequestRecord(concurrency=c, worker=0, start_s=start, ok=ok, e2e_s=e2e, output_tokens=tokens, **kw)


def lvl(c: int, tput: float, p50: float, *, error_rate: float = 0.0, timeouts: int = 0) -> LevelSummary:
    errors = dict.fromkeys(ERROR_KINDS, 0) | {"timeout": timeouts}
    return LevelSummary(
        concurrency=c, requests=100, ok=100, errors=errors, error_rate=error_rate, retries=0, window_s=10,
        output_tokens=int(tput * 10), throughput_tokens_per_s=tput, requests_per_s=tput / 100,
        latency_ms_per_token=Stats(p50=p50, p90=p50, p99=p50, mean=p50), ttft_ms=Stats(), itl_ms=Stats(),
        e2e_s=Stats())


def test_percentiles_interpolate_linearly_between_ranks() -> None:
    data = [float(v) for v in range(10, 0, -1)]  # 1..10, unsorted on purpose
    assert percentile(data, 50) == pytest.approx(5.5)
    assert percentile(data, 90) == pytest.approx(9.1)
    assert percentile(data, 99) == pytest.approx(9.91)
    assert percentile(data, 0) == 1.0 and percentile(data, 100) == 10.0


def test_percentile_of_one_value_is_that_value_and_of_none_is_none() -> None:
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_ms_per_token_is_e2e_over_output_tokens_of_each_ok_request() -> None:
    records = [rec(e2e=1.0, tokens=100), rec(e2e=2.0, tokens=100), rec(e2e=6.0, tokens=200),
               rec(ok=False, e2e=0.01, tokens=0, error_kind="overloaded")]
    s = summarize(records, window_start_s=0, window_end_s=10)
    assert s.latency_ms_per_token.p50 == pytest.approx(20.0)  # 10, 20, 30 ms/token
    assert s.latency_ms_per_token.mean == pytest.approx(20.0)
    assert s.latency_ms_per_token.p99 == pytest.approx(29.8)
    assert s.e2e_s.p50 == pytest.approx(2.0)


def test_warmup_records_are_left_out_of_every_statistic() -> None:
    records = [rec(e2e=50.0, warmup=True, ttft_s=9.0, retries=3), rec(ok=False, warmup=True, error_kind="other"),
               rec(e2e=1.0, ttft_s=0.1)]
    s = summarize(records, window_start_s=0, window_end_s=100)
    assert (s.requests, s.ok, s.error_rate, s.retries) == (1, 1, 0.0, 0)
    assert s.latency_ms_per_token.p99 == pytest.approx(10.0)
    assert s.ttft_ms.p50 == pytest.approx(100.0)
    assert s.output_tokens == 100


def test_errors_are_counted_by_kind_and_an_unclassified_failure_counts_as_other() -> None:
    records = [rec(), rec(ok=False, error_kind="overloaded"), rec(ok=False, error_kind="overloaded"),
               rec(ok=False, error_kind="timeout"), rec(ok=False, error_kind=None)]
    s = summarize(records, window_start_s=0, window_end_s=10)
    assert s.errors == {"overloaded": 2, "validation": 0, "timeout": 1, "throttled": 0, "other": 1}
    assert s.error_rate == pytest.approx(0.8)


def test_throughput_counts_tokens_of_ok_requests_completed_inside_the_window() -> None:
    records = [
        rec(start=0.0, e2e=1.5, tokens=100),  # ends at 1.5, before the window: ramp
        rec(start=1.0, e2e=2.0, tokens=200),  # ends at 3.0: in
        rec(start=2.0, e2e=8.0, tokens=300),  # ends at 10.0: in (the end is inclusive)
        rec(start=9.0, e2e=3.0, tokens=400),  # ends at 12.0: tail
        rec(start=3.0, e2e=1.0, tokens=0, ok=False, error_kind="other"),
    ]
    s = summarize(records, window_start_s=2.0, window_end_s=10.0)
    assert s.output_tokens == 500
    assert s.throughput_tokens_per_s == pytest.approx(500 / 8)
    assert s.requests_per_s == pytest.approx(2 / 8)
    assert s.window_s == 8.0
    assert s.ok == 4  # latency statistics still use every measured ok request


def test_itl_pools_the_gaps_of_all_ok_requests_in_ms() -> None:
    records = [rec(itl_s=[0.01, 0.02]), rec(itl_s=[0.03, 0.04, 0.05]),
               rec(ok=False, error_kind="timeout", itl_s=[9.0])]
    s = summarize(records, window_start_s=0, window_end_s=10)
    assert s.itl_ms.p50 == pytest.approx(30.0)
    assert s.itl_ms.mean == pytest.approx(30.0)


def test_client_overhead_is_client_minus_server_e2e_where_the_server_reported_it() -> None:
    records = [rec(e2e=1.002, server_e2e_s=1.0), rec(e2e=1.006, server_e2e_s=1.0), rec(e2e=5.0)]
    s = summarize(records, window_start_s=0, window_end_s=10)
    assert s.client_overhead_ms is not None
    assert s.client_overhead_ms.p50 == pytest.approx(4.0)
    assert summarize([rec()], window_start_s=0, window_end_s=10).client_overhead_ms is None


def test_retries_are_totalled() -> None:
    s = summarize([rec(retries=2), rec(retries=1, ok=False, error_kind="throttled")],
                  window_start_s=0, window_end_s=10)
    assert s.retries == 3


def test_a_level_with_no_ok_request_has_empty_statistics() -> None:
    s = summarize([rec(ok=False, error_kind="validation")], window_start_s=0, window_end_s=10)
    assert s.latency_ms_per_token == Stats() and s.throughput_tokens_per_s == 0.0 and s.error_rate == 1.0


def test_rejects_records_of_several_levels_and_an_empty_window() -> None:
    with pytest.raises(ValueError, match=r"exactly one concurrency level, got \[1, 2\]"):
        summarize([rec(c=1), rec(c=2)], window_start_s=0, window_end_s=1)
    with pytest.raises(ValueError, match="empty window"):
        summarize([rec()], window_start_s=5, window_end_s=5)


def test_knee_is_the_highest_throughput_over_latency_among_usable_levels() -> None:
    levels = [lvl(1, 100, 10), lvl(2, 190, 10.5), lvl(4, 300, 14), lvl(8, 360, 25), lvl(16, 380, 50)]
    # power: 10, 18.1, 21.4, 14.4, 7.6
    assert summary.knee(levels).concurrency == 4


def test_knee_skips_levels_with_timeouts_or_too_many_errors() -> None:
    levels = [lvl(1, 100, 10), lvl(2, 400, 10, timeouts=1), lvl(4, 400, 10, error_rate=0.06)]
    assert summary.knee(levels).concurrency == 1
    assert summary.knee([lvl(1, 100, 10, timeouts=1)]) is None


def test_measured_knee_and_planner_knee_agree_on_the_same_numbers() -> None:
    numbers = [(1, 100, 10), (2, 190, 10.5), (4, 300, 14), (8, 360, 25)]
    points = [Point(concurrency=c, ms_per_token=lat, ttft_ms=0, itl_ms=0, e2e_s=0, throughput_tokens_per_s=t,
                    requests_per_s=0, running_per_copy=0, queued_per_copy=0, rejected=False,
                    within_timeout=True) for c, t, lat in numbers]
    assert summary.knee([lvl(*n) for n in numbers]).concurrency == knee_of(points).concurrency
    assert knee_index([t for _, t, _ in numbers], [lat for _, _, lat in numbers]) == 2


def test_max_throughput_is_the_highest_throughput_level_without_timeouts_within_the_error_rate() -> None:
    levels = [lvl(8, 360, 25), lvl(16, 380, 50, error_rate=0.04), lvl(32, 420, 90, error_rate=0.2),
              lvl(64, 500, 200, timeouts=1)]
    assert summary.max_throughput(levels).concurrency == 16
    assert summary.max_throughput(levels, max_error_rate=0.0).concurrency == 8
    assert summary.max_throughput([lvl(64, 500, 200, timeouts=1)]) is None


def test_max_throughput_ties_go_to_the_lower_concurrency() -> None:
    assert summary.max_throughput([lvl(32, 400, 80), lvl(16, 400, 40)]).concurrency == 16


def test_best_under_slo_is_the_highest_throughput_level_with_p50_within_the_slo() -> None:
    levels = [lvl(1, 100, 10), lvl(4, 300, 14), lvl(8, 360, 25), lvl(16, 380, 50)]
    assert summary.best_under_slo(levels, 25).concurrency == 8
    assert summary.best_under_slo(levels, 24.9).concurrency == 4
    assert summary.best_under_slo(levels, 5) is None


def test_cost_is_price_times_instances_and_per_1m_tokens_from_throughput() -> None:
    per_h = summary.usd_per_h(1.515, 2)
    assert per_h == pytest.approx(3.03)
    # 10^6 tokens at 1000 tokens/s take 1000 s = 0.2778 h; at $3.03/h that is $0.8417.
    assert usd_per_1m_tokens(1000, per_h) == pytest.approx(0.841667, rel=1e-5)


def test_cost_is_unknown_without_a_price_or_without_throughput() -> None:
    assert summary.usd_per_h(None, 2) is None
    assert usd_per_1m_tokens(1000, None) is None
    assert usd_per_1m_tokens(0, 3.0) is None

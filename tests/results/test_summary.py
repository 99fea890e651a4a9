"""summarize() on synthetic records."""

from __future__ import annotations

import random

import pytest

from sagellm.results.records import RequestRecord
from sagellm.results.schema import RequestSlo, Stats
from sagellm.results.summary import meets, percentile, summarize, summarize_runs


def rec(*, c: int = 4, start: float = 1.0, e2e: float = 1.0, tokens: int = 100, ok: bool = True,
        **kw) -> RequestRecord:
    return RequestRecord(concurrency=c, worker=0, start_s=start, ok=ok, e2e_s=e2e, output_tokens=tokens, **kw)


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
    assert s.latency_ms_per_token.p95 == pytest.approx(29.0)
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
    assert s.errors == {"overloaded": 2, "validation": 0, "timeout": 1, "throttled": 0, "client": 0, "other": 1}
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


def test_itl_is_per_request_e2e_minus_ttft_over_tokens_minus_one_and_gaps_are_kept_apart() -> None:
    steady = rec(ttft_s=0.1, e2e=1.0, tokens=10, token_gaps_s=[0.1] * 9)  # 100 ms per token
    chunked = rec(ttft_s=0.2, e2e=2.0, tokens=10, token_gaps_s=[0.0, 0.0, 0.6] * 3)  # 200 ms, 3 per chunk
    records = [steady, chunked, rec(ttft_s=0.1, e2e=0.1, tokens=1),  # one token: no ITL
               rec(ok=False, error_kind="timeout", ttft_s=0.1, e2e=9.0, tokens=0, token_gaps_s=[9.0])]
    s = summarize(records, window_start_s=0, window_end_s=10)
    assert (s.itl_ms.p50, s.itl_ms.mean, s.itl_ms.p95) == pytest.approx((150.0, 150.0, 195.0))
    assert s.tpot_ms == s.itl_ms
    # The pooled gaps are another distribution: a third of the chunked request's gaps are 0 ms.
    assert s.token_gap_ms.p50 == pytest.approx(100.0) and s.token_gap_ms.mean == pytest.approx(150.0)
    assert percentile([0.0, 0.0, 600.0] * 3, 50) == 0.0


def test_client_overhead_is_client_minus_server_e2e_where_the_emulator_timed_the_request() -> None:
    records = [rec(client_e2e_s=1.002, server_e2e_s=1.0), rec(client_e2e_s=1.006, server_e2e_s=1.0),
               rec(e2e=5.0)]
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
    with pytest.raises(ValueError, match=r"exactly one level, got \['1', '2'\]"):
        summarize([rec(c=1), rec(c=2)], window_start_s=0, window_end_s=1)
    with pytest.raises(ValueError, match="empty window"):
        summarize([rec()], window_start_s=5, window_end_s=5)


def test_token_gap_statistics_are_those_of_every_gap_whether_a_request_repeats_one_gap_or_not() -> None:
    # A simulated request repeats one gap (built at C speed); a measured one has its own: the statistics are exactly
    # those of the whole list of gaps in ms, in order, to the last bit.
    rng = random.Random(5)
    records = [rec(ttft_s=0.1, tokens=n + 1, token_gaps_s=[rng.uniform(0.01, 0.09)] * n) for n in (1, 7, 255)]
    records += [rec(ttft_s=0.1, tokens=11, token_gaps_s=[rng.uniform(0.0, 0.3) for _ in range(10)]),
                rec(ttft_s=0.1, tokens=4, token_gaps_s=[0.02, 0.02, 0.03]), rec(ttft_s=0.1, tokens=1)]
    s = summarize(records, window_start_s=0, window_end_s=10)
    every = [gap * 1000 for r in records for gap in r.token_gaps_s]
    assert s.token_gap_ms == Stats(p50=percentile(every, 50), p90=percentile(every, 90), p95=percentile(every, 95),
                                   p99=percentile(every, 99), mean=sum(every) / len(every))


# ------------------------------------------------------------------------------- goodput and SLO attainment

SLO = RequestSlo(ttft_ms=500, itl_ms=20, e2e_ms=3000)


def streamed(*, ttft: float = 0.2, e2e: float = 2.0, tokens: int = 101, **kw) -> RequestRecord:
    """An ok streamed request: `tokens` events evenly spread after its first token (ITL = (e2e − TTFT) ÷ (n − 1))."""
    gap = (e2e - ttft) / (tokens - 1) if tokens > 1 else 0.0
    return rec(e2e=e2e, tokens=tokens, ttft_s=ttft, token_gaps_s=[gap] * (tokens - 1), **kw)


def test_a_request_meets_the_slo_only_when_it_succeeded_and_every_limit_holds() -> None:
    assert meets(streamed(), SLO)  # TTFT 200 ms, ITL 18 ms, e2e 2000 ms
    assert not meets(streamed(ttft=0.6), SLO)  # TTFT 600 > 500 ms
    assert not meets(streamed(e2e=2.5), SLO)  # ITL (2.5 − 0.2) ÷ 100 = 23 > 20 ms
    assert not meets(streamed(ttft=0.1, e2e=3.1, tokens=1001), SLO)  # ITL 3 ms, but e2e 3100 > 3000 ms
    assert not meets(rec(ok=False, e2e=0.01, tokens=0, error_kind="overloaded"), SLO)
    assert meets(streamed(ttft=0.5, e2e=2.5, tokens=101), SLO)  # every figure exactly at its limit: met (≤)


def test_one_output_token_has_no_inter_token_time_and_a_missing_ttft_misses() -> None:
    assert meets(streamed(ttft=0.4, e2e=0.4, tokens=1), SLO)  # ITL 0, as vLLM counts it
    assert not meets(rec(e2e=1.0, tokens=50), SLO)  # not streamed: no TTFT to hold against 500 ms
    assert meets(rec(e2e=1.0, tokens=50), RequestSlo(e2e_ms=1000))  # an e2e-only SLO needs none
    assert meets(streamed(e2e=2.5), RequestSlo(tpot_ms=23))  # tpot_ms is the same per-request mean


def test_attainment_counts_failed_requests_as_misses_and_goodput_only_the_requests_that_met_it() -> None:
    good = [streamed(start=float(i), ttft=0.2, e2e=2.0) for i in range(4)]  # 101 tokens each, all inside
    late = streamed(start=1.0, ttft=0.7, e2e=2.0)  # TTFT misses
    slow = streamed(start=2.0, ttft=0.2, e2e=2.9)  # ITL 27 ms misses
    failed = [rec(start=3.0, ok=False, e2e=0.01, tokens=0, error_kind="overloaded")] * 2
    warm = streamed(start=0.0, ttft=5.0, e2e=6.0, warmup=True)  # left out of both
    s = summarize([*good, late, slow, *failed, warm], window_start_s=0, window_end_s=10, slo=SLO)
    assert s.requests == 8 and s.ok == 6
    assert s.slo_attainment == pytest.approx(4 / 8)  # the failed two are misses, not left out
    assert s.goodput is not None
    assert s.goodput.tokens_per_s == pytest.approx(4 * 101 / 10)
    assert s.goodput.requests_per_s == pytest.approx(4 / 10)
    assert s.throughput_tokens_per_s == pytest.approx(6 * 101 / 10)  # goodput is the met part of it


def test_every_request_meeting_the_slo_makes_goodput_equal_throughput() -> None:
    s = summarize([streamed(start=float(i)) for i in range(5)], window_start_s=0, window_end_s=8, slo=SLO)
    assert s.slo_attainment == 1.0
    assert s.goodput is not None
    assert (s.goodput.tokens_per_s, s.goodput.requests_per_s) == pytest.approx(
        (s.throughput_tokens_per_s, s.requests_per_s))


def test_without_an_slo_there_is_no_attainment_or_goodput() -> None:
    s = summarize([streamed()], window_start_s=0, window_end_s=5)
    assert s.slo_attainment is None and s.goodput is None


def test_repeats_spread_attainment_across_runs() -> None:
    one = ([streamed(start=1.0), streamed(start=2.0)], 0.0, 10.0)
    two = ([streamed(start=1.0, repeat=1), streamed(start=2.0, ttft=0.9, repeat=1)], 0.0, 10.0)
    s = summarize_runs([one, two], SLO)
    assert s.slo_attainment == pytest.approx(3 / 4)
    assert s.spread is not None
    assert (s.spread["slo_attainment"].min, s.spread["slo_attainment"].max) == (0.5, 1.0)


def test_stats_of_runs_equal_stats_of_the_values_listed_out_to_the_last_bit() -> None:
    # A simulated level's token gaps are a few hundred values each repeated a few hundred times (ties across
    # requests too); the runs must give exactly the list's percentiles and mean, whatever the order and lengths.
    from itertools import chain, repeat
    from random import Random

    from sagellm.results.summary import stats, stats_of_runs

    rng = Random(7)
    for _ in range(50):
        values = [rng.choice([0.1, 0.2, 1 / 3]) if rng.random() < 0.3 else rng.uniform(1, 90) for _ in range(40)]
        runs = [(v, rng.choice([1, 1, 2, 255, 1023])) for v in values]
        listed = list(chain.from_iterable(repeat(v, n) for v, n in runs))
        assert stats_of_runs(runs) == stats(listed)
    assert stats_of_runs([(2.5, 1), (1.5, 1)]) == stats([2.5, 1.5])  # no repeats: the list's own path
    assert stats_of_runs([]) == stats([])

"""Knee, max-throughput, SLO and cost picks on synthetic levels."""

from __future__ import annotations

import pytest

from sagellm.planner.curve import Point, knee_index, knee_of, usd_per_1m_tokens
from sagellm.results import picks
from sagellm.results.schema import ERROR_KINDS, LevelSummary, Stats


def lvl(c: int, tput: float, p50: float, *, error_rate: float = 0.0, timeouts: int = 0) -> LevelSummary:
    errors = dict.fromkeys(ERROR_KINDS, 0) | {"timeout": timeouts}
    return LevelSummary(
        concurrency=c, requests=100, ok=100, errors=errors, error_rate=error_rate, retries=0, window_s=10,
        output_tokens=int(tput * 10), throughput_tokens_per_s=tput, requests_per_s=tput / 100,
        latency_ms_per_token=Stats(p50=p50, p90=p50, p99=p50, mean=p50), ttft_ms=Stats(), itl_ms=Stats(),
        e2e_s=Stats())


def test_knee_is_the_highest_throughput_over_latency_among_usable_levels() -> None:
    levels = [lvl(1, 100, 10), lvl(2, 190, 10.5), lvl(4, 300, 14), lvl(8, 360, 25), lvl(16, 380, 50)]
    # power: 10, 18.1, 21.4, 14.4, 7.6
    assert picks.knee(levels).concurrency == 4


def test_knee_skips_levels_with_timeouts_or_too_many_errors() -> None:
    levels = [lvl(1, 100, 10), lvl(2, 400, 10, timeouts=1), lvl(4, 400, 10, error_rate=0.06)]
    assert picks.knee(levels).concurrency == 1
    assert picks.knee([lvl(1, 100, 10, timeouts=1)]) is None


def test_measured_knee_and_planner_knee_agree_on_the_same_numbers() -> None:
    numbers = [(1, 100, 10), (2, 190, 10.5), (4, 300, 14), (8, 360, 25)]
    points = [Point(concurrency=c, ms_per_token=lat, ttft_ms=0, itl_ms=0, e2e_s=0, throughput_tokens_per_s=t,
                    requests_per_s=0, running_per_copy=0, queued_per_copy=0, rejected=False,
                    within_timeout=True) for c, t, lat in numbers]
    assert picks.knee([lvl(*n) for n in numbers]).concurrency == knee_of(points).concurrency
    assert knee_index([t for _, t, _ in numbers], [lat for _, _, lat in numbers]) == 2


def test_max_throughput_is_the_highest_throughput_level_without_timeouts_within_the_error_rate() -> None:
    levels = [lvl(8, 360, 25), lvl(16, 380, 50, error_rate=0.04), lvl(32, 420, 90, error_rate=0.2),
              lvl(64, 500, 200, timeouts=1)]
    assert picks.max_throughput(levels).concurrency == 16
    assert picks.max_throughput(levels, max_error_rate=0.0).concurrency == 8
    assert picks.max_throughput([lvl(64, 500, 200, timeouts=1)]) is None


def test_max_throughput_ties_go_to_the_lower_concurrency() -> None:
    assert picks.max_throughput([lvl(32, 400, 80), lvl(16, 400, 40)]).concurrency == 16


def test_best_under_slo_is_the_highest_throughput_level_with_p50_within_the_slo() -> None:
    levels = [lvl(1, 100, 10), lvl(4, 300, 14), lvl(8, 360, 25), lvl(16, 380, 50)]
    assert picks.best_under_slo(levels, 25).concurrency == 8
    assert picks.best_under_slo(levels, 24.9).concurrency == 4
    assert picks.best_under_slo(levels, 5) is None


def test_cost_is_price_times_instances_and_per_1m_tokens_from_throughput() -> None:
    per_h = picks.usd_per_h(1.515, 2)
    assert per_h == pytest.approx(3.03)
    # 10^6 tokens at 1000 tokens/s take 1000 s = 0.2778 h; at $3.03/h that is $0.8417.
    assert usd_per_1m_tokens(1000, per_h) == pytest.approx(0.841667, rel=1e-5)


def test_cost_is_unknown_without_a_price_or_without_throughput() -> None:
    assert picks.usd_per_h(None, 2) is None
    assert usd_per_1m_tokens(1000, None) is None
    assert usd_per_1m_tokens(0, 3.0) is None


def rate_lvl(rate: float, tput: float, p50: float) -> LevelSummary:
    return lvl(1, tput, p50).model_copy(update={"concurrency": None, "request_rate": rate})


def test_rate_levels_are_named_by_their_rate_and_picked_like_concurrency_levels() -> None:
    levels = [rate_lvl(4, 300, 14), rate_lvl(0.5, 100, 10), rate_lvl(1, 190, 10.5), rate_lvl(8, 360, 25)]
    assert [lv.load for lv in levels] == ["4/s", "0.5/s", "1/s", "8/s"]
    assert picks.knee(levels).load == "4/s"  # type: ignore[union-attr]
    assert picks.max_throughput(levels).request_rate == 8  # type: ignore[union-attr]
    assert picks.best_under_slo(levels, 12).load == "1/s"  # type: ignore[union-attr]


def test_a_level_has_exactly_one_key() -> None:
    with pytest.raises(ValueError, match="exactly one of concurrency and request_rate"):
        lvl(1, 1, 1).model_validate(lvl(1, 1, 1).model_dump() | {"request_rate": 2.0})
    with pytest.raises(ValueError, match="exactly one of concurrency and request_rate"):
        lvl(1, 1, 1).model_validate(lvl(1, 1, 1).model_dump() | {"concurrency": None})

"""From sweep results to results levels: the emulator's simulated clock, repeats with their spread, keys."""

from __future__ import annotations

import pytest

from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.measured import levels_of, on_simulated_clock
from sagellm.clock import REAL, Clock
from sagellm.results.records import RequestRecord
from sagellm.results.schema import LevelSummary, Predicted

PREDICTED = Predicted(ms_per_token=1, ttft_ms=1, itl_ms=1, e2e_s=1, throughput_tokens_per_s=1, requests_per_s=1,
                      rejected=False, within_timeout=True)


def rec(**kw: object) -> RequestRecord:
    base: dict[str, object] = {"concurrency": 1, "worker": 0, "start_s": 2.0, "ok": True, "e2e_s": 0.9,
                               "output_tokens": 10, "ttft_s": 0.012, "token_gaps_s": [0.1] * 9}
    return RequestRecord(**(base | kw))  # type: ignore[arg-type]


def test_an_emulated_request_is_timed_by_the_emulators_clock_in_simulated_seconds() -> None:
    # Time scale 0.1: the emulator stamped 6.3 ms to the first token and 306 ms to the last (wall seconds on
    # its simulated clock); the client saw 12 ms and 310 ms, jitter included.
    r = rec(e2e_s=0.310, ttft_s=0.012, server_ttft_s=0.0063, server_e2e_s=0.306, late_s=0.001)
    out = on_simulated_clock(r, Clock(0.1), emulated=True)
    assert (out.ttft_s, out.e2e_s) == pytest.approx((0.063, 3.06))
    assert out.itl_s == pytest.approx((3.06 - 0.063) / 9)
    assert (out.clock, out.client_e2e_s) == ("emulator", 0.310)  # what the client saw, wall clock
    assert (out.start_s, out.late_s) == pytest.approx((20.0, 0.01))
    assert out.token_gaps_s == pytest.approx([1.0] * 9)  # client-observed gaps, scaled: labelled as such
    assert (out.server_ttft_s, out.server_e2e_s) == (0.0063, 0.306)  # the raw stamps stay as reported


def test_without_the_emulators_stamps_the_clients_timings_are_scaled_and_a_real_run_is_left_alone() -> None:
    refused = on_simulated_clock(rec(ok=False, e2e_s=0.002, ttft_s=None, token_gaps_s=[]), Clock(0.1), emulated=True)
    assert refused.e2e_s == pytest.approx(0.02) and refused.clock == "client"
    real = rec()
    assert on_simulated_clock(real, REAL, emulated=False) is real


def result(records: list[RequestRecord], repeat: int, *, concurrency: int | None = 1,
           rate: float | None = None) -> LevelResult:
    return LevelResult(concurrency=concurrency, request_rate=rate, repeat=repeat, records=records, started_s=0,
                       ended_s=10, window_start_s=0, window_end_s=10, ramp_excluded=False,
                       window_output_tokens=0)


def test_repeats_of_a_level_become_one_level_with_each_repeats_spread() -> None:
    fast = [rec(e2e_s=1.0, start_s=1.0)] * 4
    slow = [rec(e2e_s=2.0, start_s=1.0)] * 4
    seen: list[LevelSummary] = []

    def predict(level: LevelSummary, records: list[RequestRecord]) -> Predicted | None:
        seen.append(level)
        assert records == fast  # the first run's records: the load a prediction replays
        return PREDICTED

    [level] = levels_of([result(fast, 0), result(slow, 1)], clock=REAL, emulated=False, predict=predict,
                        lags={"1": 3.5})
    assert (level.concurrency, level.repeats, level.requests, level.window_s) == (1, 2, 8, 20)
    assert level.e2e_s.p50 == pytest.approx(1.5)  # the statistics hold every request of both repeats
    assert level.spread is not None
    e2e = level.spread["e2e_s.p50"]
    assert (e2e.mean, e2e.min, e2e.max) == (1.5, 1.0, 2.0) and e2e.stddev == pytest.approx(0.7071, abs=1e-4)
    assert level.spread["throughput_tokens_per_s"].stddev == 0.0
    assert level.predicted == PREDICTED and level.server_loop_lag_ms == 3.5 and len(seen) == 1


def test_rate_levels_are_keyed_by_their_rate_in_the_order_measured() -> None:
    def at(rate: float) -> LevelResult:
        return result([rec(concurrency=None, request_rate=rate, worker=None, late_s=0.002)], 0,
                      concurrency=None, rate=rate)

    levels = levels_of([at(2.0), at(0.5)], clock=REAL, emulated=False, predict=lambda *_: None, lags={})
    assert [(lv.load, lv.concurrency, lv.request_rate, lv.repeats) for lv in levels] == [
        ("2/s", None, 2.0, 1), ("0.5/s", None, 0.5, 1)]
    assert levels[0].lateness_ms is not None and levels[0].lateness_ms.p50 == pytest.approx(2.0)
    assert levels[0].predicted is None and levels[0].spread is None

"""A prediction far off a measurement is flagged beside it with what it assumed; 'confirmed' names what
differs; a knee at the top of the sweep says the sweep never reached saturation."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_helpers import RUN, level, results
from sagellm.results.prediction import departures
from sagellm.results.report import render_markdown
from sagellm.results.schema import Level, PredictedPoint, Stats, SweepRecord


def agreeing(c: int, tput: float, p50: float, **changes: object) -> Level:
    """A level whose every predicted metric matches the measurement, but those `changes` overrides."""
    lv = level(c, tput, p50)
    assert lv.predicted is not None
    predicted = lv.predicted.model_copy(update={
        "ms_per_token": p50, "ttft_ms": 50, "itl_ms": 9, "e2e_s": 3, "throughput_tokens_per_s": tput,
        "requests_per_s": tput / 256})
    return lv.model_copy(update={"predicted": predicted, **changes})


def test_a_metric_more_than_25_percent_off_is_flagged_beside_it_with_what_the_prediction_assumed() -> None:
    slow_ttft = agreeing(8, 360, 25, ttft_ms=Stats(p50=90, p90=95, p99=99, mean=91))  # +80 % on 50 predicted
    run = results([agreeing(1, 100, 10), agreeing(4, 300, 14), slow_ttft], stopped_reason=None)

    assert [(d.load, d.metric) for d in departures(slow_ttft)] == [("8", "TTFT p50 ms")]
    assert departures(agreeing(1, 100, 10)) == []
    text = render_markdown(run)
    assert "**Prediction off by more than 25%** (it assumed ml.g5.2xlarge × 1, " + RUN.container in text
    assert "TTFT p50 ms at 8: 90 measured vs 50 predicted (+80%)" in text
    ttft_rows = [line for line in text.splitlines() if line.startswith("| TTFT ms |")]
    assert [row.endswith("| 50.0 ⚠ +80% |") for row in ttft_rows] == [False, False, True]


def test_a_p90_off_its_prediction_is_flagged_too() -> None:
    slow_tail = agreeing(8, 360, 25)
    assert slow_tail.predicted is not None
    slow_tail = slow_tail.model_copy(update={"predicted": slow_tail.predicted.model_copy(
        update={"ms_per_token_p90": slow_tail.latency_ms_per_token.p90 / 1.5})})
    assert [d.metric for d in departures(slow_tail)] == ["ms/token p90"]


def test_the_emulator_running_the_predicted_engine_is_never_flagged_and_the_report_says_why() -> None:
    slow_ttft = agreeing(8, 360, 25, ttft_ms=Stats(p50=90, p90=95, p99=99, mean=91))
    assert slow_ttft.predicted is not None
    same = slow_ttft.model_copy(update={"predicted": slow_ttft.predicted.model_copy(update={"same_engine": True})})

    assert departures(same) == []
    text = render_markdown(results([same], stopped_reason=None))
    assert "agree by construction" in text and "Prediction off" not in text and "⚠" not in text


def test_a_sweep_confirmed_by_throughput_and_ms_per_token_names_the_metrics_that_differ() -> None:
    slow_ttft = agreeing(8, 360, 25, ttft_ms=Stats(p50=90, p90=95, p99=99, mean=91))
    sweep = SweepRecord(method="adaptive", endpoint_minutes=1.0, predicted_knee=8, predicted_max=8, order=["8", "1"],
                  outcome="the prediction confirmed within 8% at its knee and max after 1 level(s)")
    run = results([agreeing(1, 100, 10), slow_ttft], stopped_reason=None).model_copy(update={"sweep": sweep})

    sweep_line = next(line for line in render_markdown(run).splitlines() if line.startswith("- Sweep:"))
    assert sweep_line.endswith("confirmed within 8% at its knee and max after 1 level(s) (by tokens/s and p50 "
                               "ms/token; more than 25% off elsewhere: TTFT p50 ms, see Prediction)")


def test_a_run_whose_prediction_holds_says_so() -> None:
    text = render_markdown(results([agreeing(1, 100, 10), agreeing(4, 300, 14)], stopped_reason=None))
    assert "- Prediction: every predicted metric within 25% of the measurement" in text
    assert "⚠" not in text


def test_a_knee_at_the_highest_level_measured_says_the_sweep_never_reached_saturation() -> None:
    rising = results([agreeing(1, 100, 10), agreeing(4, 380, 11)], stopped_reason=None)
    saturated = results(stopped_reason=None)  # the helpers' sweep: the knee below its highest level

    assert rising.knee is not None and rising.knee.load == "4"
    assert "the sweep never reached saturation" in render_markdown(rising)
    assert "never reached saturation" not in render_markdown(saturated)


def test_an_adaptive_sweep_of_one_confirmed_level_does_not_say_it_never_reached_saturation() -> None:
    # min-latency (one sequence in the batch): the prediction puts its knee and its max at concurrency 1, and the
    # one level measured there confirms it, so the sweep located the saturation it is said never to have reached.
    confirmed = SweepRecord(method="adaptive", endpoint_minutes=1.08, predicted_knee=1, predicted_max=1, order=["1"],
                            outcome="the prediction confirmed within 8% at its knee and max after 1 level(s)")
    one = results([agreeing(1, 18, 54.7)], stopped_reason=None)
    text = render_markdown(one.model_copy(update={"sweep": confirmed}))

    assert "confirmed within 8% at its knee and max after 1 level(s)" in text
    assert "never reached saturation" not in text
    # The same level from a list (`--concurrency 1`), or an adaptive sweep its budget cut short, placed nothing.
    assert "the sweep never reached saturation" in render_markdown(one)
    budget = "budget reached: 1.08 of 1 endpoint-minutes spent after 1 level(s)"
    short = results([agreeing(1, 18, 54.7)], stopped_reason=budget).model_copy(
        update={"sweep": confirmed.model_copy(update={"outcome": budget})})
    assert "the sweep never reached saturation" in render_markdown(short)


@pytest.mark.slow
def test_the_curve_draws_the_predicted_line_with_ttft_beside(tmp_path: Path) -> None:
    from sagellm.results.plot import plot_curve

    run = results([agreeing(1, 100, 10), agreeing(4, 300, 14)], stopped_reason=None)
    base = agreeing(1, 100, 10).predicted
    assert base is not None
    curve = [PredictedPoint(concurrency=c, **base.model_copy(update={"throughput_tokens_per_s": 100.0 * c,
                                                                      "ms_per_token": 10.0 + c}).model_dump())
             for c in (1, 2, 4, 8)]
    plain, drawn = tmp_path / "plain.png", tmp_path / "drawn.png"

    plot_curve(run, plain)
    plot_curve(run.model_copy(update={"predicted_curve": curve}), drawn)

    from matplotlib.image import imread
    assert imread(drawn).shape[1] > imread(plain).shape[1]  # a second panel: TTFT beside ms/token

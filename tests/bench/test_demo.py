"""`make demo` (time scale 0.1) shows no time-compression artifacts: the demo's own settings, fewer levels."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bench_helpers import results_of, sagellm
from sagellm.planner import Payload, predict_point
from sagellm.profiles import design_for

ROOT = Path(__file__).resolve().parents[2]


def demo_args() -> list[str]:
    """The arguments `make demo` passes to `sagellm bench`, read from the Makefile itself."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    words = shlex.split(recipe.replace("\\\n", " "))
    return words[words.index("bench"):]


@pytest.mark.integration
def test_demo_reports_simulated_time_without_client_jitter(tmp_path: Path) -> None:
    args = demo_args()
    assert "--time-scale" in args and args[args.index("--time-scale") + 1] == "0.1"
    args[args.index("--out") + 1] = str(tmp_path / "demo")
    for flag in ("--sweep", "--concurrency"):  # the demo's own levels, replaced by three quick ones
        del args[args.index(flag):args.index(flag) + 2]
    ran = sagellm(*args, "--concurrency", "1,2,16", timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(tmp_path / "demo")
    assert results["run"]["clock"] == "emulator"
    levels = {lv["concurrency"]: lv for lv in results["levels"]}
    assert set(levels) == {1, 2, 16}

    # One stream: every request paced by the same decode step, so ITL p99 is within 10 % of its mean.
    itl = levels[1]["itl_ms"]
    assert itl["p99"] <= 1.1 * itl["mean"], itl

    # TTFT within 10 % of the prediction wherever the planner predicts no queueing (TTFT = the prefill).
    run = results["run"]
    flag = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    design = design_for(flag["--profile"], flag["--model"], flag["--instance"],
                        payload=Payload(run["input_tokens"], run["output_tokens"]))
    unqueued = [c for c in levels
                if (p := predict_point(design.shape(), design.payload, c)).ttft_ms == p.own_prefill_s * 1000]
    assert 1 in unqueued
    for c in unqueued:
        measured, predicted = levels[c]["ttft_ms"]["p50"], levels[c]["predicted"]["ttft_ms"]
        assert abs(measured - predicted) <= 0.1 * predicted, (c, measured, predicted)

    # What the client adds is reported beside, in wall-clock milliseconds, not folded into the timings.
    assert all(lv["client_overhead_ms"]["p50"] > 0 for lv in levels.values())


@pytest.mark.integration
def test_demo_measures_five_levels_around_the_knee_on_the_predicted_curve(tmp_path: Path) -> None:
    args = demo_args()
    args[args.index("--out") + 1] = str(tmp_path / "demo")

    ran = sagellm(*args, timeout=600)

    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(tmp_path / "demo")
    levels = [lv["concurrency"] for lv in results["levels"]]
    knee = results["knee"]["concurrency"]
    assert len(levels) >= 5, levels
    curve = [p["concurrency"] for p in results["predicted_curve"]]
    assert curve[0] == 1 and curve[-1] >= max(levels) and len(curve) >= 20
    # Where the load generator could not keep up (a busy machine), the levels it flagged understate the endpoint and
    # throughput can climb to the last level: the bench says so, and where the knee falls is reported, not judged.
    starved = [lv["concurrency"] for lv in results["levels"] if lv["client_bottleneck"]]
    assert all(f"the load generator was the bottleneck at concurrency {c}," in ran.stderr for c in starved)
    if starved:
        pytest.xfail(f"the load generator was the bottleneck at {starved}: knee at {knee} of {levels} is reported, "
                     "not judged")
    assert min(levels) < knee < max(levels), (levels, knee)
    assert "never reached saturation" not in (tmp_path / "demo" / "report.md").read_text()

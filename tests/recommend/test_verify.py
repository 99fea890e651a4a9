"""`--verify K`: the K cheapest candidates predicted to meet the SLO are benched one at a time and re-ranked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sagellm.catalog import find_model
from sagellm.planner import Payload
from sagellm.recommend import Load, Space, choose, instance_types, search
from sagellm.recommend.choose import rank
from sagellm.recommend.slo import gap_of
from sagellm.recommend.verify import LOCAL_REPLAYS_PLANNER, Verification, Verified, _rerank
from sagellm.results.gate import Rule

SAGELLM = Path(sys.executable).parent / "sagellm"


@pytest.mark.slow
def test_a_candidate_measured_to_miss_loses_the_pick_to_the_next_cheapest(tmp_path):
    load = Load(request_rate=2)
    rules = (Rule(metric="itl_ms.p50", where="2/s", max=40),)
    found = search(Space(find_model("llama2-7b"), Payload(), instance_types(families=("g5", "g6e"))), load, rules)
    rec = choose(found, load, rules, Payload())
    meeting = sorted((c for c in rec.candidates if c.meets), key=lambda c: rank(c, rules))  # as choose ranks
    first, second = meeting[0], meeting[1]
    assert rec.pick is first
    missed = Verified(first, tmp_path / "run-1", measured={rules[0].label: 55.0},
                      gaps=[gap for gap in [gap_of(rules[0], 55.0)] if gap])
    passed = Verified(second, tmp_path / "run-2", measured={rules[0].label: 30.0})
    done = Verification("local", [missed, passed])
    _rerank(rec, done)
    assert rec.pick is second
    assert rec.reason(first) == "measured: misses itl_ms.p50 by 38 % (55 against max 40)"
    benches = done.to_dict()["candidates"]
    assert [v["meets_slo_measured"] for v in benches] == [False, True]
    assert benches[1]["measured_over_predicted"][rules[0].label] == pytest.approx(30.0 / second.values[rules[0].label])
    # Nothing measured to meet: no pick, the closest is named.
    _rerank(rec, Verification("local", [missed]))
    assert rec.pick is None and rec.closest is first


@pytest.mark.integration
def test_verify_2_benches_two_candidates_on_the_local_emulator_and_tears_both_down(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("rules:\n  - {metric: itl_ms.p50, max: 40}\n")
    result = subprocess.run(
        [str(SAGELLM), "recommend", "--model", "llama2-7b", "--request-rate", "2", "--thresholds", str(slo),
         "--instances", "ml.g5.2xlarge,ml.g6e.xlarge", "--engines", "tgi", "--verify", "2", "--out", "rec"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    verified = data["verify"]["candidates"]
    assert len(verified) == 2
    assert data["verify"]["target"] == "local" and data["verify"]["correction"] == [LOCAL_REPLAYS_PLANNER]
    runs = sorted((tmp_path / "rec" / "verify").glob("run-*/results.json"))
    assert len(runs) == 2
    stacks = set()
    for path in runs:
        results = json.loads(path.read_text())
        assert results["teardown"]["status"] == "destroyed" and not results["teardown"]["leftovers"]
        stacks.add(results["teardown"]["detail"])
        # The target and one step above; a sweep may stop after the target (an over-saturated level, on a busy
        # machine), and then says why.
        rates = [lv["request_rate"] for lv in results["levels"]]
        assert rates == [2.0, 3.0] or (rates == [2.0] and results["stopped_reason"]), (rates, results["stopped_reason"])
    assert len(stacks) == 2
    for v in verified:
        ratio = v["measured_over_predicted"]["itl_ms.p50@2/s <= 40"]
        assert ratio is not None and ratio > 0
    passing = [v["deployment"] for v in verified if v["meets_slo_measured"]]
    costs = {c["deployment"]: c["usd_per_h"] for c in data["candidates"]}
    assert data["pick"]["deployment"] == min(passing, key=costs.__getitem__)
    assert "measured ÷ predicted" in result.stdout


def sagellm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("args", "message"), [
    (("--verify", "1", "--target", "sagemaker", "--time-scale", "0.1"),
     "--time-scale: only with --target local (a SageMaker endpoint runs in real time)"),
    (("--target", "sagemaker",), "--target: only with --verify K (it sets how the candidates are benched)"),
    (("--budget-minutes", "5",), "--budget-minutes: only with --verify K (it sets how the candidates are benched)"),
    (("--verify", "1", "--hf-token-secret", "hf"),
     "--hf-token-secret: only with --target sagemaker (the local emulator loads no weights)"),
    (("--verify", "1", "--target", "aws"), "--target: 'aws' must be local or sagemaker"),
])
@pytest.mark.slow
def test_verify_options_out_of_place_are_one_line_of_bad_input(tmp_path, args, message):
    slo = tmp_path / "slo.yaml"
    slo.write_text("rules:\n  - {metric: itl_ms.p50, max: 40}\n")
    result = sagellm("recommend", "--model", "llama2-7b", "--concurrency", "4", "--thresholds", str(slo), *args,
                     cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"sagellm: error: {message}"]
    assert not (tmp_path / "recommendation").exists()


def finalists_of(load: Load, tmp_path: Path):
    rules = (Rule(metric="itl_ms.p50", where=load.name, max=60),)
    found = search(Space(find_model("llama2-7b"), Payload(), instance_types(("ml.g5.2xlarge", "ml.g6e.xlarge")),
                         engines=("tgi",), profiles_dir=tmp_path / "profiles"), load, rules)
    return choose(found, load, rules, Payload())


def test_an_interrupted_bench_ends_the_verify_and_starts_no_other(tmp_path, monkeypatch):
    from sagellm import bench
    from sagellm.bench import BenchOutcome
    from sagellm.errors import ExitStatus
    from sagellm.recommend.verify import finalists, verify

    rec = finalists_of(Load(concurrency=4), tmp_path)
    started = []

    def interrupted(spec, say=None):
        started.append(spec)
        return BenchOutcome(None, ExitStatus.INTERRUPTED, "interrupted: stopped measuring, tore down")  # type: ignore[arg-type]

    monkeypatch.setattr(bench, "run", interrupted)
    said: list[str] = []
    done = verify(rec, "meta-llama/Llama-2-7b-hf", 2, tmp_path / "out", target=bench.SageMaker(), budget_minutes=30,
                  say=said.append, profiles_dir=tmp_path / "profiles")
    assert len(started) == 1 and done.interrupted
    assert said[-1] == "verify: interrupted: stopped measuring, tore down; no other candidate benched"
    assert done.correction == [] and not (tmp_path / "profiles" / "calibration").exists()
    # Re-ranked on nothing: the interrupted bench measured nothing about its candidate.
    assert rec.verification["interrupted"] is True and rec.pick is finalists(rec, 1)[0] and not rec.measured_misses


def test_a_signal_between_benches_ends_the_verify_with_its_results(tmp_path, monkeypatch):
    # Outside a bench's own signal handling (no stack exists there), SIGTERM used to end recommend at once,
    # its search and the benches done lost; now it ends the loop and the recommendation is still written.
    import os
    import signal

    from sagellm import bench
    from sagellm.bench import BenchOutcome
    from sagellm.errors import ExitStatus
    from sagellm.recommend.verify import verify

    rec = finalists_of(Load(concurrency=4), tmp_path)
    started = []

    def signalled_after_its_teardown(spec, say=None):
        started.append(spec)
        os.kill(os.getpid(), signal.SIGTERM)  # as if it came once the bench had returned
        return BenchOutcome(None, ExitStatus.TARGET_FAILED, "deploy failed")  # type: ignore[arg-type]

    def reached_the_process(signum, frame):
        pytest.fail("SIGTERM reached the process's own handler: verify did not catch it")

    monkeypatch.setattr(bench, "run", signalled_after_its_teardown)
    before = signal.signal(signal.SIGTERM, reached_the_process)
    try:
        said: list[str] = []
        done = verify(rec, "meta-llama/Llama-2-7b-hf", 2, tmp_path / "out", target=bench.Local(), budget_minutes=30,
                      say=said.append, profiles_dir=tmp_path / "profiles")
        assert signal.getsignal(signal.SIGTERM) is reached_the_process  # the process's own handling is back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert len(started) == 1 and done.interrupted
    assert said[-1] == "verify: SIGTERM between benches; no other candidate benched"


def test_before_the_first_deploy_the_cost_at_most_is_said(tmp_path):
    from sagellm.recommend.verify import cost_line, finalists

    rec = finalists_of(Load(concurrency=4), tmp_path)
    chosen = finalists(rec, 2)
    dearest = max(c.usd_per_h for c in chosen)
    line = cost_line(chosen, 30, "eu-west-1")
    assert line.startswith("verify on sagemaker (eu-west-1): 2 deployment(s) in your account, one at a time; at most "
                           f"about ${dearest / 2:.2f} on demand (${dearest:.2f}/h, the dearest, × the 30-min budget")


@pytest.mark.slow
def test_a_stored_correction_moves_the_next_recommends_prediction_and_is_named(tmp_path):
    from sagellm.engines.tgi import TGI
    from sagellm.profiles.calibration import CalibrationFile, calibration_path, save_calibration

    load = Load(concurrency=4)
    before = finalists_of(load, tmp_path)
    label = "itl_ms.p50@4 <= 60"
    g5 = next(c for c in before.candidates if c.config.instance_type == "ml.g5.2xlarge" and c.instance_count == 1)
    path = calibration_path(tmp_path / "profiles", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge", "tgi", TGI.pinned)
    save_calibration(path, CalibrationFile(
        model="meta-llama/Llama-2-7b-hf", instance_type="ml.g5.2xlarge", container="tgi",
        container_version=TGI.pinned, generation="tgi-3", decode_floor=1.5, decode_per_sequence=1.5, prefill=1.0,
        runs=[], error_pct_before={}, error_pct_after={}, sagellm_version="test"))

    after = finalists_of(load, tmp_path)
    moved = next(c for c in after.candidates if c.config == g5.config and c.instance_count == 1)
    other = [(c.config, c.values) for c in after.candidates if c.config.instance_type == "ml.g6e.xlarge"]
    assert moved.values[label] > 1.3 * g5.values[label]
    assert other == [(c.config, c.values) for c in before.candidates if c.config.instance_type == "ml.g6e.xlarge"]
    assert f"ml.g5.2xlarge tgi: predicted with the measured correction stored in {path.parent}" in after.notes


def test_no_correction_is_stored_from_the_local_emulator_an_open_loop_or_no_finished_bench(tmp_path):
    from sagellm.recommend.verify import OPEN_LOOP_UNFITTABLE, _store_correction

    rec = finalists_of(Load(concurrency=4), tmp_path)
    failed = Verified(rec.pick, tmp_path / "run-1", error="deploy failed")
    team = tmp_path / "profiles"
    assert _store_correction(Verification("local", [failed]), Load(concurrency=4), tmp_path, team) == \
        [LOCAL_REPLAYS_PLANNER]
    assert _store_correction(Verification("sagemaker", [failed]), Load(request_rate=2), tmp_path, team) == \
        [OPEN_LOOP_UNFITTABLE]
    assert _store_correction(Verification("sagemaker", [failed]), Load(concurrency=4), tmp_path, team) == \
        ["not stored: no bench finished"]
    assert not (team / "calibration").exists()

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
from sagellm.recommend.slo import gap_of
from sagellm.recommend.verify import LOCAL_REPLAYS_PLANNER, Verification, Verified, _rerank
from sagellm.results.gate import Rule

SAGELLM = Path(sys.executable).parent / "sagellm"


def test_a_candidate_measured_to_miss_loses_the_pick_to_the_next_cheapest(tmp_path):
    load = Load(request_rate=2)
    rules = (Rule(metric="itl_ms.p50", where="2/s", max=40),)
    found = search(Space(find_model("llama2-7b"), Payload(), instance_types(families=("g5", "g6e"))), load, rules)
    rec = choose(found, load, rules, Payload())
    meeting = sorted((c for c in rec.candidates if c.meets), key=lambda c: c.usd_per_h)
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
        assert {lv["request_rate"] for lv in results["levels"]} == {2.0, 3.0}  # the target and one step above
    assert len(stacks) == 2
    for v in verified:
        ratio = v["measured_over_predicted"]["itl_ms.p50@2/s <= 40"]
        assert ratio is not None and ratio > 0
    passing = [v["deployment"] for v in verified if v["meets_slo_measured"]]
    costs = {c["deployment"]: c["usd_per_h"] for c in data["candidates"]}
    assert data["pick"]["deployment"] == min(passing, key=costs.__getitem__)
    assert "measured ÷ predicted" in result.stdout

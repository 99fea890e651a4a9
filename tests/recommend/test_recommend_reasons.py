"""`sagellm recommend` answers like an engineer: exit 1 names the limit that binds and the closest candidate's
numbers, a rate in any float spelling, progress on stderr, the instance count in the cost, margins and headroom."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sagellm.catalog import instances
from sagellm.results.schema import parse_load

SAGELLM = Path(sys.executable).parent / "sagellm"
SLO = "rules:\n  - {metric: ttft_ms.p90, max: 800}\n  - {metric: itl_ms.p50, max: 40}\n"
VERDICT = "sagellm: nothing is predicted to meet the SLO at "


def recommend(tmp_path: Path, *args: str, slo: str = SLO) -> subprocess.CompletedProcess[str]:
    (tmp_path / "slo.yaml").write_text(slo)
    return subprocess.run([str(SAGELLM), "recommend", "--thresholds", "slo.yaml", "--engines", "tgi", "--out", "rec",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)


def verdict(result: subprocess.CompletedProcess[str]) -> tuple[str, list[str]]:
    """The verdict line on stderr and the lines after it."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("recommend: ")]
    assert lines and lines[0].startswith(VERDICT), result.stderr
    return lines[0], lines[1:]


def output(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "rec" / "recommendation.json").read_text())


@pytest.mark.slow
def test_a_load_nothing_carries_names_the_instance_count_and_a_rate_in_e_notation_is_a_rate(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--request-rate", "1e+06", "--families", "g5")
    assert result.returncode == 1, result.stderr
    line, rest = verdict(result)
    assert line == (f"{VERDICT}1e+06/s; binding limit: instance count (no searched deployment carries 1e+06/s at "
                    "up to 64 instances, one for inference components)")
    # the closest is the fleet that carries the most of the rate, with its numbers
    assert len(rest) == 1 and rest[0].startswith("closest: 64 × ml.g5.") and "carries at most" in rest[0], rest
    data = output(tmp_path)
    assert data["binding_limit"] == line.split("; ", 1)[1]
    assert data["closest"]["instance_count"] == 64


@pytest.mark.parametrize("spelling", ["5e-05/s", "0.00005/s", ".00005/s"])
@pytest.mark.slow
def test_a_rate_in_any_float_spelling_names_the_same_level(tmp_path, spelling):
    assert parse_load(spelling) == 5e-05
    slo = f"rules:\n  - {{metric: itl_ms.p50, max: 40}}\n  - {{metric: itl_ms.p50, where: '{spelling}', max: 41}}\n"
    result = recommend(tmp_path, "--model", "llama2-7b", "--request-rate", "5e-05", "--instances", "ml.g5.xlarge",
                       slo=slo)
    assert result.returncode == 0, result.stderr
    pick = output(tmp_path)["pick"]
    at_target, at_where = pick["slo"].values()
    assert at_target == at_where  # one level, whichever way its rate is written


@pytest.mark.slow
def test_a_payload_over_the_context_names_the_context(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--request-rate", "1", "--input-tokens", "8000",
                       "--instances", "ml.g5.xlarge,ml.g5.12xlarge")
    assert result.returncode == 1, result.stderr
    line, rest = verdict(result)
    assert line == (f"{VERDICT}1/s; binding limit: context (8000+256 tokens exceed the 4096-token context of "
                    "meta-llama/Llama-2-7b-hf: shorten --input-tokens / --output-tokens)")
    assert rest == []  # over the context, no deployment is closer than another


@pytest.mark.slow
def test_a_model_too_big_for_every_instance_names_the_memory(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-70b", "--request-rate", "1",
                       "--instances", "ml.g5.xlarge,ml.g5.12xlarge")
    assert result.returncode == 1, result.stderr
    line, rest = verdict(result)
    assert line == f"{VERDICT}1/s; binding limit: memory (the model does not fit any searched instance type)"
    # the closest is the one with the most GPU memory
    assert len(rest) == 1 and rest[0].startswith("closest: 1 × ml.g5.12xlarge TP4 - at $") and "does not fit" \
        in rest[0], rest


@pytest.mark.slow
def test_inferentia_only_instances_say_none_was_searched_and_why(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--request-rate", "1", "--instances", "ml.inf2.xlarge")
    assert result.returncode == 1, result.stderr
    line, rest = verdict(result)
    assert line == (f"{VERDICT}1/s; binding limit: no instance searched (ml.inf2.xlarge: not searched (Inferentia "
                    "needs compiled artefacts and the planner's step times are GPU measurements); name GPU instance "
                    "types, or leave --instances out)")
    assert rest == []


@pytest.mark.slow
def test_a_rule_nothing_meets_names_the_rule_with_predicted_and_allowed(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--concurrency", "4", "--instances", "ml.g5.xlarge",
                       slo="rules:\n  - {metric: ttft_ms.p90, max: 5}\n  - {metric: itl_ms.p50, max: 400}\n")
    assert result.returncode == 1, result.stderr
    line, (closest,) = verdict(result)
    data = output(tmp_path)
    ttft = data["closest"]["slo"]["ttft_ms.p90@4 <= 5"]
    assert line == f"{VERDICT}4; binding limit: ttft_ms.p90 (predicted {ttft:.4g} on the closest, allowed <= 5)"
    # the closest's numbers: each rule's value, with its margin or its miss
    assert closest.startswith(f"closest: {data['closest']['deployment']} at $")
    assert f"misses ttft_ms.p90 by {(ttft - 5) / 5 * 100:.0f} % ({ttft:.4g} against max 5)" in closest
    assert "itl_ms.p50 " in closest and "<= 400 (" in closest and "% margin)" in closest


@pytest.mark.slow
def test_headroom_keeps_the_pick_off_the_edge_and_says_what_it_passed_over(tmp_path):
    args = ("--model", "llama2-7b", "--concurrency", "16", "--families", "g5")
    cheapest = recommend(tmp_path, *args, "--headroom", "0")
    assert cheapest.returncode == 0, cheapest.stderr
    # Tighten the rule the cheapest pick passes by least to 5 % above its prediction: it still passes, at the edge.
    label, tightest = min(output(tmp_path)["pick"]["margins"].items(), key=lambda kv: kv[1]["margin_pct"])
    rules = yaml.safe_load(SLO)["rules"]
    (rule,) = [r for r in rules if r["metric"] == label.split("@")[0]]
    rule["max"] = float(f"{tightest['predicted'] * 1.05:.6g}")
    slo = yaml.safe_dump({"rules": rules})
    edge = recommend(tmp_path, *args, "--headroom", "0", slo=slo)
    assert edge.returncode == 0, edge.stderr
    edge_pick = output(tmp_path)["pick"]
    thinnest = min(m["margin_pct"] for m in edge_pick["margins"].values())
    assert thinnest < 10, "the SLO should put the cheapest pick within 10 % of a limit"

    result = recommend(tmp_path, *args, slo=slo)
    assert result.returncode == 0, result.stderr
    data = output(tmp_path)
    pick = data["pick"]
    assert data["headroom_pct"] == 10
    assert all(m["margin_pct"] >= 10 for m in pick["margins"].values())
    assert pick["usd_per_h"] > edge_pick["usd_per_h"]
    assert edge_pick["deployment"] == data["passed_over_for_headroom"][0]
    (passed,) = [c for c in data["candidates"] if c["deployment"] == edge_pick["deployment"]]
    assert passed["meets_slo"] and passed["why_not"].startswith(f"meets the SLO with only {thinnest:.0f} % margin on ")
    stdout = result.stdout.splitlines()
    margins = "; ".join(m["text"] for m in pick["margins"].values())
    assert f"margins: {margins}" in stdout and "% margin)" in margins
    assert any(line.startswith(f"passed over for headroom only: {edge_pick['deployment']} at $") for line in stdout)
    # the instance count enters the cost and the table: N instances at N × the instance's price
    multi = [c for c in data["candidates"] if c["instance_count"] > 1]
    assert multi
    for c in multi:
        assert c["usd_per_h"] == pytest.approx(instances()[c["instance_type"]].price_per_h("us-east-1")
                                               * c["instance_count"])
        assert c["deployment"].startswith(f"{c['instance_count']} × ")
    table = (tmp_path / "rec" / "frontier.md").read_text()
    row = next(line for line in table.splitlines() if "**pick**" in line)
    assert f"| {pick['deployment']} | {pick['usd_per_h']:.4g} |" in row
    assert "ttft_ms.p90@16 <= 800 (margin)" in table


@pytest.mark.slow
def test_no_pick_with_the_headroom_names_the_headroom(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--concurrency", "4", "--instances", "ml.g5.xlarge",
                       "--headroom", "99")
    assert result.returncode == 1, result.stderr
    line, (closest,) = verdict(result)
    assert line.startswith(f"{VERDICT}4; binding limit: headroom (the closest meets ") and \
        line.endswith("% margin; --headroom asks 99 %)")
    assert "% margin)" in closest


@pytest.mark.slow
def test_progress_goes_to_stderr_and_json_stays_quiet(tmp_path):
    result = recommend(tmp_path, "--model", "llama2-7b", "--concurrency", "4", "--instances",
                       "ml.g5.xlarge,ml.g5.2xlarge")
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("recommend: ")]
    assert progress[0].startswith("recommend: 0/2 instance types searched, 0 candidates predicted (")
    assert progress[-1].startswith("recommend: 2/2 instance types searched, ")
    assert not any(line.startswith("recommend: ") for line in result.stdout.splitlines())
    quiet = recommend(tmp_path, "--model", "llama2-7b", "--concurrency", "4", "--instances", "ml.g5.xlarge",
                      "--json")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "" and json.loads(quiet.stdout)["pick"] is not None

"""`sagellm gate` on finished runs: every gate and baseline case with its exact exit code, and the run's own
files left as they were (the verdict goes beside them). Through `main()`, the console script's entry point."""

from __future__ import annotations

import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from results_helpers import level, read_json, results, write_run
from sagellm.cli import main
from sagellm.results.schema import Failure

PASSING = """
    rules:
      - {metric: error_rate, where: 8, max: 0.01}
      - {metric: throughput_tokens_per_s, where: max, min: 300}
"""
FAILING = "rules:\n  - {metric: latency_ms_per_token.p50, where: 4, max: 10}\n"
UNREACHED = "rules:\n  - {metric: ttft_ms.p99, where: 32, max: 500}\n"  # planned, but the sweep stopped at 16


@dataclass
class Ran:
    """What one `sagellm` call returned."""

    code: int
    out: str
    err: str


Sagellm = Callable[..., Ran]


@pytest.fixture
def sagellm(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Sagellm:
    def run(*args: str) -> Ran:
        monkeypatch.setattr(sys, "argv", ["sagellm", *args])
        with pytest.raises(SystemExit) as exc:
            main()
        captured = capsys.readouterr()
        return Ran(int(exc.value.code or 0), captured.out, captured.err)
    return run


def rules(folder: Path, text: str, name: str = "gates.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def one_line_error(ran: Ran) -> str:
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sagellm: error: "), ran.err
    return lines[0]


def cases(junit: Path) -> dict[str, str]:
    [suite] = ET.parse(junit).getroot().findall("testsuite")
    return {c.get("name", ""): next((t for t in ("failure", "error", "skipped") if c.find(t) is not None), "passed")
            for c in suite.findall("testcase")}


@pytest.mark.slow
def test_a_passing_gate_exits_0_and_writes_its_verdict_beside_the_run(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    before = run.read_bytes()

    ran = sagellm("gate", str(run), "--thresholds", str(rules(tmp_path, PASSING)))

    assert ran.code == 0, ran.err
    assert ran.out.splitlines()[-1] == f"PASS: 2 rule(s), 0 violation(s); written to {tmp_path / 'run' / 'gate'}/"
    assert run.read_bytes() == before  # the run's own results stay as the bench wrote them
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["gate", "results.json"]
    verdict = tmp_path / "run" / "gate"
    assert sorted(p.name for p in verdict.iterdir()) == ["curve.png", "junit.xml", "report.md", "results.csv",
                                                         "results.json"]
    assert read_json(verdict / "results.json")["gate"]["passed"] is True
    assert (verdict / "report.md").read_text().startswith("**PASS** — 2 threshold rule(s)")
    assert set(cases(verdict / "junit.xml").values()) == {"passed"}


@pytest.mark.slow
def test_a_failing_rule_exits_1_with_the_violation_printed(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")

    ran = sagellm("gate", str(run), "--thresholds", str(rules(tmp_path, FAILING)), "--out", str(tmp_path / "v"))

    assert ran.code == 1, ran.err
    assert "FAIL latency_ms_per_token.p50@4 <= 10: latency_ms_per_token.p50@4: 14 > max 10" in ran.out
    assert cases(tmp_path / "v" / "junit.xml")["latency_ms_per_token.p50@4 <= 10"] == "failure"


@pytest.mark.slow
def test_a_planned_level_the_sweep_never_reached_exits_1_as_an_error_case(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")

    ran = sagellm("gate", str(run), "--thresholds", str(rules(tmp_path, UNREACHED)))

    assert ran.code == 1, ran.err
    assert "ttft_ms.p99@32: level 32 was not measured (stopped at 16: error rate 16.7%" in ran.out
    assert cases(tmp_path / "run" / "gate" / "junit.xml")["ttft_ms.p99@32 <= 500"] == "error"


@pytest.mark.slow
def test_a_level_outside_the_runs_sweep_is_bad_input_exit_2(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    gates = rules(tmp_path, "rules:\n  - {metric: error_rate, where: 3, max: 0.01}\n")

    ran = sagellm("gate", str(run), "--thresholds", str(gates))

    assert ran.code == 2
    assert one_line_error(ran) == (f"sagellm: error: {gates}: rules[0].where: 3 is not a level of the sweep "
                                   "(1, 2, 4, 8, 16, 32); use one of its levels, knee or max")
    assert not (tmp_path / "run" / "gate").exists()


@pytest.mark.slow
def test_an_empty_rule_list_is_bad_input_exit_2(sagellm: Sagellm, tmp_path: Path) -> None:
    ran = sagellm("gate", str(write_run(tmp_path / "run")), "--thresholds", str(rules(tmp_path, "rules: []\n")))

    assert ran.code == 2
    assert "rules: empty, so the gate would pass anything" in one_line_error(ran)


@pytest.mark.slow
def test_nothing_to_check_is_bad_input_exit_2(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    baseline_block_only = rules(tmp_path, "baseline: {max_regression_pct: 5}\n")

    bare = sagellm("gate", str(run))
    no_file = sagellm("gate", str(run), "--thresholds", str(baseline_block_only))

    assert (bare.code, no_file.code) == (2, 2)
    assert "nothing to check (give a thresholds file, a baseline, or both)" in one_line_error(bare)
    assert "--baseline: required: the thresholds have no rules" in one_line_error(no_file)


@pytest.mark.slow
def test_out_pointing_at_the_runs_own_folder_is_bad_input_exit_2(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")

    ran = sagellm("gate", str(run), "--thresholds", str(rules(tmp_path, PASSING)), "--out", str(tmp_path / "run"))

    assert ran.code == 2
    assert "is the run's own folder and its files would be overwritten" in one_line_error(ran)


@pytest.mark.parametrize(("field", "value"), [
    ("model", "mistralai/Mistral-7B-v0.1"), ("instance_type", "ml.g5.12xlarge"),
    ("container", "djl-inference:0.29.0-lmi11.0.0-cu124"), ("input_tokens", 64), ("output_tokens", 128),
])
@pytest.mark.slow
def test_an_incomparable_baseline_is_refused_exit_2_unless_allowed(
        sagellm: Sagellm, tmp_path: Path, field: str, value: object) -> None:
    run = write_run(tmp_path / "run")
    baseline = write_run(tmp_path / "old", **{field: value})
    gates = rules(tmp_path, PASSING)

    refused = sagellm("gate", str(run), "--thresholds", str(gates), "--baseline", str(baseline))
    allowed = sagellm("gate", str(run), "--thresholds", str(gates), "--baseline", str(baseline),
                      "--allow-incomparable")

    assert refused.code == 2
    assert f"{baseline}: baseline not comparable with this run: {field} " in one_line_error(refused)
    assert "--allow-incomparable" in refused.err
    assert allowed.code == 0, allowed.out + allowed.err
    assert f"NOTE baseline differs (--allow-incomparable): {field} " in allowed.out
    verdict = read_json(tmp_path / "run" / "gate" / "results.json")["gate"]
    assert verdict["incomparable"] and verdict["incomparable"][0].startswith(f"{field} ")


@pytest.mark.slow
def test_a_baseline_of_another_profile_is_comparable(sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    baseline = write_run(tmp_path / "old", profile="min-latency", environment={"MAX_CONCURRENT_REQUESTS": "1"})

    ran = sagellm("gate", str(run), "--baseline", str(baseline))

    assert ran.code == 0, ran.out + ran.err
    assert "NOTE" not in ran.out


@pytest.mark.slow
def test_a_baseline_alone_gates_on_the_default_metrics_and_a_regression_exits_1(
        sagellm: Sagellm, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    faster = results([level(c, 2 * lv.throughput_tokens_per_s, 10) for c, lv in
                      zip((1, 2, 4, 8, 16), results().levels, strict=True)])
    baseline = write_run(tmp_path / "old", faster)

    ran = sagellm("gate", str(run), "--baseline", str(baseline), "--json")

    assert ran.code == 1, ran.err
    verdict = read_json(tmp_path / "run" / "gate" / "results.json")["gate"]
    assert verdict["rules"] == ["baseline latency_ms_per_token.p50 within 10%", "baseline ttft_ms.p50 within 10%",
                                "baseline throughput_tokens_per_s within 10%"]
    assert {v["rule"] for v in verdict["violations"]} == {"baseline latency_ms_per_token.p50 within 10%",
                                                          "baseline throughput_tokens_per_s within 10%"}
    assert '"passed": false' in ran.out


@pytest.mark.parametrize("status", [3, 130])
@pytest.mark.slow
def test_a_run_that_did_not_complete_never_passes_its_exit_status_is_kept(
        sagellm: Sagellm, tmp_path: Path, status: int) -> None:
    failure = Failure(exit_status=status, message="deploy failed: no capacity")  # type: ignore[arg-type]
    run = write_run(tmp_path / "run", results(failure=failure))

    ran = sagellm("gate", str(run), "--thresholds", str(rules(tmp_path, PASSING)))

    assert ran.code == status
    assert ran.out.splitlines()[-1].startswith("PASS: 2 rule(s), 0 violation(s)")  # the rules themselves held
    assert one_line_error(ran) == "sagellm: error: the run did not complete: deploy failed: no capacity"
    assert cases(tmp_path / "run" / "gate" / "junit.xml")["bench run"] == "error"

"""`sagellm bench|gate|report|emulate|cleanup` end to end, as a pipeline runs them: the console script in a
subprocess, its exit code, its out folder, and what it leaves running (nothing)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import textwrap
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench_helpers import (
    AS_FROM_A_TERMINAL,
    INSTANCE,
    MODEL,
    SAGELLM,
    Ran,
    bench_args,
    emulator_children_of,
    finish,
    free_port,
    hung_server,
    processes_mentioning,
    request_lines,
    results_of,
    sagellm,
    spawn,
    wait_for,
)
from sagellm.aws.local import LocalAws
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess
from sagellm.emulator.process import port_is_free
from sagellm.planner import Payload
from sagellm.profiles import resolve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PASSING = """
    slo_ms_per_token: 100000
    rules:
      - {metric: error_rate, where: 1, max: 0.05}
      - {metric: throughput_tokens_per_s, where: max, min: 1}
      - {metric: latency_ms_per_token.p50, where: knee, max: 100000}
      - {metric: cost.usd_per_1m_tokens, max: 1000000}
"""
# No endpoint serves Llama 2 7B at 1 ms/token: this rule fails on any run.
FAILING = """
    rules:
      - {metric: latency_ms_per_token.p50, where: 1, max: 1}
      - {metric: error_rate, where: 1, max: 0.05}
"""
FAILING_RULE = "latency_ms_per_token.p50@1 <= 1"
BASELINE_LATENCY = """
    rules:
      - {metric: error_rate, where: 1, max: 0.05}
    baseline: {max_regression_pct: 10, metrics: [latency_ms_per_token.p50]}
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def junit(out: Path) -> ET.Element:
    """The single testsuite of junit.xml."""
    [suite] = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    return suite


def failed_cases(out: Path) -> list[str]:
    return [case.get("name", "") for case in junit(out).findall("testcase") if case.find("failure") is not None]


def case_names(out: Path) -> list[str]:
    return [case.get("name", "") for case in junit(out).findall("testcase")]


def assert_one_line_error(ran: Ran) -> str:
    """Expected errors: one `sagellm: error:` line on stderr, never a traceback."""
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sagellm: error: "), ran.stderr
    return lines[0]


def assert_nothing_running(ran: Ran, out: Path) -> None:
    """No emulator child of that bench, no CDK CLI (or app it synthesizes) working in its out folder."""
    assert emulator_children_of(ran.pid) == []
    assert processes_mentioning(str(out)) == []


def faster_baseline(results: Path, folder: Path, factor: float) -> Path:
    """A copy of results.json whose ms/token is `factor` × the measured one (so this run regressed)."""
    data = json.loads(results.read_text())
    for level in data["levels"]:
        stats = level["latency_ms_per_token"]
        level["latency_ms_per_token"] = {k: (v * factor if v is not None else None) for k, v in stats.items()}
    path = folder / "baseline.json"
    path.write_text(json.dumps(data))
    return path


# -------------------------------------------------------------------------------- the happy path, shared

@pytest.fixture(scope="module")
def happy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    """One local bench with passing thresholds and --json: levels 1,4, 4 requests each, 1 warm-up per worker."""
    folder = tmp_path_factory.mktemp("happy")
    gates = write(folder, "gates.yaml", PASSING)
    out = folder / "out"
    return sagellm(*bench_args(out, "--thresholds", str(gates), "--json", warmup="1")), out


@pytest.fixture
def finished(happy: tuple[Ran, Path], tmp_path: Path) -> Path:
    """A private copy of the happy run's out folder (gate and report rewrite files in it)."""
    copy = tmp_path / "run"
    shutil.copytree(happy[1], copy, ignore=shutil.ignore_patterns("cdk"))
    return copy


@pytest.mark.integration
def test_local_bench_exits_0_and_prints_the_results_json(happy: tuple[Ran, Path]) -> None:
    ran, out = happy

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert json.loads(ran.stdout) == results_of(out)  # stdout holds the JSON and nothing else
    assert_nothing_running(ran, out)


@pytest.mark.integration
def test_results_json_records_the_run_levels_predictions_teardown_and_gate(happy: tuple[Ran, Path]) -> None:
    results = results_of(happy[1])

    assert results["schema_version"] == 2
    run = results["run"]
    assert (run["target"], run["emulated"], run["time_scale"], run["clock"]) == ("local", True, 0.05, "emulator")
    assert run["workload"] == {"prompts": "unique", "api": "tgi", "input_tokens": "256", "output_tokens": "32",
                               "shared_prefix_tokens": 0, "shared_prefixes": 1, "dataset": None, "dataset_entries": None,
                               "token_counter": "words", "tokenizer": None, "seed": 0, "turns": None,
                               "think_time_s": None, "trace": None}
    assert (run["profile"], run["model"], run["instance_type"]) == ("max-throughput", MODEL, INSTANCE)
    assert (run["input_tokens"], run["output_tokens"], run["concurrency"]) == (256, 32, [1, 4])
    assert run["container"].startswith("huggingface-pytorch-tgi-inference:")  # the image, registry left out
    assert run["environment"]["MAX_CONCURRENT_REQUESTS"]
    assert run["command"].startswith("sagellm bench --profile max-throughput")
    assert [lv["concurrency"] for lv in results["levels"]] == [1, 4]
    for level in results["levels"]:
        assert level["requests"] == level["ok"] == 4
        assert level["throughput_tokens_per_s"] > 0
        # Compressed time is reported back in simulated seconds: comparable with the planner's prediction.
        predicted = level["predicted"]
        assert predicted["ms_per_token"] > 0
        assert 0.5 < level["latency_ms_per_token"]["p50"] / predicted["ms_per_token"] < 2
    assert results["knee"] and results["max_throughput"]
    assert results["cost"]["usd_per_h"] > 0 and results["cost"]["usd_per_1m_tokens"] > 0
    assert results["teardown"]["status"] == "destroyed"
    assert results["teardown"]["leftovers"] == []
    assert results["gate"] == {"passed": True, "violations": [], "incomparable": [], "rules": [
        "error_rate@1 <= 0.05", "throughput_tokens_per_s@max >= 1", "latency_ms_per_token.p50@knee <= 100000",
        "cost.usd_per_1m_tokens <= 1e+06"]}
    assert results["stopped_reason"] is None
    assert results["failure"] is None


@pytest.mark.integration
def test_outside_a_terminal_the_log_has_a_line_per_phase_and_per_level(happy: tuple[Ran, Path]) -> None:
    ran, out = happy
    lines = [line.split("] ", 1)[1] for line in ran.stderr.splitlines() if line.startswith("sagellm [")]

    phases = [next(i for i, line in enumerate(lines) if line.startswith(start)) for start in (
        f"deploying: max-throughput ({INSTANCE} × 1) to the local target", "measuring: endpoint sagellm-bench-",
        "tearing down", f"writing results: {out}")]
    assert phases == sorted(phases) and lines[phases[1]].endswith("levels 1, 4")
    done = [line for line in lines if line.startswith("level done")]
    assert [line.split(" · ")[1:3] for line in done] == [["concurrency 1", "5/5 done"], ["concurrency 4", "8/8 done"]]
    assert all(" tok/s · TTFT p50 " in line and "–" not in line for line in done)  # live figures were measured
    heartbeat = re.compile(r"starting|deploying|measuring( · concurrency \d+ · \d+/\d+ done · .+)?|tearing down"
                           r"|writing results|reading server metrics")
    others = set(range(len(lines))) - set(phases) - {lines.index(line) for line in done}
    assert all(heartbeat.fullmatch(lines[i]) for i in others), lines


@pytest.mark.integration
def test_thresholds_slo_is_reported_like_the_slo_flag(happy: tuple[Ran, Path]) -> None:
    slo = results_of(happy[1])["slo"]

    assert slo is not None and slo["ms_per_token"] == 100000
    assert slo["best"] is not None


@pytest.mark.integration
def test_requests_jsonl_has_one_line_per_request_including_warmups(happy: tuple[Ran, Path]) -> None:
    records = request_lines(happy[1])

    assert len(records) == 4 + 1 + 4 + 4  # per level: 4 measured + 1 warm-up per worker
    assert sum(r["warmup"] for r in records) == 1 + 4
    assert [r["concurrency"] for r in records] == [1] * 5 + [4] * 8  # levels in order
    assert all(r["ok"] and r["output_tokens"] == 32 and r["input_tokens"] == 256 for r in records)
    assert all(r["ttft_s"] > 0 and len(r["token_gaps_s"]) == 31 for r in records)
    # Timed on the emulator's simulated clock; what the client saw is kept, in wall-clock seconds.
    assert all(r["clock"] == "emulator" and r["client_e2e_s"] < r["e2e_s"] for r in records)
    assert all(r["input_tokens_by"] == "server" for r in records)


@pytest.mark.integration
def test_bench_writes_report_curve_and_junit(happy: tuple[Ran, Path]) -> None:
    out = happy[1]

    report = (out / "report.md").read_text()
    assert report.splitlines()[0] == "**PASS** — 4 threshold rule(s), no violation"
    assert "Status: **destroyed**" in report
    assert "![latency vs throughput](curve.png)" in report
    assert (out / "curve.png").read_bytes().startswith(PNG_MAGIC)
    suite = junit(out)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("5", "0", "0", "0")
    assert case_names(out) == ["bench run", *results_of(out)["gate"]["rules"]]
    csv = (out / "results.csv").read_text().splitlines()
    run = results_of(out)["run"]
    # Each row opens with the run's identity (so runs' CSVs concatenate), then concurrency, request_rate (empty:
    # closed loop), repeats, requests, ok.
    identity = [row.split(",")[:6] for row in csv[1:]]
    levels = [row.split(",", 7)[7] for row in csv[1:]]
    assert len(csv) == 3 and csv[0].startswith("run_id,model,profile,instance_type,instance_count,target,started_at,")
    assert identity == [[run["bench_run"], run["model"], run["profile"], run["instance_type"], "1", "local"]] * 2
    assert levels[0].startswith("1,,1,4,4,") and levels[1].startswith("4,,1,4,4,")


# --------------------------------------------------------------------------------------------- the gate

@pytest.fixture(scope="module")
def gated(happy: tuple[Ran, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    """A local bench with a failing rule, a baseline it regressed from, and a duration per level."""
    folder = tmp_path_factory.mktemp("gated")
    gates = write(folder, "gates.yaml", FAILING + "    baseline: {max_regression_pct: 10, "
                  "metrics: [latency_ms_per_token.p50]}\n")
    baseline = faster_baseline(happy[1] / "results.json", folder, 0.25)
    out = folder / "out"
    return sagellm(*bench_args(out, "--thresholds", str(gates), "--baseline", str(baseline),
                               "--duration-per-level", "1", requests=None)), out


@pytest.mark.integration
def test_failing_threshold_and_baseline_regression_exit_1_with_every_violation(gated: tuple[Ran, Path]) -> None:
    ran, out = gated

    assert ran.returncode == 1, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    gate = results_of(out)["gate"]
    assert gate["passed"] is False
    baseline_rule = "baseline latency_ms_per_token.p50 within 10%"
    assert {v["rule"] for v in gate["violations"]} == {FAILING_RULE, baseline_rule}
    assert sorted(failed_cases(out)) == sorted([FAILING_RULE, baseline_rule])
    assert junit(out).get("tests") == "4"  # the run and three rules
    report = (out / "report.md").read_text()
    assert report.startswith("**FAIL** — ")
    assert f"`{FAILING_RULE}`" in report and f"`{baseline_rule}`" in report
    assert ran.stdout.startswith("**FAIL** — ")  # the report is printed
    # ... and the violated rules are the last lines on stderr, as `sagellm gate` prints them (where CI shows it)
    tail = ran.stderr.strip().splitlines()[-len(gate["violations"]):]
    assert tail == [f"FAIL {v['rule']}: {v['message']}" for v in gate["violations"]], ran.stderr[-2000:]
    assert results_of(out)["teardown"]["status"] == "destroyed"
    assert_nothing_running(ran, out)


@pytest.mark.integration
def test_duration_per_level_is_in_simulated_seconds_like_the_results(gated: tuple[Ran, Path]) -> None:
    levels = results_of(gated[1])["levels"]

    assert levels and all(0.5 <= lv["window_s"] <= 2.0 for lv in levels), [lv["window_s"] for lv in levels]


@pytest.mark.slow
def test_malformed_thresholds_exit_2_before_deploying(tmp_path: Path) -> None:
    gates = write(tmp_path, "gates.yaml", """
        rules:
          - {metric: latency_ms_per_tokens.p90, where: 1, max: 80}
    """)
    out = tmp_path / "out"

    ran = sagellm(*bench_args(out, "--thresholds", str(gates)))

    assert ran.returncode == 2
    line = assert_one_line_error(ran)
    assert f"{gates}: rules[0].metric: 'latency_ms_per_tokens.p90' is not a known metric" in line
    assert not out.exists()  # nothing deployed: no out folder, no cdk folder in it
    assert ran.wall_s < 20


@pytest.mark.integration
def test_gate_command_reevaluates_a_finished_run_beside_it_leaving_the_run_as_it_was(
        finished: Path, tmp_path: Path) -> None:
    failing, passing = write(tmp_path, "fail.yaml", FAILING), write(tmp_path, "pass.yaml", PASSING)
    results = finished / "results.json"
    written = {name: (finished / name).read_bytes() for name in ("results.json", "report.md", "junit.xml",
                                                                 "curve.png", "results.csv")}

    ran = sagellm("gate", str(results), "--thresholds", str(failing))

    assert ran.returncode == 1, ran.stderr
    assert f"FAIL {FAILING_RULE}: latency_ms_per_token.p50@1: " in ran.stdout
    assert ran.stdout.strip().splitlines()[-1] == f"FAIL: 2 rule(s), 1 violation(s); written to {finished / 'gate'}/"
    verdict = finished / "gate"
    assert results_of(verdict)["gate"]["passed"] is False
    assert (verdict / "report.md").read_text().startswith("**FAIL** — 1 violation(s) of 2")
    assert failed_cases(verdict) == [FAILING_RULE]

    ran = sagellm("gate", str(results), "--thresholds", str(passing), "--json", "--out", str(tmp_path / "v"))

    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["passed"] is True
    assert results_of(tmp_path / "v")["gate"]["passed"] is True
    assert (tmp_path / "v" / "report.md").read_text().startswith("**PASS** — 4 threshold rule(s)")
    assert failed_cases(tmp_path / "v") == []
    assert {name: (finished / name).read_bytes() for name in written} == written


@pytest.mark.integration
def test_gate_baseline_regression_beyond_the_allowance_exits_1(finished: Path, tmp_path: Path) -> None:
    rules = write(tmp_path, "gates.yaml", BASELINE_LATENCY)
    results = finished / "results.json"
    same = tmp_path / "same.json"
    shutil.copy(results, same)
    regressed_from = faster_baseline(results, tmp_path, 0.5)

    unchanged = sagellm("gate", str(results), "--thresholds", str(rules), "--baseline", str(same))
    regressed = sagellm("gate", str(results), "--thresholds", str(rules), "--baseline", str(regressed_from))

    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert regressed.returncode == 1, regressed.stderr
    assert "FAIL baseline latency_ms_per_token.p50 within 10%: baseline latency_ms_per_token.p50@1: " \
           in regressed.stdout
    assert "(+100.0%; allowed 10%)" in regressed.stdout


@pytest.mark.integration
def test_gate_with_a_baseline_block_but_no_baseline_file_judges_the_rules_alone(
        finished: Path, tmp_path: Path) -> None:
    rules = write(tmp_path, "gates.yaml", BASELINE_LATENCY)

    ran = sagellm("gate", str(finished / "results.json"), "--thresholds", str(rules))

    assert "Traceback" not in ran.stderr
    assert ran.returncode == 0, ran.stderr[-2000:]


@pytest.mark.integration
def test_gate_command_rejects_malformed_thresholds_with_exit_2(finished: Path, tmp_path: Path) -> None:
    rules = write(tmp_path, "gates.yaml", "rules:\n  - {metric: error_rate, where: 1}\n")

    ran = sagellm("gate", str(finished / "results.json"), "--thresholds", str(rules))

    assert ran.returncode == 2
    assert f"{rules}: rules[0]: no limit (add min, max or both)" in assert_one_line_error(ran)
    assert not (finished / "gate").exists()


@pytest.mark.slow
def test_bench_refuses_an_incomparable_baseline_and_a_rule_outside_its_sweep_with_exit_2(tmp_path: Path) -> None:
    from results_helpers import write_run

    other_model = write_run(tmp_path / "old", model="mistralai/Mistral-7B-v0.1")
    gates = write(tmp_path, "gates.yaml", "rules:\n  - {metric: error_rate, where: 64, max: 0.01}\n")
    out = tmp_path / "out"

    incomparable = sagellm(*bench_args(out, "--baseline", str(other_model)))
    outside = sagellm(*bench_args(out, "--thresholds", str(gates)))

    assert (incomparable.returncode, outside.returncode) == (2, 2)
    assert (f"{other_model}: baseline not comparable with this run: model 'meta-llama/Llama-2-7b-hf' (baseline "
            "'mistralai/Mistral-7B-v0.1')") in assert_one_line_error(incomparable)
    assert "rules[0].where: 64 is not a level of the sweep (1, 4)" in assert_one_line_error(outside)
    assert not out.exists()


@pytest.mark.slow
def test_report_and_gate_without_results_json_exit_2_with_one_line(tmp_path: Path) -> None:
    rules = write(tmp_path, "gates.yaml", FAILING)

    report = sagellm("report", str(tmp_path))
    gate = sagellm("gate", str(tmp_path / "results.json"), "--thresholds", str(rules))

    for ran in (report, gate):
        assert ran.returncode == 2
        assert "results.json: file not found" in assert_one_line_error(ran)


# ---------------------------------------------------------------------------------------------- report

@pytest.mark.slow
def test_report_explains_a_results_file_of_an_older_schema_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text('{"schema_version": 1, "run": {}, "levels": []}')

    ran = sagellm("report", str(tmp_path))

    assert ran.returncode == 2
    assert assert_one_line_error(ran) == (f"sagellm: error: {tmp_path / 'results.json'}: schema_version 1 is "
                                          "written by an older sagellm, before per-request ITL, p95 and "
                                          "request-rate levels; this sagellm reads version 2 (re-run the bench "
                                          "to get one)")


@pytest.mark.integration
def test_report_rerenders_report_curve_junit_and_csv_from_results_json(finished: Path) -> None:
    written = {name: (finished / name).read_text() for name in ("report.md", "junit.xml", "results.csv")}
    for name in ("report.md", "curve.png", "junit.xml", "results.csv"):
        (finished / name).unlink()

    ran = sagellm("report", str(finished))

    assert ran.returncode == 0, ran.stderr
    assert {name: (finished / name).read_text() for name in written} == written
    assert (finished / "curve.png").read_bytes().startswith(PNG_MAGIC)
    assert "**PASS**" in ran.stdout


# ------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "no-such-profile"], "unknown profile 'no-such-profile'"),
    (["--target", "http"], "--url: required (e.g. http://localhost:8080 for TGI)"),
    (["--keep"], "--keep: the local AWS lives only as long as the bench"),
    (["--time-scale", "2"], "--time-scale: 2.0 must be in (0, 1]"),
    (["--request-rate", "1,2"], "--concurrency/--request-rate: give one, not both"),
    (["--arrivals", "poisson"], "--arrivals/--max-in-flight/--max-ttft-s: only with --request-rate"),
    (["--api", "openai"], "--api: 'openai' is an http server's API (SageMaker endpoints take tgi or chat)"),
    (["--input-tokens", "12-4"], "--input-tokens: '12-4' is an empty range: its minimum is above its maximum"),
    (["--shared-prefix", "300"], "--shared-prefix: 300 tokens leave no unique part in prompts as short as 256"),
    (["--dataset", "/no/such/prompts.jsonl"], "--dataset: /no/such/prompts.jsonl: cannot be read"),
    (["--endpoint-name", "prod-chat"], "--endpoint-name: only with --target sagemaker"),
])
@pytest.mark.slow
def test_bad_input_exits_2_with_one_line_and_deploys_nothing(
        tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "out"
    base = bench_args(out)
    if "--profile" in args:
        base[base.index("--profile") + 1] = args[1]
        args = []
    if "--time-scale" in args:
        base[base.index("--time-scale") + 1] = args[1]
        args = []
    if "http" in args:  # only the local emulator compresses time; keep the one error under test
        base = [a for a in base if a not in ("--time-scale", "0.05")]

    ran = sagellm(*base, *args)

    assert ran.returncode == 2
    assert message in assert_one_line_error(ran)
    assert not out.exists()


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """Bench arguments with one option's value replaced (or added)."""
    if flag in args:
        args = list(args)
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--concurrency", "1,,2", ("--concurrency: '1,,2' has an empty level between commas; give levels ≥ 1 separated "
                              "by commas, e.g. 1,2,4,8")),
    ("--requests-per-level", "0", "--requests-per-level: 0 must be at least 1"),
    ("--input-tokens", "0", ("--input-tokens: '0' allows lengths outside 1 to 4294967295 tokens (use 512 (fixed), "
                               "512:64 (mean:stddev) or 256-1024 (min-max))")),
    ("--concurency", "1,2", "--concurency: no such option; did you mean --concurrency? (see `sagellm bench --help`)"),
])
@pytest.mark.slow
def test_bad_flag_is_named_with_its_value_before_anything_is_written(
        tmp_path: Path, flag: str, value: str, message: str) -> None:
    out = tmp_path / "out"
    ran = sagellm(*with_flag(bench_args(out), flag, value))
    assert (ran.returncode, ran.stdout, assert_one_line_error(ran)) == (2, "", f"sagellm: error: {message}")
    assert not out.exists()


def test_the_flags_build_the_specs_with_every_problem_in_one_error_naming_its_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagellm import bench
    from sagellm.bench import runner
    from sagellm.cli.commands.bench import bench as bench_command
    from sagellm.errors import InputError

    class Built(Exception):
        """What `sagellm bench` would run, caught before it runs."""

    def built(spec: bench.Bench, *args: object) -> None:
        raise Built(spec)

    monkeypatch.setattr(runner, "run", built)
    with pytest.raises(Built) as caught:
        bench_command(target="sagemaker", endpoint_name="prod-chat", request_rate="1,2", ramp=False,
                      out=tmp_path / "out")
    spec = caught.value.args[0]
    assert spec.target == bench.Endpoint("prod-chat") and spec.load == bench.Open((1.0, 2.0))

    with pytest.raises(InputError) as bad:
        bench_command(profile="max-throughput", target="http", url="http://127.0.0.1:9", time_scale=0.5,
                      max_in_flight=0, request_rate="1", warmup=-1, max_ttft_s=0, out=tmp_path / "out")
    assert bad.value.messages == [
        "--time-scale: only the local emulator can compress time",
        "--profile/--model: give both to label and predict the run, or neither (no prediction)",
        "--max-in-flight: must be at least 1",
        "--warmup: -1 must be 0 or more",
        "--max-ttft-s: 0 must be a positive number of seconds"]


def test_spawn_rate_sets_a_closed_loops_start_and_is_refused_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagellm.bench import runner
    from sagellm.bench.load.closed_loop import SPAWN_RATE
    from sagellm.cli.commands.bench import bench as bench_command
    from sagellm.errors import InputError

    def built(spec: object, *args: object) -> None:
        raise LookupError(spec)  # what `sagellm bench` would run, caught before it runs

    monkeypatch.setattr(runner, "run", built)
    http = {"target": "http", "url": "http://127.0.0.1:9", "out": tmp_path / "out"}
    for flag, spec_value in ((None, SPAWN_RATE), (50.0, 50.0), (0.0, None)):  # 0: every worker at once
        with pytest.raises(LookupError) as caught:
            bench_command(concurrency="4", spawn_rate=flag, **http)
        assert caught.value.args[0].load.spawn_rate == spec_value
    with pytest.raises(InputError) as bad:
        bench_command(concurrency="4", spawn_rate=-1.0, **http)
    assert bad.value.messages == [("--spawn-rate: -1 must be a number of workers started a second, above 0 (or off: "
                                   "every worker at once)")]
    with pytest.raises(InputError) as bad:
        bench_command(request_rate="2", spawn_rate=10.0, **http)
    assert bad.value.messages == [
        "--spawn-rate: only with a closed loop (--concurrency); an open loop's arrivals keep their schedule"]


def test_what_the_plan_refuses_names_the_flag_too(tmp_path: Path) -> None:
    from sagellm.cli.commands.bench import bench as bench_command
    from sagellm.errors import InputError

    with pytest.raises(InputError) as bad:
        bench_command(profile="max-throughput", model=MODEL, instance=INSTANCE, target="sagemaker",
                      out=tmp_path / "out")
    assert bad.value.messages == [
        ("meta-llama/Llama-2-7b-hf is gated on the Hugging Face Hub and no hf_token_secret is set: the endpoint "
         "would never start; store a token that has access in Secrets Manager and pass --hf-token-secret=<secret "
         "name or ARN> (or hf_token_secret: in the profile)")]
    assert not (tmp_path / "out").exists()


def test_sweep_workers_mlflow_and_workload_fields_are_named_by_their_flags(tmp_path: Path) -> None:
    from sagellm.cli.commands.bench import bench as bench_command
    from sagellm.cli.options import as_flags as _as_flags
    from sagellm.errors import InputError

    with pytest.raises(InputError) as bad:
        bench_command(profile="max-throughput", model=MODEL, sweep="fast", budget_minutes=0.0, mlflow="localhost:5000",
                      out=tmp_path / "out")
    assert bad.value.messages[:2] == ["--sweep: 'fast' must be adaptive or doubling",
                                      "--budget-minutes: 0 must be a positive number of endpoint-minutes"]
    assert bad.value.messages[2].startswith("--mlflow: ")
    with pytest.raises(InputError) as bad:
        bench_command(target="http", url="http://127.0.0.1:9", sweep="adaptive", out=tmp_path / "out")
    assert bad.value.messages == [
        "--sweep adaptive: needs a prediction to start from: give --profile and --model (or --sweep doubling)"]
    with pytest.raises(InputError) as bad:
        bench_command(profile="max-throughput", model=MODEL, input_tokens="64", shared_prefix=64,
                      out=tmp_path / "out")
    assert bad.value.messages == [
        "--shared-prefix: 64 tokens leave no unique part in prompts as short as 64 tokens (--input-tokens 64)"]
    assert _as_flags(["Workers.ray auto: Ray is not installed (pip install 'sagellm[ray]')"]) == [
        "--ray auto: Ray is not installed (pip install 'sagellm[ray]')"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_out_folder_that_cannot_be_written_is_refused_up_front(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file where the results folder would go\n")
    ran = sagellm(*bench_args(blocker / "run-1"))
    assert (ran.returncode, ran.stdout) == (2, "")
    assert assert_one_line_error(ran) == (f"sagellm: error: --out: {blocker} (in {blocker / 'run-1'}) is a file, "
                                          "not a folder; choose a folder to write the results in")
    assert blocker.read_text() == "a file where the results folder would go\n"


@pytest.mark.slow
def test_http_target_at_a_closed_port_fails_in_one_line_with_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    out, port = tmp_path / "out", free_port()
    url = f"http://127.0.0.1:{port}"
    ran = sagellm("bench", "--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE,
                  "--target", "http", "--url", url, "--out", str(out))
    assert (ran.returncode, ran.stdout) == (3, "")
    assert assert_one_line_error(ran) == (f"sagellm: error: --url: {url}: nothing answers at 127.0.0.1:{port} "
                                          "(Connection refused); start the server or fix the URL")
    assert not out.exists()


@pytest.mark.integration
def test_a_hung_endpoint_is_told_in_one_line_within_70_s_of_the_first_request(tmp_path: Path) -> None:
    # The real numbers: SageMaker's 60 s invocation limit on the first requests, then stop (not the warm-up's
    # timeouts, the measured ones' and a metrics flush: 115-190 s before).
    out = tmp_path / "out"
    with hung_server() as url:
        ran = sagellm("bench", "--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE,
                      "--target", "http", "--url", url, "--api", "tgi", "--concurrency", "1,4", "--warmup", "1",
                      "--out", str(out), timeout=100)

    assert ran.returncode == 3
    error = ran.stderr.strip().splitlines()[-1]
    assert error == ("sagellm: error: the endpoint answered none of the first requests: no first byte within "
                     "the invocation limit (60 s) (is it hung? its logs say why)")
    [record] = request_lines(out)
    assert record["warmup"] and record["error_kind"] == "timeout" and record["e2e_s"] >= 60
    run = results_of(out)["run"]  # started before the first request was sent, ended when the run stopped
    stopped_s = (datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])).total_seconds()
    assert stopped_s < 70, f"stopped {stopped_s:.0f} s after the run started"


# ------------------------------------------------------------------------------ interrupted mid-sweep

def interrupt(tmp_path: Path, sig: int, ready: str, *, concurrency: str, again: bool = False,
              sigint_ignored: bool = False, env: dict[str, str] | None = None) -> tuple[Ran, Path]:
    """Start a long local bench, wait until `ready` ('record' or 'level') shows in requests.jsonl, signal it;
    optionally once more right after (it must be held: teardown is not interruptible). With `sigint_ignored`
    the bench starts with SIGINT ignored, as `cmd &` in a script and many CI runners start jobs."""
    out = tmp_path / "out"
    started = time.monotonic()
    # `trap "" INT` then exec: the bench inherits an ignored SIGINT, exactly as a background job does.
    # Otherwise the bench starts as from a terminal, whatever this test run inherited.
    shell = ["sh", "-c", 'trap "" INT; exec "$0" "$@"'] if sigint_ignored else AS_FROM_A_TERMINAL
    proc = subprocess.Popen([*shell, SAGELLM, *bench_args(out, concurrency=concurrency, requests="30")],
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=tmp_path, env=env)

    def reached() -> bool:
        records = request_lines(out)
        if ready == "record":
            return bool(records)
        return any(r["concurrency"] != records[0]["concurrency"] for r in records)

    try:
        wait_for(lambda: proc.poll() is not None or reached(), 300, f"the bench's first {ready}")
        assert proc.poll() is None, "the bench ended before it could be interrupted"
        proc.send_signal(sig)
        if again:
            time.sleep(0.2)
            assert proc.poll() is None, "the bench ended before it could be interrupted again"
            proc.send_signal(sig)
    finally:
        ran = finish(proc, started, timeout=180)
    return ran, out


@pytest.mark.integration
def test_ctrl_c_mid_sweep_tears_down_despite_a_second_ctrl_c_keeps_finished_levels_and_exits_130(tmp_path: Path) -> None:
    ran, out = interrupt(tmp_path, signal.SIGINT, "level", concurrency="1,2,4", again=True)

    assert ran.returncode == 130, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert "tearing down — please wait" in ran.stderr  # the second Ctrl-C was held off, not obeyed
    results = results_of(out)
    assert results["teardown"]["status"] == "destroyed"
    assert [lv["concurrency"] for lv in results["levels"]] == [1]  # level 1 finished, level 2 was cut
    assert results["levels"][0]["requests"] == 30
    assert results["stopped_reason"] == "interrupted after 1 level(s)"
    assert "sweep stopped: interrupted" in (out / "report.md").read_text().splitlines()[0]
    assert len(request_lines(out)) > 30  # level 2's finished requests were logged too
    assert_nothing_running(ran, out)


@pytest.mark.integration
def test_sigterm_mid_sweep_tears_down_and_exits_130_even_when_sigint_is_ignored(tmp_path: Path) -> None:
    ran, out = interrupt(tmp_path, signal.SIGTERM, "record", concurrency="1", sigint_ignored=True)

    assert ran.returncode == 130, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines()[-1] == "sagellm: error: interrupted: stopped measuring, tore down"
    results = results_of(out)
    assert results["teardown"]["status"] == "destroyed"
    assert results["levels"] == []
    assert results["stopped_reason"] == "interrupted after 0 level(s)"
    assert (out / "curve.png").read_bytes().startswith(PNG_MAGIC)
    assert_nothing_running(ran, out)


@pytest.mark.integration
def test_a_hang_up_mid_sweep_tears_down_writes_results_and_exits_130(tmp_path: Path) -> None:
    # A closed terminal or a dropped SSH session: SIGHUP to a bench started as from a terminal.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ran, out = interrupt(tmp_path, signal.SIGHUP, "record", concurrency="1", env={**os.environ, "TMPDIR": str(scratch)})

    assert ran.returncode == 130, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines()[-1] == "sagellm: error: interrupted: stopped measuring, tore down"
    results = results_of(out)
    assert results["teardown"]["status"] == "destroyed"  # the stack was deleted before the local AWS stopped
    assert results["stopped_reason"] == "interrupted after 0 level(s)"
    assert results["failure"]["exit_status"] == 130
    assert_nothing_running(ran, out)
    assert list(scratch.iterdir()) == []  # the run's temporary files went with it


@pytest.mark.integration
def test_when_its_terminal_hangs_up_the_bench_still_tears_down_and_writes_results(tmp_path: Path) -> None:
    # A real hang-up: the terminal the bench writes to goes away (writing to it fails from then on, EIO), and
    # the bench gets SIGHUP, as the kernel sends it to a terminal's session.
    out = tmp_path / "out"
    master, terminal = pty.openpty()
    proc = subprocess.Popen([*AS_FROM_A_TERMINAL, SAGELLM, *bench_args(out, concurrency="1", requests="30")],
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, cwd=tmp_path)
    os.close(terminal)
    stop_reading = threading.Event()

    def read_the_terminal() -> None:  # as a terminal does; a full one would block the bench's writes
        while not stop_reading.is_set():
            if select.select([master], [], [], 0.1)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    return

    reader = threading.Thread(target=read_the_terminal, daemon=True)
    reader.start()
    try:
        wait_for(lambda: proc.poll() is not None or bool(request_lines(out)), 300, "the bench's first record")
        assert proc.poll() is None, "the bench ended before its terminal hung up"
    finally:
        stop_reading.set()
        reader.join()
        os.close(master)  # the terminal hangs up
        if proc.poll() is None:
            proc.send_signal(signal.SIGHUP)
        try:
            proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert proc.returncode == 130
    results = results_of(out)
    assert results["teardown"]["status"] == "destroyed"
    assert results["stopped_reason"] == "interrupted after 0 level(s)"
    assert emulator_children_of(proc.pid) == [] and processes_mentioning(str(out)) == []


@pytest.mark.integration
def test_sigterm_while_deploying_stops_the_cdk_cli_and_tears_down(tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    proc = spawn(*bench_args(out))
    try:
        # The deploy log is opened as `cdk deploy` starts (after `cdk bootstrap`).
        wait_for(lambda: (out / "cdk" / "cdk-deploy.log").exists() or proc.poll() is not None, 180,
                 "the bench to start deploying")
        wait_for(lambda: bool(processes_mentioning(str(out / "cdk"))) or proc.poll() is not None, 10,
                 "the CDK CLI to start")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
    finally:
        ran = finish(proc, started, timeout=180)

    assert ran.returncode == 130, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    results = results_of(out)
    # Stopped before CloudFormation got the stack (synthesis) or after: either way nothing is left, and
    # teardown says which, never "destroyed" for a stack that never existed.
    teardown = results["teardown"]
    assert teardown["status"] == "destroyed" or (teardown["status"] == "not-applicable"
                                                 and "does not exist" in teardown["detail"]), teardown
    assert results["levels"] == []
    assert request_lines(out) == []
    assert_nothing_running(ran, out)


# ---------------------------------------------------------------------------------------- http target

@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=Payload(256, 32))
    with EmulatorProcess(plan, clock=Clock(0.05)) as emu:
        yield emu


@pytest.mark.integration
@pytest.mark.parametrize(("suffix", "api"), [("", "auto"), ("/v1", "openai")])
def test_http_target_benches_an_existing_server_without_deploying(
        emulator: EmulatorProcess, tmp_path: Path, suffix: str, api: str) -> None:
    out = tmp_path / "out"
    args = [a for a in bench_args(out) if a not in ("--time-scale", "0.05")]  # real time for a real server

    ran = sagellm(*args, "--target", "http", "--url", emulator.url + suffix, "--api", api)

    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(out)
    assert (results["run"]["target"], results["run"]["endpoint"]) == ("http", emulator.url + suffix)
    assert results["run"]["emulated"] is True  # the server says so on /info: results are labelled emulated
    assert results["teardown"]["status"] == "not-applicable"
    assert [lv["concurrency"] for lv in results["levels"]] == [1, 4]
    records = request_lines(out)
    assert len(records) == 8 and all(r["ok"] and r["output_tokens"] == 32 for r in records)
    assert not (out / "cdk").exists()
    assert results["run"]["time_scale"] == 0.05  # the emulator's, read from it: timings in simulated time


@pytest.mark.integration
def test_an_http_bench_of_a_compressed_emulator_matches_the_prediction_in_simulated_time(tmp_path: Path) -> None:
    # The emulator runs 10× faster than real time; the bench reads its time scale (it is no local target)
    # and converts what it measures into simulated time, as on the local target.
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=Payload(256, 32))
    out = tmp_path / "out"
    with EmulatorProcess(plan, clock=Clock(0.1)) as emu:
        args = [a for a in bench_args(out, concurrency="1", requests="8", warmup="1") if a not in ("--time-scale", "0.05")]
        ran = sagellm(*args, "--target", "http", "--url", emu.url + "/v1", "--api", "openai")
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = results_of(out)
    assert (results["run"]["emulated"], results["run"]["time_scale"]) == (True, 0.1)
    [level] = results["levels"]
    measured, predicted = level["throughput_tokens_per_s"], level["predicted"]["throughput_tokens_per_s"]
    assert measured == pytest.approx(predicted, rel=0.05), (measured, predicted)
    assert level["ttft_ms"]["p50"] == pytest.approx(level["predicted"]["ttft_ms"], rel=0.25)
    assert "(emulated, time scale 0.1)" in (out / "report.md").read_text()


@pytest.mark.integration
def test_http_target_without_an_instance_is_measured_not_predicted_and_says_so_once(
        emulator: EmulatorProcess, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = bench_args(out)
    args = [a for i, a in enumerate(args) if a not in ("--time-scale", "0.05", "--instance")
            and args[i - 1] != "--instance"]

    ran = sagellm(*args, "--target", "http", "--url", emulator.url)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stderr.count("no prediction without --instance") == 1, ran.stderr
    results = results_of(out)
    assert results["levels"] and all(lv["predicted"] is None for lv in results["levels"])
    assert results["predicted_curve"] == []


# ---------------------------------------------------------------------------------------------- cleanup

@pytest.mark.integration
def test_cleanup_shows_asks_and_deletes_only_bench_run_stacks(tmp_path: Path) -> None:
    profile_tags = [{"Key": "sagellm:profile", "Value": "max-throughput"}]
    template = json.dumps({"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}})
    with LocalAws() as aws:
        cfn = aws.client("cloudformation")
        cfn.create_stack(StackName="sagellm-bench-crashed", TemplateBody=template,
                         Tags=[*profile_tags, {"Key": "sagellm:bench-run", "Value": "r1"}])
        cfn.create_stack(StackName="sagellm-max-throughput-llama-2-7b-hf", TemplateBody=template, Tags=profile_tags)
        cfn.create_stack(StackName="someone-elses", TemplateBody=template)

        def stacks() -> list[str]:
            return sorted(s["StackName"] for s in cfn.describe_stacks()["Stacks"]
                          if s["StackStatus"] != "DELETE_COMPLETE")

        young = sagellm("cleanup", env=aws.env(), cwd=tmp_path)  # the default age limit spares a new stack
        assert young.returncode == 0, young.stderr
        kept, nothing = young.stdout.splitlines()
        assert kept.startswith("keep    stack sagellm-bench-crashed (run r1, created ")
        assert kept.endswith("younger than the age limit (--older-than)")
        assert nothing == "no bench stacks older than 1h to delete in us-east-1"

        listed = sagellm("cleanup", "--older-than", "0s", "--dry-run", env=aws.env(), cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        [line] = listed.stdout.splitlines()
        assert line.startswith("delete  stack sagellm-bench-crashed (run r1, created ")

        unasked = sagellm("cleanup", "--older-than", "0s", env=aws.env(), cwd=tmp_path)  # no terminal to ask
        assert unasked.returncode == 2
        assert "sagellm: error: --yes: 1 stack(s) to delete and no terminal to ask" in unasked.stderr
        assert len(stacks()) == 3

        deleted = sagellm("cleanup", "--older-than", "0s", "--yes", env=aws.env(), cwd=tmp_path)
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.splitlines()[-1] == "deleted 1 stack(s)"
        assert stacks() == ["sagellm-max-throughput-llama-2-7b-hf", "someone-elses"]


# ---------------------------------------------------------------------------------------------- emulate

@pytest.mark.integration
def test_emulate_serves_ping_and_info_and_stops_on_ctrl_c() -> None:
    port = free_port()
    started = time.monotonic()
    proc = spawn("emulate", "--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE,
                 "--port", str(port), "--time-scale", "0.05")
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/ping", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return proc.poll() is not None

    try:
        wait_for(answers, 30, "the emulator to answer /ping")
        assert proc.poll() is None
        with urllib.request.urlopen(f"{url}/info", timeout=5) as resp:
            info: dict[str, Any] = json.loads(resp.read())
        proc.send_signal(signal.SIGINT)
    finally:
        ran = finish(proc, started, timeout=15)

    assert info["emulated"] is True
    assert info["model_id"] == MODEL
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    assert port_is_free("127.0.0.1", port)


@pytest.mark.integration
def test_a_local_bench_with_per_request_slos_records_attainment_and_goodput_and_gates_on_them(
        tmp_path: Path) -> None:
    # Every request of the emulator meets a 100 s TTFT, so attainment is 1 and goodput is the whole throughput;
    # no goodput is under 0.001 tokens/s, so that rule fails, and it alone.
    gates = write(tmp_path, "gates.yaml", """
        slo: {ttft_ms: 100000, e2e_ms: 1000000}
        rules:
          - {metric: slo_attainment, where: 1, min: 1}
          - {metric: goodput.tokens_per_s, where: 4, max: 0.001}
    """)
    out = tmp_path / "out"

    ran = sagellm(*bench_args(out, "--thresholds", str(gates)))

    assert ran.returncode == 1, ran.stderr
    data = results_of(out)
    assert data["run"]["request_slo"] == {"ttft_ms": 100000, "itl_ms": None, "tpot_ms": None, "e2e_ms": 1000000}
    assert [v["rule"] for v in data["gate"]["violations"]] == ["goodput.tokens_per_s@4 <= 0.001"]
    for lv in data["levels"]:
        assert lv["slo_attainment"] == 1.0
        assert lv["goodput"]["tokens_per_s"] == pytest.approx(lv["throughput_tokens_per_s"])
        assert lv["predicted"]["slo_attainment"] == 1.0
    assert "| goodput tokens/s | SLO attainment |" in (out / "report.md").read_text()
    assert "goodput.tokens_per_s" in (out / "results.csv").read_text().splitlines()[0].split(",")

    other = write(tmp_path, "other.yaml", "slo: {ttft_ms: 1}\nrules: [{metric: slo_attainment, where: 1, min: 1}]\n")
    ran = sagellm("gate", str(out / "results.json"), "--thresholds", str(other))
    assert ran.returncode == 2
    assert "slo_attainment was taken against the run's own per-request SLOs" in assert_one_line_error(ran)

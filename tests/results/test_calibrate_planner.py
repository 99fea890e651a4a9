"""`sagellm calibrate`: fit from results.json files, store next to the profiles, used by plan and profiles show.

The "measured" runs stand in for a real endpoint that differs from the prediction: the planner's own curve
with known multipliers applied, written as a sagemaker-target results.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from sagellm.engines.tgi import TGI
from sagellm.errors import InputError
from sagellm.planner import Calibration, Payload, predict_point
from sagellm.profiles import design_for
from sagellm.profiles.calibration import calibration_path, load_calibration
from sagellm.results.calibrate_planner import calibrate_runs
from sagellm.results.picks import make_results
from sagellm.results.schema import ERROR_KINDS, Level, Run, Stats, Teardown, write_results

SAGELLM = Path(sys.executable).with_name("sagellm")
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"
INSTANCE = "ml.g5.12xlarge"
TRUE = Calibration(decode_floor=1.3, decode_per_sequence=0.7, prefill=1.6)  # what the "endpoint" really does
LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)


def measured_run(folder: Path, payload: Payload, *, truth: Calibration = TRUE, emulated: bool = False,
                 levels: tuple[int, ...] = LEVELS, error_rate: float = 0.0) -> Path:
    """A bench --out folder whose results.json is what an endpoint behaving like `truth` measures."""
    d = design_for("max-throughput", LLAMA2_7B, INSTANCE, payload=payload, profiles_dir=empty(folder.parent))
    env = d.environment
    true_shape = replace(d.shape(), calibration=truth)
    rows = []
    for c in levels:
        p = predict_point(true_shape, payload, c)
        errors = dict.fromkeys(ERROR_KINDS, 0) | {"other": int(error_rate * 100)}
        rows.append(Level(
            concurrency=c, requests=100, ok=100 - errors["other"], errors=errors, error_rate=error_rate, retries=0,
            window_s=60, output_tokens=p.throughput_tokens_per_s * 60,
            throughput_tokens_per_s=p.throughput_tokens_per_s, requests_per_s=p.requests_per_s,
            latency_ms_per_token=Stats(p50=p.ms_per_token), ttft_ms=Stats(p50=p.ttft_ms),
            itl_ms=Stats(p50=p.itl_ms), e2e_s=Stats(p50=p.e2e_s)))
    run = Run(profile="max-throughput", model=LLAMA2_7B, instance_type=INSTANCE, instance_count=1,
              target="http" if emulated else "sagemaker", emulated=emulated, region="us-east-1", environment=env,
              input_tokens=payload.input_tokens, output_tokens=payload.output_tokens, concurrency=list(levels),
              tool_version="0.1.0", started_at=datetime(2025, 3, 4, tzinfo=UTC), command="sagellm bench")
    folder.mkdir(parents=True, exist_ok=True)
    write_results(folder / "results.json",
                  make_results(run, rows, usd_per_h=7.09, teardown=Teardown(status="destroyed")))
    return folder


def empty(parent: Path) -> Path:
    """An empty profiles folder: the standard profiles only, no calibration."""
    (parent / "empty").mkdir(parents=True, exist_ok=True)
    return parent / "empty"


def profiles_in(tmp_path: Path) -> Path:
    """The team's profiles folder the calibration goes to."""
    (tmp_path / "profiles").mkdir(exist_ok=True)
    return tmp_path / "profiles"


def sagellm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def assert_one_line_bad_input(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sagellm: error: "), result.stderr
    return lines[0]


# ---------------------------------------------------------------- fit and store

def test_recovers_the_multipliers_of_an_endpoint_that_differs_from_the_prediction(tmp_path: Path) -> None:
    runs = [measured_run(tmp_path / "a", Payload(256, 256)), measured_run(tmp_path / "b", Payload(1024, 128))]
    lines = calibrate_runs(runs, profiles_in(tmp_path))
    assert len(lines) == 1 and lines[0].startswith("wrote ")
    cal = load_calibration(tmp_path / "profiles", LLAMA2_7B, INSTANCE, "tgi", TGI.pinned)
    assert cal is not None
    # Exact data: only the pull toward 1 keeps the fit off the truth; it covers most of the way.
    for name in ("decode_floor", "decode_per_sequence", "prefill"):
        fitted, true = getattr(cal, name), getattr(TRUE, name)
        assert abs(fitted - true) <= 0.5 * abs(true - 1), name
        assert abs(fitted - 1) <= abs(true - 1) + 0.01, name


def test_stores_a_reviewable_yaml_per_model_instance_and_container_next_to_the_profiles(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "run-1", Payload(256, 256))
    calibrate_runs([run], profiles_in(tmp_path))
    path = calibration_path(tmp_path / "profiles", LLAMA2_7B, INSTANCE, "tgi", TGI.pinned)
    assert path.parent == tmp_path / "profiles" / "calibration"
    assert path.name == "meta-llama--Llama-2-7b-hf__ml.g5.12xlarge__tgi-3.3.6.yaml"
    text = path.read_text()
    assert text.startswith("# sagellm calibrate")
    data = yaml.safe_load(text)
    assert (data["model"], data["instance_type"], data["container"], data["generation"]) == \
        (LLAMA2_7B, INSTANCE, "tgi", "tgi-3")
    assert data["runs"] == [{"results": str(run / "results.json"), "started_at": "2025-03-04T00:00:00+00:00",
                             "target": "sagemaker", "levels": len(LEVELS)}]
    for metric in ("ms_per_token", "ttft_ms", "throughput"):
        assert data["error_pct_after"][metric] < data["error_pct_before"][metric] / 3


def test_a_calibration_from_one_run_improves_the_prediction_of_another(tmp_path: Path) -> None:
    calibrate_runs([measured_run(tmp_path / "a", Payload(256, 256))], profiles_in(tmp_path))
    cal = load_calibration(tmp_path / "profiles", LLAMA2_7B, INSTANCE, "tgi", TGI.pinned)
    other = Payload(1024, 128)
    d = design_for("max-throughput", LLAMA2_7B, INSTANCE, payload=other, profiles_dir=empty(tmp_path))
    truth, plain = replace(d.shape(), calibration=TRUE), replace(d.shape(), calibration=None)

    def error(calibration: Calibration | None) -> float:
        shape = replace(plain, calibration=calibration)
        return sum(abs(predict_point(shape, other, c).ms_per_token / predict_point(truth, other, c).ms_per_token - 1)
                   for c in LEVELS) / len(LEVELS)

    assert error(cal) < error(None) / 3


def test_skips_levels_with_too_many_errors_and_refuses_a_run_without_usable_ones(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "bad", Payload(256, 256), error_rate=0.5)
    with pytest.raises(InputError, match="no level with a measured"):
        calibrate_runs([run], profiles_in(tmp_path))


def test_one_usable_level_is_not_enough_to_fit_and_no_file_is_written(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "one", Payload(256, 256), levels=(4,))
    with pytest.raises(InputError, match="1 closed-loop level.*a fit needs at least 2"):
        calibrate_runs([run], profiles_in(tmp_path))
    assert not (tmp_path / "profiles" / "calibration").exists()


# ---------------------------------------------------------------- used by plan and profiles show

@pytest.mark.slow
def test_plan_and_profiles_show_use_the_calibration_and_say_so(tmp_path: Path) -> None:
    profiles = profiles_in(tmp_path)
    flags = ("--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", INSTANCE)
    before = json.loads(sagellm("plan", *flags, "--concurrency", "1", "--json", cwd=tmp_path).stdout)
    assert before["curve"]["step_times"]["calibration"] is None
    assert before["curve"]["step_times"]["extrapolated"] is True  # TGI 3 on TGI 1.x constants

    ran = sagellm("calibrate", str(measured_run(tmp_path / "run", Payload(256, 256))), "--profiles-dir",
                  str(profiles), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("wrote ") and "decode floor ×1.2" in ran.stdout and "→" in ran.stdout

    after = json.loads(sagellm("plan", *flags, "--concurrency", "1", "--json", "--profiles-dir", str(profiles),
                               cwd=tmp_path).stdout)
    step_times = after["curve"]["step_times"]
    assert step_times["calibration"]["decode_floor"] == pytest.approx(1.3, rel=0.08)
    # The prediction moved with it: a slower decode floor and prefill → a slower single request.
    assert after["curve"]["points"][0]["ms_per_token"] > 1.2 * before["curve"]["points"][0]["ms_per_token"]

    text = sagellm("plan", *flags, "--profiles-dir", str(profiles), cwd=tmp_path).stdout
    assert "calibrated from measured runs: decode floor ×1.2" in text
    assert "step times calibrated for TGI 1.x" in text and "extrapolation" in text
    shown = sagellm("profiles", "show", "max-throughput", "--model", LLAMA2_7B, "--instance", INSTANCE,
                    "--profiles-dir", str(profiles), cwd=tmp_path).stdout
    assert "note: calibrated from measured runs: decode floor ×1.2" in shown


# ---------------------------------------------------------------- bad input: exit 2, one line

@pytest.mark.slow
def test_a_missing_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    line = assert_one_line_bad_input(sagellm("calibrate", "nowhere", cwd=tmp_path))
    assert "nowhere/results.json: file not found" in line or "nowhere: file not found" in line


@pytest.mark.slow
def test_an_emulated_run_is_refused(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "emu", Payload(256, 256), emulated=True)
    line = assert_one_line_bad_input(sagellm("calibrate", str(run), cwd=tmp_path))
    assert "run.emulated is true" in line and "--target sagemaker or http" in line


@pytest.mark.slow
def test_a_results_file_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{not json")
    line = assert_one_line_bad_input(sagellm("calibrate", str(tmp_path / "results.json"), cwd=tmp_path))
    assert "results.json: line 1: not valid JSON" in line


@pytest.mark.slow
def test_a_run_of_an_unknown_profile_names_the_file_and_the_profile(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "r", Payload(256, 256))
    data = json.loads((run / "results.json").read_text())
    data["run"]["profile"] = "team-special"
    (run / "results.json").write_text(json.dumps(data))
    line = assert_one_line_bad_input(sagellm("calibrate", str(run), cwd=tmp_path))
    assert line.startswith(f"sagellm: error: {run / 'results.json'}: ") and "team-special" in line


@pytest.mark.slow
def test_a_run_that_names_no_profile_is_refused(tmp_path: Path) -> None:
    run = measured_run(tmp_path / "r", Payload(256, 256))
    data = json.loads((run / "results.json").read_text())
    data["run"]["profile"] = None  # an http run against a server sagellm did not deploy
    (run / "results.json").write_text(json.dumps(data))
    line = assert_one_line_bad_input(sagellm("calibrate", str(run), cwd=tmp_path))
    assert "run.profile" in line


@pytest.mark.slow
def test_calibrate_without_runs_is_a_usage_error(tmp_path: Path) -> None:
    result = sagellm("calibrate", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_damaged_calibration_file_makes_plan_exit_2_naming_file_and_field(tmp_path: Path) -> None:
    profiles = profiles_in(tmp_path)
    calibrate_runs([measured_run(tmp_path / "run", Payload(256, 256))], profiles)
    path = calibration_path(profiles, LLAMA2_7B, INSTANCE, "tgi", TGI.pinned)
    path.write_text(path.read_text().replace("decode_floor: ", "decode_floor: -"))
    line = assert_one_line_bad_input(sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B,
                                             "--instance", INSTANCE, "--profiles-dir", str(profiles), cwd=tmp_path))
    assert f"{path}: decode_floor: " in line and "sagellm calibrate" in line

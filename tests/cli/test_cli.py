"""The `sagellm` command as a pipeline sees it: stdout, one-line errors on stderr, exit codes, start-up cost."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.planner import DEFAULT_CONCURRENCY, Shape
from sagellm.profiles import resolve
from sagellm.profiles.schema import Profile

REPO = Path(__file__).resolve().parents[2]
SAGELLM = Path(sys.executable).with_name("sagellm")
STANDARD = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale", "scale-to-zero")
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"
POINT_KEYS = {"concurrency", "ms_per_token", "ttft_ms", "itl_ms", "e2e_s", "throughput_tokens_per_s",
              "requests_per_s", "within_timeout", "rejected"}
CURVE_KEYS = {"points", "knee", "max_throughput", "kv_capacity_tokens_per_copy", "max_sequences_per_copy",
              "usd_per_h", "usd_per_1m_tokens_at_max_throughput"}


def sagellm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # cwd: a scratch folder, so the repository's ./profiles examples do not join the standard ones.
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def assert_bad_input(result: subprocess.CompletedProcess[str], lines: int | None = None) -> list[str]:
    """Exit 2, nothing on stdout, `sagellm: error:` lines on stderr and no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = result.stderr.splitlines()
    assert errors and all(line.startswith("sagellm: error: ") for line in errors), result.stderr
    if lines is not None:
        assert len(errors) == lines, result.stderr
    return errors


# ---------------------------------------------------------------- profiles

@pytest.mark.slow
def test_profiles_list_shows_the_five_standard_profiles(tmp_path: Path) -> None:
    result = sagellm("profiles", "list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines() if line and not line[0].isspace()]
    assert names == list(STANDARD)


@pytest.mark.slow
def test_profiles_list_json_includes_team_profiles_and_what_they_extend(tmp_path: Path) -> None:
    write(tmp_path, "team.yaml", "name: team\nextends: max-throughput\ndescription: ours\n")
    result = sagellm("profiles", "list", "--profiles-dir", str(tmp_path), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {*STANDARD, "team"}
    assert rows["team"] == {"name": "team", "file": str(tmp_path / "team.yaml"), "extends": "max-throughput",
                            "description": "ours"}


@pytest.mark.slow
def test_profiles_show_json_is_the_resolved_plan(tmp_path: Path) -> None:
    result = sagellm("profiles", "show", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.12xlarge",
                     "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    expected = json.loads(resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge").model_dump_json())
    assert shown == expected
    assert shown["models"][0]["environment"]["SM_NUM_GPUS"] == "4"


@pytest.mark.slow
def test_profiles_show_passes_payload_and_region(tmp_path: Path) -> None:
    result = sagellm("profiles", "show", "min-latency", "--model", "llama2-7b", "--instance", "g5.2xlarge",
                     "--input-tokens", "1024", "--output-tokens", "128", "--region", "eu-west-1", "--json",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    env = shown["models"][0]["environment"]
    # The payload is the workload (recorded, sizing admission); the caps stay the model's context.
    assert (shown["input_tokens"], shown["output_tokens"]) == (1024, 128)
    assert (env["MAX_INPUT_TOKENS"], env["MAX_TOTAL_TOKENS"]) == ("3968", "4096")
    assert shown["region"] == "eu-west-1" and ".dkr.ecr.eu-west-1." in shown["models"][0]["image_uri"]
    assert shown["instance_type"] == "ml.g5.2xlarge"


@pytest.mark.slow
def test_profiles_show_prints_the_environment_for_people(tmp_path: Path) -> None:
    result = sagellm("profiles", "show", "replicas", "--model", LLAMA2_7B, "--instance", "ml.p4d.24xlarge",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for text in ("replicas", "ml.p4d.24xlarge", "inference-component", "SM_NUM_GPUS=", "MAX_CONCURRENT_REQUESTS=",
                 "copies"):
        assert text in result.stdout, text


@pytest.mark.slow
def test_profiles_show_of_a_model_that_does_not_fit_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = sagellm("profiles", "show", "max-throughput", "--model", "meta-llama/Llama-2-70b-hf", "--instance",
                     "ml.g5.2xlarge", cwd=tmp_path)
    [line] = assert_bad_input(result, lines=1)
    assert line.startswith("sagellm: error: instance: meta-llama/Llama-2-70b-hf needs ")
    assert "GB missing; would fit: " in line
    assert result.stdout == ""


@pytest.mark.slow
def test_profiles_validate_bad_file_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", """
        name: bad
        extends: min-latency
        instance: ml.g5.2xlarge
        serving:
          quantization: int3
          environment:
            HF_TOKEN: hf_abc
        """)
    result = sagellm("profiles", "validate", str(path), cwd=tmp_path)
    errors = assert_bad_input(result, lines=3)
    assert sorted(errors) == sorted([
        f"sagellm: error: {path}:3: instance: unknown key (did you mean instance_type?)",
        (f"sagellm: error: {path}:5: serving.quantization: 'int3': Input should be 'none', 'gptq', 'awq', "
         "'bitsandbytes', 'eetq' or 'fp8'"),
        (f"sagellm: error: {path}:7: serving.environment.HF_TOKEN: a token variable never goes in a container "
         "environment: store it in Secrets Manager and set hf_token_secret: <secret name or ARN>"),
    ])


@pytest.mark.slow
def test_profiles_validate_reports_every_bad_file_together(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", "name: a\nextends: nowhere\n")
    b = write(tmp_path, "b.yaml", "name: b\ncolour: blue\n")
    result = sagellm("profiles", "validate", str(a), str(b), cwd=tmp_path)
    errors = assert_bad_input(result, lines=2)
    assert errors[0].startswith(f"sagellm: error: {a}:2: extends: unknown profile 'nowhere': known: ")
    assert errors[1] == f"sagellm: error: {b}:2: colour: unknown key (remove it or check its spelling)"


@pytest.mark.slow
def test_profiles_validate_good_file_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path, "good.yaml", "name: good\nextends: max-throughput\ninstance_type: ml.g5.12xlarge\n")
    result = sagellm("profiles", "validate", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 profile(s) valid: good"


@pytest.mark.slow
def test_profiles_validate_missing_file_exits_2(tmp_path: Path) -> None:
    result = sagellm("profiles", "validate", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert assert_bad_input(result, lines=1) == [f"sagellm: error: {tmp_path / 'nope.yaml'}: no such file"]


@pytest.mark.slow
def test_profiles_validate_accepts_the_standard_and_example_team_profiles(tmp_path: Path) -> None:
    result = sagellm("profiles", "validate", "--profiles-dir", str(REPO / "profiles"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in STANDARD:
        assert name in result.stdout


@pytest.mark.slow
def test_profiles_schema_prints_the_profile_json_schema(tmp_path: Path) -> None:
    result = sagellm("profiles", "schema", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == Profile.model_json_schema()


# ---------------------------------------------------------------- plan

@pytest.mark.slow
def test_plan_json_has_a_point_per_concurrency_with_the_documented_keys(tmp_path: Path) -> None:
    result = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
                     "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {"shape", "environment", "curve"}
    curve = out["curve"]
    assert CURVE_KEYS <= set(curve)
    assert [p["concurrency"] for p in curve["points"]] == list(DEFAULT_CONCURRENCY)
    assert all(POINT_KEYS <= set(p) for p in curve["points"])
    assert curve["knee"] is not None and curve["knee"]["concurrency"] in DEFAULT_CONCURRENCY
    assert curve["max_throughput"] is not None and curve["max_throughput"]["within_timeout"]
    assert curve["usd_per_h"] == pytest.approx(1.515)
    assert curve["usd_per_1m_tokens_at_max_throughput"] > 0
    assert out["shape"] == {"profile": "max-throughput", "model": LLAMA2_7B, "instance_type": "ml.g5.2xlarge",
                            "tensor_parallel": 1, "copies_per_instance": 1, "instance_count": 1,
                            "quantization": "none", "container": "tgi 3.3.6"}
    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge")
    assert out["environment"] == plan.environment
    shape = Shape(find_model(LLAMA2_7B), find_instance("ml.g5.2xlarge"), 1)
    assert curve["kv_capacity_tokens_per_copy"] == shape.kv_capacity_tokens


@pytest.mark.slow
def test_plan_takes_concurrency_levels_and_payload(tmp_path: Path) -> None:
    result = sagellm("plan", "--profile", "min-latency", "--model", LLAMA2_7B, "--instance", "ml.g5.12xlarge",
                     "--concurrency", "1,3,5", "--input-tokens", "512", "--output-tokens", "64", "--json",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    curve = json.loads(result.stdout)["curve"]
    assert [p["concurrency"] for p in curve["points"]] == [1, 3, 5]
    assert curve["payload"] == {"input_tokens": 512, "output_tokens": 64}
    # min-latency runs one sequence per copy: the rest wait their turn, none is turned away.
    assert [p["rejected"] for p in curve["points"]] == [False, False, False]
    assert [(p["running_per_copy"], p["queued_per_copy"]) for p in curve["points"]] == [(1, 0), (1, 2), (1, 4)]


@pytest.mark.slow
def test_plan_draws_lengths_from_a_distribution_as_the_bench_does(tmp_path: Path) -> None:
    args = ("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
            "--concurrency", "8", "--json")
    varied = sagellm(*args, "--input-tokens", "128-1024", "--output-tokens", "256:64", cwd=tmp_path)
    fixed = sagellm(*args, "--input-tokens", "576", "--output-tokens", "256", cwd=tmp_path)
    assert varied.returncode == fixed.returncode == 0, varied.stderr + fixed.stderr
    v, f = json.loads(varied.stdout), json.loads(fixed.stdout)
    assert v["curve"]["payload"] == f["curve"]["payload"] == {"input_tokens": 576, "output_tokens": 256}  # the mean
    # The limits take the longest request: room for 448 output tokens (256 + 3 × 64) in the total, and the
    # admission sized for 1024-token prompts.
    assert int(v["environment"]["MAX_INPUT_TOKENS"]) == int(v["environment"]["MAX_TOTAL_TOKENS"]) - 448
    assert int(v["environment"]["MAX_CONCURRENT_REQUESTS"]) < int(f["environment"]["MAX_CONCURRENT_REQUESTS"])
    # Drawn lengths spread the latencies: the same mean, other percentiles.
    assert v["curve"]["points"][0]["ttft_ms_p90"] != f["curve"]["points"][0]["ttft_ms_p90"]
    bad = sagellm(*args, "--input-tokens", "1024-128", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("sagellm: error: --input-tokens: '1024-128' is an empty range: its minimum is above "
                                  "its maximum (use 512 (fixed), 512:64 (mean:stddev) or 256-1024 (min-max))")


@pytest.mark.slow
def test_plan_takes_shared_prefixes_and_routes_them_as_the_profile_says(tmp_path: Path) -> None:
    for name, routing in (("least", "{strategy: least-outstanding}"),
                          ("routed", "{strategy: prefix-aware, prefix_length: 4096, concurrency_threshold: 16}")):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\nextends: replicas\ncontainer: {{kind: vllm}}\n"
                                               f"routing: {routing}\n")

    def plan(profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return sagellm("plan", "--profile", profile, "--profiles-dir", str(tmp_path), "--model", LLAMA2_7B,
                       "--instance", "ml.g5.12xlarge", "--input-tokens", "2048", "--output-tokens", "64",
                       "--concurrency", "16", "--json", *extra, cwd=tmp_path)

    # Four copies, sixteen prefixes of 1536 tokens: more than a copy's cache holds, a quarter of them fits.
    least, routed = (plan(p, "--shared-prefix", "1536", "--prefixes", "16") for p in ("least", "routed"))
    assert least.returncode == routed.returncode == 0, least.stderr + routed.stderr
    ttft = [json.loads(r.stdout)["curve"]["points"][0]["ttft_ms"] for r in (least, routed)]
    assert ttft[1] < 0.75 * ttft[0]
    bad = plan("least", "--prefixes", "3")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("sagellm: error: --prefixes: 3 prefixes of 0 tokens: give --shared-prefix their "
                                  "length")


@pytest.mark.slow
def test_plan_flags_override_tp_copies_and_instance_count(tmp_path: Path) -> None:
    result = sagellm("plan", "--profile", "replicas", "--model", LLAMA2_7B, "--instance", "ml.p4d.24xlarge",
                     "--tensor-parallel", "2", "--replicas", "4", "--instance-count", "2", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["shape"]["tensor_parallel"], out["shape"]["copies_per_instance"], out["shape"]["instance_count"]) \
        == (2, 4, 2)
    assert out["environment"]["SM_NUM_GPUS"] == "2"
    assert out["curve"]["usd_per_h"] == pytest.approx(2 * 25.2513)


@pytest.mark.slow
def test_plan_prints_a_table_for_people(tmp_path: Path) -> None:
    result = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
                     "--concurrency", "1,2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "knee" in result.stdout.lower()


@pytest.mark.parametrize(("flags", "message"), [
    (["--concurrency", "1,x"], ("sagellm: error: --concurrency: '1,x': 'x' is not a whole number; give levels ≥ 1 "
                                "separated by commas, e.g. 1,2,4,8")),
    (["--concurrency", "0,4"], ("sagellm: error: --concurrency: '0,4': 0 is not a level; give levels ≥ 1 separated "
                                "by commas, e.g. 1,2,4,8")),
    (["--concurrency", "1,,2"], ("sagellm: error: --concurrency: '1,,2' has an empty level between commas; give "
                                 "levels ≥ 1 separated by commas, e.g. 1,2,4,8")),
    (["--concurrency", "1,2,1"], "sagellm: error: --concurrency: '1,2,1': 1 is given twice; list each level once"),
    (["--input-tokens", "0"], ("sagellm: error: --input-tokens: '0' allows lengths outside 1 to 4294967295 tokens "
                               "(use 512 (fixed), 512:64 (mean:stddev) or 256-1024 (min-max))")),
    (["--output-tokens", "-5"], ("sagellm: error: --output-tokens: '-5' is not a length (use 512 (fixed), 512:64 "
                                 "(mean:stddev) or 256-1024 (min-max))")),
    (["--tensor-parallel", "0"], ("sagellm: error: --tensor-parallel: '0': Input should be greater than or equal to "
                                  "1 (see `sagellm plan --help`)")),
    (["--instance-count", "4294967296"], ("sagellm: error: --instance-count: '4294967296': Input should be less "
                                          "than or equal to 2147483647 (see `sagellm plan --help`)")),
    (["--region", "us-east1"], ("sagellm: error: --region: 'us-east1' is not a region with SageMaker in botocore's "
                                "endpoint data; did you mean us-east-1, us-west-1, us-east-2? (a region newer than "
                                "the installed botocore needs pip install -U botocore)")),
    (["--tensor-parallel", "3", "--instance", "ml.g5.12xlarge"],
     "sagellm: error: tensor_parallel: 3 must divide the 4 accelerators of ml.g5.12xlarge (valid: 1, 2, 4)"),
    (["--instance", "ml.g5.2xlarg"], ("sagellm: error: instance: unknown instance type 'ml.g5.2xlarg': did you "
                                      "mean ml.g5.2xlarge, ml.g5.24xlarge, ml.g5.12xlarge?")),
])
@pytest.mark.slow
def test_plan_with_a_bad_flag_value_exits_2_with_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    args = ["plan", "--profile", "max-throughput", "--model", LLAMA2_7B]
    if "--instance" not in flags:
        args += ["--instance", "ml.g5.2xlarge"]
    result = sagellm(*args, *flags, cwd=tmp_path)
    assert assert_bad_input(result, lines=1) == [message]


@pytest.mark.parametrize("flags", [
    ["--model", LLAMA2_7B, "--tensor-parallel", "abc"],
    ["--model", LLAMA2_7B, "--no-such-flag"],
    [],  # --model missing
], ids=["not-an-integer", "unknown-flag", "missing-model"])
@pytest.mark.slow
def test_plan_usage_error_exits_2_without_traceback(tmp_path: Path, flags: list[str]) -> None:
    result = sagellm("plan", "--profile", "max-throughput", *flags, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--tensor-parallel", "--instance-count", "--replicas"])
@pytest.mark.slow
def test_plan_rejects_zero_for_a_count_flag(tmp_path: Path, flag: str) -> None:
    result = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
                     flag, "0", "--json", cwd=tmp_path)
    assert result.returncode == 2, result.stdout


@pytest.mark.slow
def test_input_errors_show_a_traceback_only_with_debug(tmp_path: Path) -> None:
    result = sagellm("plan", "--profile", "nope", "--model", LLAMA2_7B, "--debug", cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "InputError" in result.stderr


_IMPORT_PROBE = """
import contextlib, io, sys
from sagellm.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    app(["plan", "--profile", "max-throughput", "--model", "meta-llama/Llama-2-7b-hf",
         "--instance", "ml.g5.2xlarge", "--json"], standalone_mode=False)
heavy = {"aws_cdk", "sagemaker", "jsii", "constructs", "cdk_nag", "moto",
         "boto3", "botocore", "numpy", "huggingface_hub", "aiohttp", "matplotlib", "asyncio"}
print(sorted({name.split(".")[0] for name in sys.modules} & heavy))
"""


@pytest.mark.slow
def test_plan_never_imports_aws_cdk_or_the_sagemaker_sdk(tmp_path: Path) -> None:
    # The start-up promise (`sagellm plan` under 0.5 s) rests on this, nor the AWS SDK, numpy, the Hub client, the
    # HTTP stack or plotting (models come from the catalog); wall-clock is measured (benchmarks/recommend_speed.py
    # --plan-only), not asserted.
    result = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_help_lists_the_commands_and_exit_codes(tmp_path: Path) -> None:
    result = sagellm("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for text in ("plan", "profiles", "2 bad input"):
        assert text in result.stdout


@pytest.mark.slow
def test_version_prints_the_package_version(tmp_path: Path) -> None:
    from sagellm import __version__

    result = sagellm("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"sagellm {__version__}\n"


@pytest.mark.slow
def test_results_schema_prints_the_results_json_schema(tmp_path: Path) -> None:
    from sagellm.results.schema import Results

    result = sagellm("results", "schema", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema == Results.model_json_schema()
    assert {"run", "levels", "gate", "failure"} <= set(schema["properties"])


@pytest.mark.slow
def test_engine_serves_the_profile_on_another_engine_and_an_unknown_one_is_one_line(tmp_path: Path) -> None:
    from sagellm.engines import ENGINES

    shown = sagellm("profiles", "show", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.12xlarge",
                    "--engine", "lmi", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["container"] == "lmi"
    planned = sagellm("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.12xlarge",
                      "--engine", "lmi", "--json", cwd=tmp_path)
    assert json.loads(planned.stdout)["shape"]["container"] == f"lmi {ENGINES['lmi'].pinned}"
    for command in (["plan", "--profile", "max-throughput"], ["profiles", "show", "max-throughput"],
                    ["bench", "--profile", "max-throughput"]):
        bad = sagellm(*command, "--model", LLAMA2_7B, "--engine", "nope", cwd=tmp_path)
        assert assert_bad_input(bad, 1) == [(f"sagellm: error: --engine: unknown engine 'nope' (known: "
                                            f"{', '.join(ENGINES)})")]


@pytest.mark.slow
def test_plan_simulates_conversations_with_ttft_by_turn(tmp_path: Path) -> None:
    args = ("plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
            "--concurrency", "1,4", "--input-tokens", "200", "--output-tokens", "50", "--json")
    result = sagellm(*args, "--turns", "3", "--think-time", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [p["concurrency"] for p in out["curve"]["points"]] == [1, 4]
    for level in ("1", "4"):
        turns = out["by_turn"][level]
        assert [t["turn"] for t in turns] == [1, 2, 3]
        assert [t["request_input_tokens"]["mean"] for t in turns] == [200, 450, 700]  # history: messages + replies
        assert turns[2]["ttft_ms"]["p50"] > turns[0]["ttft_ms"]["p50"]
    # The limits take the last turn of a conversation: 3 messages and 2 replies.
    assert int(out["environment"]["MAX_INPUT_TOKENS"]) >= 700
    bad = sagellm(*args, "--think-time", "2", cwd=tmp_path)
    assert assert_bad_input(bad, lines=1) == [("sagellm: error: --think-time: only with --turns (the pause between a "
                                              "conversation's turns)")]


def test_a_command_line_builds_only_the_command_it_names_and_help_or_a_typo_the_whole_app() -> None:
    import typer.main

    from sagellm.cli import _app_for, app

    def names(argv: list[str]) -> set[str]:
        return set(typer.main.get_command(_app_for(argv)).commands)  # type: ignore[attr-defined]

    everything = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert {"plan", "profiles", "recommend"} <= everything
    assert names(["sagellm", "--offline", "plan", "--model", "x"]) == {"plan"}
    assert names(["sagellm", "profiles", "list"]) == {"profiles"}  # a group: its subcommands come with it
    assert names(["sagellm", "--help"]) == names(["sagellm", "plann"]) == everything  # "did you mean plan?"


def test_plan_runs_without_the_cyclic_collector_and_main_gives_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from sagellm import cli

    seen: dict[str, bool] = {}

    def app_for(argv: list[str]) -> object:
        def run(standalone_mode: bool) -> int:
            seen[argv[-1]] = gc.isenabled()
            return 0
        return run

    monkeypatch.setattr(cli, "_app_for", app_for)
    assert gc.isenabled()
    for argv in (["sagellm", "--offline", "plan"], ["sagellm", "profiles"]):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        assert exit_.value.code == 0
        assert gc.isenabled()  # as it found it, for the process that called main()
    assert seen == {"plan": False, "profiles": True}


_COERCION_PROBE = """
import contextlib, io, sys
from sagellm.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    app(sys.argv[1:], standalone_mode=False)
print("typer._adapters" in sys.modules)
"""


@pytest.mark.slow
def test_plan_builds_typers_pydantic_coercion_only_for_a_value_that_needs_it(tmp_path: Path) -> None:
    # Strings and defaults pass through unchanged (typer would build a pydantic adapter per option for them); an int
    # typed on the command line still goes through typer's own coercion, and its errors stay typer's.
    def probe(*extra: str) -> str:
        argv = ["plan", "--profile", "max-throughput", "--model", LLAMA2_7B, "--instance", "ml.g5.2xlarge",
                "--concurrency", "1,4", "--json", *extra]
        result = subprocess.run([sys.executable, "-c", _COERCION_PROBE, *argv], cwd=tmp_path, capture_output=True,
                                text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    assert probe() == "False"
    assert probe("--tensor-parallel", "1") == "True"

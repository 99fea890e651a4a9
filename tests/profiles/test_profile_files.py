"""Bad input never costs a deploy: files, numbers, environment aliases and names, each refused in one line
(exit 2) by `profiles validate` and by every command that designs a plan — the one validation path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B, run_cli

from sagellm.engines import ENGINES
from sagellm.engines.lmi import VLLM_ASYNC
from sagellm.errors import InputError
from sagellm.profiles import resolve
from sagellm.profiles.loader import MAX_FILE_BYTES, all_sources, load_profile
from sagellm.profiles.resolve import Copy, design_for, environment
from sagellm.profiles.schema import INT32_MAX, Profile
from sagellm.profiles.validate import profile_errors, validate_profile, with_values


def validate(capsys, monkeypatch, *args: str) -> tuple[int, list[str]]:
    code, out, err = run_cli(capsys, monkeypatch, "profiles", "validate", *args)
    assert "Traceback" not in err
    return code, err.splitlines() if code else [out.strip()]


# ---------------------------------------------------------------- files

def test_a_broken_file_in_profiles_breaks_only_the_profile_it_holds(write, team_dir: Path, capsys,
                                                                     monkeypatch) -> None:
    binary = team_dir / "chat.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write("team.yaml", "name: team\nextends: max-throughput\n")
    problem = (f"sagellm: error: {binary}: not UTF-8 text (byte 0x00 at offset 8); a profile is YAML saved as "
               "UTF-8 — is this the right file?")
    # Unrelated commands work: the team's other profile and the standard ones.
    assert resolve("team", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).profile == "team"
    code, out, _ = run_cli(capsys, monkeypatch, "plan", "--profile", "max-throughput", "--model", LLAMA2_7B,
                           "--instance", "ml.g5.2xlarge", "--profiles-dir", str(team_dir), "--json")
    assert code == 0 and '"knee"' in out
    # The profile the file holds (by its name), and validating everything, name the file.
    code, _, err = run_cli(capsys, monkeypatch, "plan", "--profile", "chat", "--model", LLAMA2_7B,
                           "--profiles-dir", str(team_dir))
    assert (code, err.splitlines()) == (2, [problem])
    assert validate(capsys, monkeypatch, "--profiles-dir", str(team_dir)) == (2, [problem])
    # `profiles list` still lists everything, the broken file marked.
    code, out, _ = run_cli(capsys, monkeypatch, "profiles", "list", "--profiles-dir", str(team_dir))
    assert code == 0 and f"chat                 unusable: {problem.removeprefix('sagellm: error: ')}" in out


def test_a_profile_file_over_the_size_limit_is_refused_before_it_is_parsed(team_dir: Path, capsys,
                                                                           monkeypatch) -> None:
    big = team_dir / "big.yaml"
    big.write_text("name: big\nextends: max-throughput\ntags:\n" + "  k: v\n" * (MAX_FILE_BYTES // 6))
    size = big.stat().st_size
    assert size > MAX_FILE_BYTES
    assert validate(capsys, monkeypatch, str(big)) == (2, [
        (f"sagellm: error: {big}: {size} bytes is over the 1048576-byte (1 MiB) limit for a profile file; a profile "
        "is a few dozen lines — is this the right file?")])


def test_an_empty_file_is_not_a_profile(write, capsys, monkeypatch) -> None:
    path = write("empty.yaml", "")
    assert validate(capsys, monkeypatch, str(path)) == (2, [
        (f"sagellm: error: {path}: empty; a profile needs at least `name: <name>` and `extends: <profile>` (e.g. "
        "extends: max-throughput)")])


def test_duplicate_keys_are_refused_with_both_lines_instead_of_dropping_the_first(write) -> None:
    path = write("dup.yaml", "name: dup\nextends: max-throughput\nserving:\n  max_input_tokens: 1024\n"
                             "  max_input_tokens: 2048\n")
    with pytest.raises(InputError) as exc:
        load_profile("dup", all_sources(path.parent))
    assert exc.value.messages == [
        f"{path}:5: serving.max_input_tokens: duplicate key (first at line 4); keep one of them"]


def test_a_profile_name_defined_in_two_files_names_both_files_and_lines(write, team_dir: Path, capsys,
                                                                        monkeypatch) -> None:
    first = write("a.yaml", "name: chat\nextends: max-throughput\n")
    second = write("b.yaml", "# the same name again\nname: chat\nextends: min-latency\n")
    line = (f"{second}:2: name: 'chat' is also defined in {first}:1; rename one of them (a profile name is "
            "defined once)")
    with pytest.raises(InputError) as exc:
        resolve("chat", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [line]
    assert resolve("min-latency", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).profile == "min-latency"
    # Given as files, the two are refused the same way.
    assert validate(capsys, monkeypatch, str(first), str(second)) == (2, [f"sagellm: error: {line}"])


def test_validate_checks_the_folders_models_file_too(write, team_dir: Path, capsys, monkeypatch) -> None:
    path = write("models.yaml", "acme/x:\n  params_b: 7.0\n")
    assert validate(capsys, monkeypatch, "--profiles-dir", str(team_dir)) == (2, [
        (f"sagellm: error: {path}:1: acme/x: missing n_layers, hidden_size, n_heads, n_kv_heads, head_dim, "
        "max_context (add them)")])


# ---------------------------------------------------------------- numbers

@pytest.mark.parametrize(("yaml_text", "tail"), [
    ("serving:\n  max_concurrent_requests: 100000000000000000000\n",
     (":4: serving.max_concurrent_requests: 100000000000000000000: out of range; use a value ≤ 2305843009213693951 "
     "or auto")),
    ("autoscaling:\n  scale_in_cooldown_s: -300\n",
     ":4: autoscaling.scale_in_cooldown_s: -300: out of range; use a value ≥ 0"),
    ("startup_health_check_timeout_s: 3601\n",
     ":3: startup_health_check_timeout_s: 3601: out of range; use a value ≤ 3600 or auto"),
    (f"initial_instance_count: {INT32_MAX + 1}\n",
     f":3: initial_instance_count: {INT32_MAX + 1}: out of range; use a value ≤ {INT32_MAX}"),
], ids=["admission-beyond-tgi", "negative-cooldown", "startup-beyond-sagemaker", "count-beyond-int32"])
def test_values_a_server_would_reject_after_a_deploy_are_refused_at_validate_and_plan(
        write, team_dir: Path, yaml_text: str, tail: str) -> None:
    path = write("num.yaml", "name: num\nextends: autoscale\n" + yaml_text)
    assert validate_profile("num", all_sources(team_dir)) == [f"{path}{tail}"]
    with pytest.raises(InputError) as exc:
        resolve("num", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [f"{path}{tail}"]


def test_the_bounds_themselves_are_accepted(write, team_dir: Path) -> None:
    write("edge.yaml", """
        name: edge
        extends: autoscale
        startup_health_check_timeout_s: 3600
        model_data_download_timeout_s: 60
        volume_size_gb: 512
        autoscaling:
          scale_in_cooldown_s: 0
        """)
    plan = resolve("edge", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert (plan.startup_health_check_timeout_s, plan.model_data_download_timeout_s) == (3600, 60)
    assert plan.volume_size_gb == 512 and plan.scaling is not None and plan.scaling.scale_in_cooldown_s == 0


# ---------------------------------------------------------------- environment aliases

def test_aliases_of_one_server_setting_that_disagree_are_refused(write, team_dir: Path) -> None:
    path = write("rev.yaml", """
        name: rev
        extends: max-throughput
        serving:
          environment:
            HF_MODEL_REVISION: main
            REVISION: v2
        """)
    with pytest.raises(InputError) as exc:
        resolve("rev", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [
        (f"{path}:5: serving.environment.HF_MODEL_REVISION: 'main' (and REVISION: 'v2'): these disagree, and both set "
        "the server's model revision (only one wins); keep one of them")]


def test_max_input_length_beside_the_plans_max_input_tokens_is_refused(write, team_dir: Path) -> None:
    # TGI's launcher refuses MAX_INPUT_LENGTH and MAX_INPUT_TOKENS together; the plan always sets the latter.
    path = write("len.yaml", """
        name: len
        extends: max-throughput
        serving:
          environment:
            MAX_INPUT_TOKENS: "1024"
            MAX_INPUT_LENGTH: "2048"
        """)
    with pytest.raises(InputError) as exc:
        resolve("len", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [
        (f"{path}:5: serving.environment.MAX_INPUT_TOKENS: '1024' (and MAX_INPUT_LENGTH: '2048'): the plan sets the "
        "server's max input tokens from serving.max_input_tokens; remove them and set serving.max_input_tokens")]


def test_agreeing_aliases_and_other_variables_pass_into_the_plan(write, team_dir: Path) -> None:
    write("ok.yaml", """
        name: ok
        extends: max-throughput
        serving:
          environment:
            HF_MODEL_REVISION: main
            REVISION: main
            CUDA_MEMORY_FRACTION: "0.9"
        """)
    env = resolve("ok", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).environment
    assert (env["REVISION"], env["CUDA_MEMORY_FRACTION"]) == ("main", "0.9")


@pytest.mark.parametrize("container", ["tgi", "lmi"])
def test_every_variable_the_plan_writes_is_owned_by_a_profile_field_in_the_alias_table(container: str) -> None:
    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge")
    main = plan.primary
    copy = Copy(main.model(), main.tensor_parallel, 1, "gptq", 256, 512, 4096, 8, 4)
    d = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge")
    engine = ENGINES[container]
    written = set(environment(copy, dataclasses.replace(d, container=container, container_version=engine.pinned)))
    # The engine choice and TGI 3's PREFILL_CHUNKING=0 beside a batch-size limit are sagellm's, not a profile's.
    written -= {*VLLM_ASYNC, "PREFILL_CHUNKING"}
    owned = {v.names[0] for v in engine.variables if v.sets}
    assert written == owned


# ---------------------------------------------------------------- names

def test_a_profile_name_a_stack_name_cannot_hold_is_refused_before_synth(write, team_dir: Path) -> None:
    path = write("cafe.yaml", "name: café-chat\nextends: max-throughput\n")
    with pytest.raises(InputError) as exc:
        resolve("café-chat", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [
        (f"{path}:1: name: 'café-chat' cannot be part of a CloudFormation stack name: use ASCII letters, digits and "
        "hyphens, at most 64 characters (e.g. 'cafe-chat')")]


# ---------------------------------------------------------------- one path

def test_command_line_values_go_through_the_same_checks_named_by_their_option() -> None:
    profile = Profile(name="x", autoscaling={"min_capacity": 1, "max_capacity": 2})
    assert profile_errors(with_values(profile, {"initial_instance_count": 3}), lambda p: {
        "initial_instance_count": "instance_count"}.get(p, p)) == [
        "instance_count: 3 must lie within autoscaling min_capacity..max_capacity (1..2)"]
    assert with_values(profile, {"serving.tensor_parallel": 2}).serving.tensor_parallel == 2

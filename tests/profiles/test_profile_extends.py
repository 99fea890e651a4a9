"""Team profiles: `extends:` chains, deep merge of nested sections, overriding standard names."""

from __future__ import annotations

from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B

from sagellm.errors import InputError
from sagellm.profiles import resolve
from sagellm.profiles.loader import all_sources, load_profile


def test_team_profile_pins_admission_and_instance_and_inherits_the_rest(write, team_dir: Path) -> None:
    write("team.yaml", """
        name: team
        extends: max-throughput
        instance_type: ml.g5.12xlarge
        serving:
          max_concurrent_requests: 8
        """)
    plan = resolve("team", LLAMA2_7B, profiles_dir=team_dir)
    env = plan.environment
    assert plan.instance_type == "ml.g5.12xlarge"
    assert env["MAX_CONCURRENT_REQUESTS"] == "8"
    # Inherited from max-throughput: all GPUs, token caps from the model's context, the pinned TGI.
    assert env["SM_NUM_GPUS"] == "4"
    assert (env["MAX_INPUT_TOKENS"], env["MAX_TOTAL_TOKENS"]) == ("3840", "4096")
    assert plan.container_version == "3.3.6"
    assert (plan.input_tokens, plan.output_tokens) == (256, 256)
    assert plan.profile == "team" and plan.tags["sagellm:profile"] == "team"


def test_cli_instance_overrides_the_team_profile_instance(write, team_dir: Path) -> None:
    write("team.yaml", """
        name: team
        extends: max-throughput
        instance_type: ml.g5.12xlarge
        """)
    assert resolve("team", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).instance_type == "ml.g5.2xlarge"


def test_nested_serving_sections_deep_merge_along_the_chain(write, team_dir: Path) -> None:
    write("base.yaml", """
        name: base
        extends: min-latency
        serving:
          max_input_tokens: 512
          environment:
            MAX_WAITING_TOKENS: "30"
        """)
    write("child.yaml", """
        name: child
        extends: base
        serving:
          max_total_tokens: 1024
          environment:
            CUDA_GRAPHS: "1,2,4"
        """)
    profile = load_profile("child", all_sources(team_dir))
    s = profile.serving
    assert (s.max_input_tokens, s.max_total_tokens, s.max_batch_size) == (512, 1024, 1)
    assert s.environment == {"MAX_WAITING_TOKENS": "30", "CUDA_GRAPHS": "1,2,4"}
    assert profile.extends == "base"
    env = resolve("child", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir).environment
    assert (env["MAX_INPUT_TOKENS"], env["MAX_TOTAL_TOKENS"], env["MAX_BATCH_SIZE"]) == ("512", "1024", "1")
    assert (env["MAX_WAITING_TOKENS"], env["CUDA_GRAPHS"]) == ("30", "1,2,4")


def test_extending_an_unknown_profile_names_the_file_line_and_close_matches(write, team_dir: Path) -> None:
    path = write("orphan.yaml", """
        name: orphan
        extends: max-thruput
        """)
    with pytest.raises(InputError) as exc:
        load_profile("orphan", all_sources(team_dir))
    assert exc.value.messages == [f"{path}:2: extends: unknown profile 'max-thruput': did you mean max-throughput?"]


def test_unknown_profile_name_suggests_close_matches() -> None:
    with pytest.raises(InputError) as exc:
        resolve("max-thruput", LLAMA2_7B, "ml.g5.2xlarge")
    assert exc.value.messages == ["profile: unknown profile 'max-thruput': did you mean max-throughput?"]


def test_unknown_profile_name_without_close_match_lists_the_known_ones() -> None:
    with pytest.raises(InputError) as exc:
        resolve("zzz", LLAMA2_7B, "ml.g5.2xlarge")
    assert exc.value.messages == [
        ("profile: unknown profile 'zzz': known: autoscale, max-throughput, min-cost, min-latency, replicas, "
         "scale-to-zero")
    ]


def test_team_file_may_redefine_a_standard_profile_by_extending_it(write, team_dir: Path) -> None:
    write("max-throughput.yaml", "name: max-throughput\nextends: max-throughput\ninstance_type: ml.g5.12xlarge\n")
    plan = resolve("max-throughput", LLAMA2_7B, profiles_dir=team_dir)
    assert plan.instance_type == "ml.g5.12xlarge"
    assert plan.environment["MAX_CONCURRENT_REQUESTS"] != "1"  # inherited from the standard one


def test_extends_cycle_is_an_error_not_a_hang(write, team_dir: Path) -> None:
    write("a.yaml", "name: a\nextends: b\n")
    b = write("b.yaml", "name: b\nextends: a\n")
    with pytest.raises(InputError) as exc:
        load_profile("a", all_sources(team_dir))
    assert exc.value.messages == [f"{b}:2: extends: cycle a → b → a; make one of them extend a standard profile"]


def test_self_extension_is_a_cycle(write, team_dir: Path) -> None:
    me = write("me.yaml", "name: me\nextends: me\n")
    with pytest.raises(InputError) as exc:
        load_profile("me", all_sources(team_dir))
    assert exc.value.messages == [f"{me}:2: extends: cycle me → me; make one of them extend a standard profile"]


def test_team_file_redefining_a_standard_name_wins(write, team_dir: Path) -> None:
    write("ours.yaml", """
        name: max-throughput
        instance_type: ml.g5.12xlarge
        serving:
          max_concurrent_requests: 4
        """)
    assert all_sources(team_dir)["max-throughput"].path == str(team_dir / "ours.yaml")
    plan = resolve("max-throughput", LLAMA2_7B, profiles_dir=team_dir)
    assert plan.instance_type == "ml.g5.12xlarge"
    assert plan.environment["MAX_CONCURRENT_REQUESTS"] == "4"


def test_profile_name_defaults_to_the_file_stem(write, team_dir: Path) -> None:
    write("night-batch.yaml", "extends: max-throughput\n")
    assert load_profile("night-batch", all_sources(team_dir)).name == "night-batch"


def test_default_profiles_dir_is_profiles_in_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "local.yaml").write_text("name: local\nextends: min-latency\n")
    monkeypatch.chdir(tmp_path)
    assert "local" in all_sources()


def test_profiles_dir_that_is_not_a_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        all_sources(tmp_path / "missing")
    assert exc.value.messages == [
        f"profiles_dir: {tmp_path / 'missing'} is not a directory (give the folder holding your profile YAML)"
    ]

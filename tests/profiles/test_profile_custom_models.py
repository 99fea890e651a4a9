"""Models the catalog lacks: architecture inline in a team profile, or in <profiles_dir>/models.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagellm.catalog import Model, find_instance
from sagellm.errors import InputError
from sagellm.planner import Shape
from sagellm.profiles import resolve
from sagellm.profiles.loader import all_sources, load_profile

ARCH = """
  params_b: 7.0
  n_layers: 32
  hidden_size: 4096
  n_heads: 32
  n_kv_heads: 8
  head_dim: 128
  max_context: 8192
"""
CUSTOM = Model(hf_id="acme/custom-7b", params_b=7.0, n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8,
               head_dim=128, max_context=8192)


def test_unknown_model_without_architecture_is_refused_with_close_matches() -> None:
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "acme/custom-7b", "ml.g5.12xlarge")
    [msg] = exc.value.messages
    # A Hub id outside the catalog is looked up on the Hub: offline here (conftest), with nothing cached.
    assert msg.startswith("model: acme/custom-7b: not in the catalog; offline")
    assert "give its architecture under 'architecture:' in the profile" in msg


def test_unknown_model_is_accepted_with_inline_architecture(write, team_dir: Path) -> None:
    write("custom.yaml", "name: custom\nextends: max-throughput\narchitecture:" + ARCH)
    plan = resolve("custom", "acme/custom-7b", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert plan.primary.model_id == "acme/custom-7b"
    assert plan.environment["HF_MODEL_ID"] == "acme/custom-7b"
    assert plan.environment["SM_NUM_GPUS"] == "4"
    # The caps follow the architecture's own 8192-token context (the KV cache holds two such sequences).
    assert 2 * 8192 <= Shape(CUSTOM, find_instance("ml.g5.12xlarge"), 4).kv_capacity_tokens
    assert plan.environment["MAX_TOTAL_TOKENS"] == "8192"
    assert plan.tags["sagellm:model"] == "acme/custom-7b"


def test_inline_architecture_context_limits_total_tokens(write, team_dir: Path) -> None:
    path = write("custom.yaml", "name: custom\nextends: max-throughput\nserving:\n  max_total_tokens: 9000\n"
                 "architecture:" + ARCH)
    with pytest.raises(InputError) as exc:
        resolve("custom", "acme/custom-7b", "ml.p4d.24xlarge", profiles_dir=team_dir)
    assert (f"{path}:4: serving.max_total_tokens: 9000 exceeds the 8192-token context of acme/custom-7b; lower "
            "max_total_tokens or use auto") in exc.value.messages


def test_inline_architecture_missing_a_fact_is_reported(write, team_dir: Path) -> None:
    path = write("custom.yaml", "name: custom\nextends: max-throughput\narchitecture:\n  params_b: 7.0\n")
    with pytest.raises(InputError) as exc:
        load_profile("custom", all_sources(team_dir))
    assert exc.value.messages == [(f"{path}:3: architecture: missing n_layers, hidden_size, n_heads, n_kv_heads, "
                                  "head_dim, max_context (add them)")]


def test_unknown_model_is_accepted_from_the_local_models_file(write, team_dir: Path) -> None:
    write("models.yaml", "acme/custom-7b:" + ARCH)
    plan = resolve("max-throughput", "acme/custom-7b", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert plan.primary.model_id == "acme/custom-7b"
    assert plan.environment["MAX_TOTAL_TOKENS"] == "8192"


def test_local_models_file_from_the_default_profiles_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "models.yaml").write_text("acme/custom-7b:" + ARCH)
    monkeypatch.chdir(tmp_path)
    assert resolve("min-latency", "acme/custom-7b", "ml.g5.2xlarge").primary.model_id == "acme/custom-7b"


def test_local_models_file_missing_a_field_names_the_file_line_entry_and_field(write, team_dir: Path) -> None:
    path = write("models.yaml", "acme/custom-7b:" + ARCH.replace("  head_dim: 128\n", ""))
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "acme/custom-7b", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [f"{path}:1: acme/custom-7b: missing head_dim (add it)"]


def test_local_models_file_with_a_bad_value_names_the_entry_and_field(write, team_dir: Path) -> None:
    path = write("models.yaml", "acme/custom-7b:" + ARCH.replace("n_heads: 32", "n_heads: 0"))
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "acme/custom-7b", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [f"{path}:5: acme/custom-7b.n_heads: 0: out of range; use a value ≥ 1"]


def test_local_models_file_is_not_taken_for_a_profile(write, team_dir: Path) -> None:
    write("models.yaml", "acme/custom-7b:" + ARCH)
    assert "models" not in all_sources(team_dir)


def test_plan_carries_a_custom_architecture_so_the_emulator_can_simulate_it(write, team_dir: Path) -> None:
    write("custom.yaml", "name: custom\nextends: max-throughput\narchitecture:" + ARCH)
    plan = resolve("custom", "acme/custom-7b", "ml.g5.12xlarge", profiles_dir=team_dir)
    assert plan.primary.model() == CUSTOM
    # a catalog model needs no facts in the plan
    assert resolve("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.12xlarge").primary.architecture is None

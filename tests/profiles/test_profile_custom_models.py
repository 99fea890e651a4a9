"""Models the catalog lacks: architecture inline in a team profile, or in <profiles_dir>/models.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagellm.catalog import Model, find_instance
from sagellm.errors import InputError
from sagellm.planner import Shape
from sagellm.profiles import design_for, resolve
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


def _checkpoint(folder: Path, method: str) -> str:
    """A local model folder whose config.json is a Llama-2-7B checkpoint stored quantized with `method`."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "intermediate_size": 11008,
        "max_position_embeddings": 4096, "quantization_config": {"bits": 4, "quant_method": method}}))
    return str(folder)


def test_a_pre_quantized_checkpoint_is_served_and_sized_as_its_config_json_stores_it(tmp_path: Path) -> None:
    model = _checkpoint(tmp_path / "llama-gptq", "gptq")
    design = design_for("max-throughput", model, "ml.g5.2xlarge")  # the profile says none
    assert design.copies[0].quantization == "gptq" and design.environment["HF_MODEL_QUANTIZE"] == "gptq"
    assert f"serving.quantization: gptq, as {model}'s config.json stores its weights" in design.notes
    assert design_for("max-throughput", model, "ml.g5.2xlarge", engine="vllm").environment[
        "SM_VLLM_QUANTIZATION"] == "gptq"


def test_a_quantization_other_than_the_checkpoints_is_one_line_with_the_fix(write, team_dir: Path,
                                                                            tmp_path: Path) -> None:
    model = _checkpoint(tmp_path / "llama-gptq", "gptq")
    path = write("awq.yaml", "name: awq\nextends: max-throughput\nserving: {quantization: awq}\n")
    with pytest.raises(InputError) as exc:
        resolve("awq", model, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [
        (f"{path}:3: serving.quantization: 'awq', but {model}'s weights are stored quantized with gptq (its config.json "
        "quantization_config.quant_method); set serving.quantization: gptq (the server loads that format, and memory "
        "is sized by it)")]


def test_a_checkpoint_stored_in_a_method_sagellm_cannot_size_or_the_engine_lacks_is_refused(tmp_path: Path) -> None:
    exl2 = _checkpoint(tmp_path / "llama-exl2", "exl2")
    with pytest.raises(InputError, match=r"stored quantized with 'exl2' .*which sagellm does not size"):
        resolve("max-throughput", exl2, "ml.g5.2xlarge")
    bnb = _checkpoint(tmp_path / "llama-bnb", "bitsandbytes")
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", bnb, "ml.g5.2xlarge", engine="vllm")
    assert exc.value.messages == [
        (f"{bnb}: its config.json quantization_config.quant_method: 'bitsandbytes' is not a quantization vLLM 0.30.0 "
        "takes (engine: vllm); of sagellm's it takes none, gptq, awq, fp8 (SM_VLLM_QUANTIZATION): use one of those, "
        "or another engine (docs/containers.md)")]
    # design_for: resolve() deploys, and a local folder deploys only from S3 (model_s3_uri).
    assert design_for("max-throughput", bnb, "ml.g5.2xlarge", engine="sglang").plan().primary.quantization \
        == "bitsandbytes"

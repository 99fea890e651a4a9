"""`sagellm models` and `sagellm instances`: what is known, and where a model fits (any Hub model, offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_cache import build_cache

from sagellm.catalog import instances, models

SAGELLM = Path(sys.executable).with_name("sagellm")
HUB_CONFIGS = Path(__file__).with_name("hub_configs")
MOE = "Qwen/Qwen3-30B-A3B"  # outside the catalog: 30.5B parameters, 128 experts, 4 KV heads


def sagellm(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False, env=env)


@pytest.fixture
def hub_env(tmp_path: Path) -> dict[str, str]:
    """A Hugging Face cache holding the MoE model's real config.json; offline only through `--offline`."""
    cache = build_cache(tmp_path / "hub", "Qwen__Qwen3-30B-A3B")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return env | {"HF_HUB_CACHE": str(cache)}


@pytest.mark.slow
def test_models_lists_the_catalog_as_json_and_as_plain_rows_when_piped(tmp_path: Path) -> None:
    listed = json.loads(sagellm("models", "--json", cwd=tmp_path).stdout)
    plain = sagellm("models", cwd=tmp_path).stdout.splitlines()

    assert [m["hf_id"] for m in listed] == list(models())
    assert {"meta-llama/Llama-3.2-3B", "Qwen/Qwen3-32B", "google/gemma-2-9b-it", "microsoft/phi-4"} <= {
        m["hf_id"] for m in listed}
    assert len(plain) == 1 + len(listed) + 1  # heads, one line per model (never wrapped), the count
    assert plain[0].split() == ["model", "alias", "params", "B", "layers", "heads/KV", "context", "experts", "gated"]
    assert plain[-1].startswith(f"{len(listed)} models in the catalog")


@pytest.mark.slow
def test_instances_lists_every_instance_type(tmp_path: Path) -> None:
    listed = json.loads(sagellm("instances", "--json", cwd=tmp_path).stdout)
    plain = sagellm("instances", "--region", "us-west-2", cwd=tmp_path).stdout.splitlines()

    assert [i["instance_type"] for i in listed] == list(instances())
    assert len(plain) == 1 + len(listed)
    assert plain[0].split()[-2:] == ["$/h", "us-west-2"]
    g5 = next(line for line in plain if line.startswith("ml.g5.12xlarge "))
    assert g5.split()[1:4] == ["4", "×", "A10G"] and g5.split()[-1] == "7.09"


@pytest.mark.slow
def test_a_hub_model_offline_says_where_it_fits_and_at_which_tp(tmp_path: Path, hub_env: dict[str, str]) -> None:
    done = sagellm("--offline", "models", "--model", MOE, "--json", cwd=tmp_path, env=hub_env)

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["model"]["n_experts"], out["model"]["experts_per_token"], out["model"]["architecture"]) == (
        128, 8, "Qwen3MoeForCausalLM")
    fits = {r["instance_type"]: r["tensor_parallel"] for r in out["fits"]}
    assert fits["ml.p4de.24xlarge"] == [1, 2, 4]  # 61 GB fits one A100 80GB; TP stops at the 4 KV heads
    assert fits["ml.g6e.12xlarge"] == [2, 4]  # 30.5 GB per L40S at TP 2
    assert fits["ml.g5.2xlarge"] == []
    listed = [r["instance_type"] for r in out["fits"]]
    assert listed.index("ml.g6e.12xlarge") < listed.index("ml.p4de.24xlarge") < listed.index("ml.g5.2xlarge")


@pytest.mark.slow
def test_min_cost_picks_an_instance_that_models_says_fits(tmp_path: Path, hub_env: dict[str, str]) -> None:
    # The same fit test decides both (sagellm.planner.fit): the plan of a Hub model is one `models` lists.
    fits = json.loads(sagellm("--offline", "models", "--model", MOE, "--json", cwd=tmp_path, env=hub_env).stdout)
    done = sagellm("--offline", "plan", "--profile", "min-cost", "--model", MOE, "--json", cwd=tmp_path, env=hub_env)

    assert done.returncode == 0, done.stderr
    shape = json.loads(done.stdout)["shape"]
    fitting = {r["instance_type"]: r["tensor_parallel"] for r in fits["fits"] if r["tensor_parallel"]}
    assert shape["model"] == MOE and shape["tensor_parallel"] in fitting[shape["instance_type"]]


@pytest.mark.slow
def test_offline_with_nothing_cached_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = sagellm("--offline", "models", "--model", "Qwen/Qwen2.5-7B-Instruct", cwd=tmp_path)

    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("sagellm: error: --model: Qwen/Qwen2.5-7B-Instruct: not in the catalog; "
                           "offline")


@pytest.mark.slow
def test_an_unknown_quantization_is_bad_input(tmp_path: Path) -> None:
    done = sagellm("models", "--model", "llama2-7b", "--quantization", "int3", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "sagellm: error: --quantization: 'int3': use one of none, fp8, eetq, bitsandbytes, gptq, awq"]


@pytest.mark.slow
def test_models_reads_a_local_folders_config_json(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((HUB_CONFIGS / "Qwen__Qwen3-8B.json").read_text())

    done = sagellm("models", "--model", "my-model", "--json", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)["model"]
    assert (model["n_layers"], model["n_kv_heads"], model["source"]) == (
        36, 8, "config.json in my-model (parameters estimated from it)")


@pytest.mark.slow
def test_a_local_folder_without_a_config_json_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()

    done = sagellm("models", "--model", "weights", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [("sagellm: error: --model: weights: a local folder without a config.json; give "
                                        "a folder holding the model's config.json, or a Hugging Face id")]


@pytest.mark.parametrize(("changes", "lines"), [
    ({"num_hidden_layers": -3}, ["num_hidden_layers: -3 is not possible; a whole number from 1 to 1,024 is"]),
    ({"hidden_size": 10**9, "num_attention_heads": 0},
     ["num_attention_heads: 0 is not possible; a whole number from 1 to 1,024 is",
      "hidden_size: 1000000000 is not possible; a whole number from 1 to 262,144 is"]),
    ({"max_position_embeddings": 4096.5}, [("max_position_embeddings: 4096.5 is not possible; a whole number from 1 "
                                           "to 134,217,728 is")]),
    ({"num_key_value_heads": 5}, ["num_key_value_heads: 5 must divide num_attention_heads (32)"]),
])
@pytest.mark.slow
def test_impossible_config_values_are_refused_naming_the_file(tmp_path: Path, changes: dict[str, object],
                                                               lines: list[str]) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    config = json.loads((HUB_CONFIGS / "Qwen__Qwen3-8B.json").read_text()) | changes
    (folder / "config.json").write_text(json.dumps(config))

    done = sagellm("models", "--model", "broken", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"sagellm: error: --model: broken/config.json: {line}" for line in lines]

"""The model catalog: required models by Hugging Face id, their architecture facts, aliases, close matches."""

from __future__ import annotations

import pytest

from sagellm.catalog import find_model, models
from sagellm.errors import InputError

# Facts copied from the project's reference table (shared/reference/models.csv, from each model's
# config.json): hf_id -> (params_b, n_layers, hidden_size, n_heads, n_kv_heads, head_dim, max_context, n_experts).
REFERENCE = {
    "meta-llama/Llama-2-7b-hf": (6.74, 32, 4096, 32, 32, 128, 4096, 1),
    "meta-llama/Llama-2-13b-hf": (13.02, 40, 5120, 40, 40, 128, 4096, 1),
    "meta-llama/Llama-2-70b-hf": (68.98, 80, 8192, 64, 8, 128, 4096, 1),
    "meta-llama/Llama-3.1-8B": (8.03, 32, 4096, 32, 8, 128, 131072, 1),
    "meta-llama/Llama-3.1-70B": (70.55, 80, 8192, 64, 8, 128, 131072, 1),
    "mistralai/Mistral-7B-v0.1": (7.24, 32, 4096, 32, 8, 128, 32768, 1),
    "mistralai/Mixtral-8x7B-v0.1": (46.7, 32, 4096, 32, 8, 128, 32768, 8),
    "tiiuae/falcon-7b": (7.22, 32, 4544, 71, 1, 64, 2048, 1),
    "tiiuae/falcon-40b": (41.83, 60, 8192, 128, 8, 64, 2048, 1),
    "tiiuae/falcon-180B": (179.52, 80, 14848, 232, 8, 64, 2048, 1),
    "Qwen/Qwen2.5-7B": (7.62, 28, 3584, 28, 4, 128, 131072, 1),
    "Qwen/Qwen2.5-72B": (72.71, 80, 8192, 64, 8, 128, 131072, 1),
}


@pytest.mark.parametrize("hf_id", sorted(REFERENCE))
def test_required_model_is_keyed_by_hf_id_with_reference_facts(hf_id: str) -> None:
    params_b, layers, hidden, heads, kv_heads, head_dim, context, experts = REFERENCE[hf_id]
    m = models()[hf_id]
    assert m.hf_id == hf_id
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.max_context, m.n_experts) == (
        layers, hidden, heads, kv_heads, head_dim, context, experts)
    assert m.params_b == pytest.approx(params_b, rel=0.01)


def test_mixtral_reads_two_of_eight_experts_per_token() -> None:
    m = models()["mistralai/Mixtral-8x7B-v0.1"]
    assert (m.n_experts, m.experts_per_token) == (8, 2)
    assert m.active_b == pytest.approx(12.88, rel=0.01)


def test_falcon_7b_is_multi_query_so_its_kv_cache_is_tiny() -> None:
    # 2 (K, V) × 32 layers × 1 KV head × 64 dims × 2 bytes (reference: 8192 B/token).
    assert models()["tiiuae/falcon-7b"].kv_bytes_per_token() == 8192


def test_kv_bytes_per_token_match_the_reference_for_llama2_7b_and_70b() -> None:
    assert models()["meta-llama/Llama-2-7b-hf"].kv_bytes_per_token() == 524288
    assert models()["meta-llama/Llama-2-70b-hf"].kv_bytes_per_token() == 327680


def test_active_params_never_exceed_total_params() -> None:
    over = {m.hf_id: (m.params_b, m.active_params_b) for m in models().values()
            if m.active_params_b is not None and m.active_params_b > m.params_b}
    assert over == {}


@pytest.mark.parametrize(("alias", "hf_id"), [
    ("llama2-7b", "meta-llama/Llama-2-7b-hf"),
    ("llama2-70b", "meta-llama/Llama-2-70b-hf"),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    ("falcon-180b", "tiiuae/falcon-180B"),
    ("qwen2.5-72b", "Qwen/Qwen2.5-72B"),
])
def test_alias_resolves_to_the_hf_id(alias: str, hf_id: str) -> None:
    assert find_model(alias).hf_id == hf_id


def test_model_lookup_ignores_case() -> None:
    assert find_model("META-LLAMA/llama-2-7B-HF").hf_id == "meta-llama/Llama-2-7b-hf"


def test_unknown_model_lists_close_matches_and_how_to_supply_an_architecture() -> None:
    # Not a Hub id (no owner/): the catalog's suggestions alone.
    with pytest.raises(InputError) as exc:
        find_model("Llama-2-7b-hfx")
    assert exc.value.messages == [
        ("model: unknown model 'Llama-2-7b-hfx': did you mean meta-llama/Llama-2-7b-hf, "
         "meta-llama/Llama-2-70b-hf, meta-llama/Llama-2-13b-hf? (or give its architecture under "
         "'architecture:' in the profile)")
    ]


def test_an_unknown_hub_id_names_the_catalog_models_close_to_it() -> None:
    # Offline in tests, with an empty cache (conftest): the Hub is not asked.
    with pytest.raises(InputError) as exc:
        find_model("meta-llama/Llama-2-7b-hfx")
    [line] = exc.value.messages
    assert line.startswith("model: meta-llama/Llama-2-7b-hfx: not in the catalog; offline")
    assert line.endswith("(catalog models close to it: meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf, "
                         "meta-llama/Llama-2-13b-hf)")


def test_unknown_model_error_names_where_the_id_came_from() -> None:
    with pytest.raises(InputError, match=r"^--model: unknown model 'gpt-5'"):
        find_model("gpt-5", "--model")


@pytest.mark.parametrize("hf_id", ["mistralai/Mistral-7B-Instruct-v0.3", "meta-llama/Llama-3.1-8B-Instruct",
                                   "meta-llama/Llama-3.3-70B-Instruct", "google/gemma-2-9b-it",
                                   "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "Qwen/Qwen3-32B", "microsoft/phi-4"])
def test_current_open_models_are_in_the_catalog_offline(hf_id: str) -> None:
    # issue 22: these were "unknown model"; the catalog answers without the Hub (tests run offline).
    assert find_model(hf_id).source == "catalog"


def test_an_instruct_variant_has_its_base_architecture_where_their_configs_agree() -> None:
    base, instruct = models()["meta-llama/Llama-3.1-8B"], models()["meta-llama/Llama-3.1-8B-Instruct"]
    assert (base.params_b, base.n_layers, base.n_kv_heads, base.max_context) == (
        instruct.params_b, instruct.n_layers, instruct.n_kv_heads, instruct.max_context)

"""Any Hugging Face model: read from its config.json through huggingface_hub's cache (real configs, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hub_cache import CONFIGS, all_configs, build_cache

from sagellm.catalog import find_model, models
from sagellm.catalog.hub import estimate_params, hub_model, model_from_config
from sagellm.errors import InputError


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Hugging Face cache holds every config kept in hub_configs/; sagellm reads it offline."""
    cache = build_cache(tmp_path / "hub", *all_configs())
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hub_model.cache_clear()
    return cache


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def test_a_model_outside_the_catalog_resolves_from_its_cached_config(hub: Path) -> None:
    m = find_model("Qwen/Qwen3-30B-A3B")

    assert (m.architecture, m.dtype, m.source) == (
        "Qwen3MoeForCausalLM", "bfloat16", "config.json from the Hugging Face Hub (parameters estimated from it)")
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.max_context) == (
        48, 2048, 32, 4, 128, 40960)


def test_an_instruct_config_read_through_the_hub_cache(hub: Path) -> None:
    m = hub_model("meta-llama/Llama-3.2-1B-Instruct")

    assert (m.hf_id, m.architecture, m.dtype) == ("meta-llama/Llama-3.2-1B-Instruct", "LlamaForCausalLM", "bfloat16")
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.max_context) == (
        16, 2048, 32, 8, 64, 131072)
    assert m.params_b == 1.24  # Meta's model card: 1.23B; tied embeddings counted once
    assert (m.n_experts, m.sliding_window, m.gated) == (1, None, False)
    assert m.source.startswith("config.json from the Hugging Face Hub")


def test_head_dim_comes_from_the_config_where_it_is_not_hidden_over_heads(hub: Path) -> None:
    nemo = hub_model("mistralai/Mistral-Nemo-Base-2407")

    assert (nemo.hidden_size // nemo.n_heads, nemo.head_dim) == (160, 128)
    assert nemo.kv_bytes_per_token() == 2 * 40 * 8 * 128 * 2
    assert nemo.max_context == 128000
    assert nemo.params_b == 12.25  # NVIDIA/Mistral: "12B"


def test_sliding_window_and_the_tied_embeddings_gemma_leaves_implicit(hub: Path) -> None:
    gemma = hub_model("google/gemma-2-9b-it")

    assert (gemma.sliding_window, gemma.head_dim, gemma.n_kv_heads) == (4096, 256, 8)
    assert gemma.params_b == 9.24  # Google: 9.24B (the vocabulary of 256k is counted once: tied)


def test_qwen_sliding_window_is_off_unless_the_config_turns_it_on(hub: Path) -> None:
    # Qwen2.5 configs name a window of 131072 with use_sliding_window: false.
    assert hub_model("Qwen/Qwen2.5-14B").sliding_window is None


def test_moe_experts_and_active_parameters(hub: Path) -> None:
    qwen = find_model("Qwen/Qwen3-30B-A3B")

    assert (qwen.n_experts, qwen.experts_per_token) == (128, 8)
    assert qwen.params_b == pytest.approx(30.5, abs=0.1)  # "30.5B in total, 3.3B activated" (Qwen's card)
    assert qwen.active_b == pytest.approx(3.3, abs=0.1)


def test_deepseek_mla_and_its_experts_are_read_from_their_own_names(hub: Path) -> None:
    ds = find_model("deepseek-ai/DeepSeek-V3")

    # DeepSeek's report: "671B total parameters with 37B activated for each token" (the main model; its
    # multi-token-prediction layer is not loaded to serve); tech-report MTP note: 36.6B activated + the 0.9B head.
    assert ds.params_b == pytest.approx(671, abs=1)
    assert ds.active_b == pytest.approx(37.5, abs=0.5)
    assert (ds.n_experts, ds.experts_per_token, ds.quantization) == (256, 8, "fp8")
    # MLA: one 512-wide latent plus a 64-wide rotary key per token and layer, no per-head K and V.
    assert ds.compressed_kv and ds.cached_kv_heads == 1
    assert ds.kv_bytes_per_token() == 61 * (512 + 64) * 2
    assert ds.head_dim == 128 + 64  # a query/key head: no-rope plus rope parts


@pytest.mark.parametrize("name", [n for n in all_configs() if n.replace("__", "/") in models()])
def test_a_config_gives_the_catalog_row_of_the_same_model(name: str) -> None:
    # Catalog rows come from the same config.json files (reference/models.csv, catalog/data/README.md): the
    # two paths agree, parameter counts included (the reference's computed counts for the older rows).
    hf_id = name.replace("__", "/")
    from_config, row = model_from_config(hf_id, config(name)), models()[hf_id]

    for field in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "max_context", "n_experts",
                  "experts_per_token"):
        assert getattr(from_config, field) == getattr(row, field), field
    assert from_config.params_b == pytest.approx(row.params_b, abs=0.01)
    assert from_config.active_b == pytest.approx(row.active_b, abs=0.01)


def test_parameters_count_qkv_and_mlp_per_layer() -> None:
    tiny = {"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "intermediate_size": 16, "vocab_size": 10, "tie_word_embeddings": False}
    # attention 8·4·(2·2 + 2·1) = 192, MLP 3·8·16 = 384 per layer; embeddings and LM head 2·10·8 = 160
    assert estimate_params(tiny) == (round((160 + 2 * (192 + 384)) / 1e9, 2),) * 2


def test_a_catalog_model_is_never_looked_up_on_the_hub(hub: Path) -> None:
    assert find_model("meta-llama/Llama-3.1-8B").source == "catalog"


def test_offline_with_nothing_cached_is_one_line_saying_how_to_fix_it() -> None:
    with pytest.raises(InputError) as exc:
        find_model("Qwen/Qwen2.5-7B-Instruct", "--model")

    [line] = exc.value.messages
    assert line.startswith("--model: Qwen/Qwen2.5-7B-Instruct: not in the catalog; offline "
                           "(HF_HUB_OFFLINE or --offline) and its config.json is not in the Hugging Face cache")
    assert "catalog models close to it: Qwen/Qwen2.5-7B" in line


def test_a_config_that_is_not_a_decoder_llm_says_which_field_is_missing() -> None:
    with pytest.raises(InputError, match=r"^org/vision: its config.json has no 'hidden_size'"):
        model_from_config("org/vision", {"architectures": ["ViTModel"], "image_size": 224})


def _raising(name: str):
    """hf_hub_download as it fails when the Hub refuses (the error built without the HTTP response it carries,
    whose class changes with the huggingface_hub version)."""
    from huggingface_hub import errors

    cls = getattr(errors, name)
    error = cls.__new__(cls)
    Exception.__init__(error, "refused")

    def download(*args: object, **kwargs: object) -> str:
        raise error
    return download


@pytest.mark.parametrize(("error", "says"), [
    ("GatedRepoError", "is gated on the Hugging Face Hub: accept its licence on huggingface.co/org/model"),
    ("RepositoryNotFoundError", "is neither in the catalog (`sagellm models`) nor on the Hugging Face Hub"),
    ("EntryNotFoundError", "the repository has no config.json"),
    ("LocalEntryNotFoundError", "the Hugging Face Hub is unreachable and its config.json is not cached"),
])
def test_hub_refusals_are_one_line_each(error: str, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Hub is out of reach here: its answers are raised as huggingface_hub raises them, online.
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _raising(error))

    with pytest.raises(InputError) as exc:
        find_model("org/model", "model")

    [line] = exc.value.messages
    assert line.startswith("model: org/model") and says in line


def _recording_download(calls: list[dict], path: Path | None = None):
    """hf_hub_download that records how it was asked, then serves `path` or misses the cache as offline."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    def download(*args: object, **kwargs: object) -> str:
        calls.append(kwargs)
        if path is None:
            raise LocalEntryNotFoundError("not cached")
        return str(path)
    return download


def test_a_hub_whose_name_does_not_resolve_is_read_from_the_cache_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without this, huggingface_hub retries an unresolvable name five times (24 s) before the same answer.
    import socket

    import huggingface_hub

    def no_dns(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(-2, "Name or service not known")

    calls: list[dict] = []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recording_download(calls))
    hub_model.cache_clear()

    with pytest.raises(InputError) as exc:
        find_model("org/model", "model")

    assert [c["local_files_only"] for c in calls] == [True]
    [line] = exc.value.messages
    assert "the Hugging Face Hub is unreachable and its config.json is not cached" in line


def test_behind_a_proxy_the_name_is_left_to_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import huggingface_hub

    def must_not_resolve(*args: object, **kwargs: object) -> None:
        raise AssertionError("resolved the Hub's name locally behind a proxy")

    calls: list[dict] = []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setattr(socket, "getaddrinfo", must_not_resolve)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recording_download(calls))
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, hf_id: type("Info", (), {"gated": False}))
    hub_model.cache_clear()

    with pytest.raises(InputError):
        find_model("org/model", "model")

    assert [c["local_files_only"] for c in calls] == [False]


def test_a_gated_hub_model_is_known_gated_online_and_remembered_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A gated model read from the Hub needs HF_TOKEN in its container too: the plan must know it is gated.
    import huggingface_hub

    from sagellm.catalog import hub

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config(next(iter(c.stem for c in CONFIGS.glob("*.json"))))), encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hub, "_hub_resolves", lambda: True)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _recording_download([], cfg))
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info",
                        lambda self, hf_id: type("Info", (), {"gated": "manual" if hf_id == "org/gated" else False}))
    hub_model.cache_clear()

    assert hub_model("org/gated").gated and not hub_model("org/open").gated

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_model.cache_clear()
    assert hub_model("org/gated").gated and not hub_model("org/open").gated
    assert json.loads((tmp_path / "cache" / "sagellm" / "hub-gated.json").read_text()) == {
        "org/gated": True, "org/open": False}


def test_a_pre_quantized_checkpoint_says_how_its_weights_are_stored() -> None:
    tiny = {"hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10,
            "max_position_embeddings": 64}
    assert model_from_config("a/plain", tiny).quantization is None
    # quantization_config as transformers writes it (a GPTQ export; a 4-bit bitsandbytes one).
    gptq = {**tiny, "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "gptq"}}
    assert model_from_config("a/gptq", gptq).quantization == "gptq"
    nf4 = {**tiny, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                           "bnb_4bit_quant_type": "nf4"}}
    assert model_from_config("a/nf4", nf4).quantization == "bitsandbytes-nf4"  # TGI's name for it; not 8-bit

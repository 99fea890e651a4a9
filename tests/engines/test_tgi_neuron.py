"""TGI on Inferentia2 (optimum-neuron): its own image, a compiled static shape; and the lookup that finds it."""

import json
from dataclasses import replace
from importlib import resources

import pytest

from sagellm.catalog import models
from sagellm.engines import CompiledShape, Settings, engine_for
from sagellm.engines.lmi import LMI
from sagellm.engines.tgi import TGI
from sagellm.engines.tgi_neuron import TGI_NEURON, compiled_table, core_use
from sagellm.errors import InputError

# Llama 3.1 8B is compiled for batch 8 × 4096 tokens on 2 cores (one chip) and batch 16 on 8 cores.
SETTINGS = Settings(model_id="meta-llama/Llama-3.1-8B", version="3.3.6", tensor_parallel=1, quantization="none",
                    max_input_tokens=3840, max_total_tokens=4096, max_batch_prefill_tokens=30720,
                    max_concurrent_requests=32, max_batch_size=8)


def test_environment_writes_the_compiled_shape_cores_batch_and_cast_type() -> None:
    env = TGI_NEURON.environment(SETTINGS)
    # MODEL_ID too: the 3.3.6 neuron image has no SageMaker entrypoint copying HF_MODEL_ID over it.
    assert env == TGI.environment(SETTINGS) | {"MODEL_ID": "meta-llama/Llama-3.1-8B", "HF_NUM_CORES": "2",
                                               "HF_AUTO_CAST_TYPE": "bf16", "MAX_BATCH_SIZE": "8"}
    four_chips = TGI_NEURON.environment(replace(SETTINGS, tensor_parallel=4, max_batch_size=16))
    assert (four_chips["HF_NUM_CORES"], four_chips["MAX_BATCH_SIZE"]) == ("8", "16")


@pytest.mark.parametrize("change", [{"max_batch_size": 256}, {"max_total_tokens": 8192}, {"tensor_parallel": 2},
                                    {"model_id": "Qwen/Qwen2.5-7B"}])
def test_a_shape_the_neuron_cache_lacks_is_never_written(change: dict) -> None:
    with pytest.raises(InputError, match="no compiled model of batch"):
        TGI_NEURON.environment(replace(SETTINGS, **change))


def test_the_limits_are_the_compiled_batch_of_whole_sequences() -> None:
    # The warm-up reports batch × sequence length as the KV budget (generator.py `warmup`), not free memory.
    env = {"MAX_BATCH_SIZE": "4", "MAX_TOTAL_TOKENS": "4096", "MAX_INPUT_TOKENS": "3840"}
    limits = TGI_NEURON.limits("0.3.0", env, 1_000_000, 131072)
    assert (limits.max_batch_size, limits.max_total_tokens, limits.max_batch_total_tokens) == (4, 4096, 4 * 4096)
    # The entry point's default prefill budget: batch × max input tokens.
    assert limits.max_batch_prefill_tokens == 4 * 3840
    assert not TGI_NEURON.chunks_prefill(TGI.pinned, None)
    assert TGI_NEURON.image_version(TGI.pinned) == "0.3.0"


def test_the_compiled_table_names_catalog_models_and_whole_shapes() -> None:
    raw = json.loads(resources.files("sagellm.engines").joinpath("data", "neuron-compiled.json").read_text())
    assert raw["source"] and raw["image"].startswith("huggingface-llm-neuronx 0.3.0")
    table = compiled_table()
    assert set(table) <= set(models())
    for shapes in table.values():
        assert shapes and all(isinstance(s, CompiledShape) and s.num_cores % 2 == 0 and s.sequence_length > 1
                              and s.auto_cast_type in ("bf16", "fp16") for s in shapes)
    assert CompiledShape(8, 4096, 2, "bf16").describe() == "batch 8 × 4096 tokens on 2 cores (bf16)"


def test_the_lookup_finds_the_engine_of_a_kind_on_each_accelerator() -> None:
    assert (engine_for("tgi"), engine_for("lmi"), engine_for("tgi", neuron=True)) == (TGI, LMI, TGI_NEURON)
    assert TGI.compiled_shapes("meta-llama/Llama-3.1-8B") is None  # a GPU batches dynamically
    with pytest.raises(InputError, match="no 'lmi' engine on Inferentia"):
        engine_for("lmi", neuron=True)


def test_the_core_note_says_how_many_neuron_cores_serve_and_why_not_all() -> None:
    assert core_use("ml.inf2.24xlarge", 6, "meta-llama/Llama-3.1-8B", [(1, 6)]) == (
        "NeuronCores: all 12 of ml.inf2.24xlarge used (6 × 2 cores)")
    assert core_use("ml.inf2.48xlarge", 12, "meta-llama/Llama-3.1-8B", [(4, 1)]) == (
        "NeuronCores: 8 of the 24 of ml.inf2.48xlarge used (1 × 8 cores): the neuron cache holds "
        "meta-llama/Llama-3.1-8B compiled for 2 and 8 cores here, and a container serves one copy compiled for "
        "exactly its HF_NUM_CORES; inference components (the replicas profile) run 12 copies of 2 cores")
    assert core_use("ml.inf2.24xlarge", 6, "Qwen/Qwen2.5-14B", [(4, 1)]).endswith(
        "compiled for 8 cores here, and a container serves one copy compiled for exactly its HF_NUM_CORES; no "
        "compiled shape of Qwen/Qwen2.5-14B fills the other 4")


def test_inferentia_plans_get_the_maintainers_startup_timeout_and_neuron_ami() -> None:
    # awslabs/llm-hosting-container tests/huggingface/sagemaker_dlc_test.py deploys this image on ml.inf2 with
    # container_startup_health_check_timeout=1800 and inference_ami_version=al2-ami-sagemaker-inference-neuron-2.
    assert (TGI_NEURON.min_startup_timeout_s, TGI_NEURON.inference_ami_version) == (
        1800, "al2-ami-sagemaker-inference-neuron-2")
    assert (TGI.min_startup_timeout_s, TGI.inference_ami_version) == (0, None)

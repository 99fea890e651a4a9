"""TGI on Inferentia2 (optimum-neuron): its own image, a compiled static batch; and the lookup that finds it."""

from dataclasses import replace

import pytest

from sagellm.engines import Settings, engine_for
from sagellm.engines.lmi import LMI
from sagellm.engines.tgi import TGI
from sagellm.engines.tgi_neuron import TGI_NEURON
from sagellm.errors import InputError

SETTINGS = Settings(model_id="meta-llama/Llama-2-7b-hf", version="3.3.6", tensor_parallel=2, quantization="none",
                    max_input_tokens=3072, max_total_tokens=4096, max_batch_prefill_tokens=4096,
                    max_concurrent_requests=16, max_batch_size=None)


def test_environment_adds_the_cores_and_batch_the_model_is_compiled_for() -> None:
    env = TGI_NEURON.environment(SETTINGS)
    assert env == TGI.environment(SETTINGS) | {"HF_NUM_CORES": "4", "HF_AUTO_CAST_TYPE": "bf16",
                                               "MAX_BATCH_SIZE": "16"}
    assert TGI_NEURON.environment(replace(SETTINGS, max_batch_size=4))["MAX_BATCH_SIZE"] == "4"


def test_the_batch_is_static_and_the_image_is_the_pinned_optimum_neuron_build() -> None:
    assert TGI_NEURON.limits("0.3.0", {"MAX_BATCH_SIZE": "4"}, 10_000, 4096).max_batch_size == 4
    assert not TGI_NEURON.chunks_prefill(TGI.pinned, None)
    assert TGI_NEURON.image_version(TGI.pinned) == "0.3.0"


def test_the_lookup_finds_the_engine_of_a_kind_on_each_accelerator() -> None:
    assert (engine_for("tgi"), engine_for("lmi"), engine_for("tgi", neuron=True)) == (TGI, LMI, TGI_NEURON)
    with pytest.raises(InputError, match="no 'lmi' engine on Inferentia"):
        engine_for("lmi", neuron=True)

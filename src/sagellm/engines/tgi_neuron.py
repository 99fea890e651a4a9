"""Hugging Face TGI on AWS Inferentia2: optimum-neuron's build of TGI 3.3.6 (image 0.3.0).

optimum-neuron compiles a model ahead of time for one static shape — batch size, sequence length, NeuronCore
count, cast type — and the server runs exactly that shape. TGI's neuron entry point (text-generation-inference
v3.3.6, backends/neuron/tgi_entry_point.py) skips its lookup of cached configurations when HF_NUM_CORES,
HF_AUTO_CAST_TYPE, MAX_BATCH_SIZE, MAX_TOTAL_TOKENS, MAX_INPUT_TOKENS and MAX_BATCH_PREFILL_TOKENS are all
set (tgi_env.py `tgi_env_vars`), which the plan always does; the server then exports the model with exactly
those values (model.py `get_export_kwargs_from_env`) and stops with "No cached version found" unless the
neuron cache holds a compatible compiled configuration (`is_cached`). So the plan writes only a shape the
cache holds for that model (data/neuron-compiled.json): MAX_BATCH_SIZE = its batch, MAX_TOTAL_TOKENS = its
sequence length, HF_NUM_CORES and HF_AUTO_CAST_TYPE as compiled, MAX_INPUT_TOKENS below the sequence length
(`check_env_and_neuron_config_compatibility`). The server batches statically and never chunks prefills; its
warm-up reports batch × sequence length as the KV budget (generator.py `warmup`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources

from sagellm.engines.engine import CompiledShape, Limits, Settings
from sagellm.engines.tgi import Tgi
from sagellm.errors import InputError

IMAGE_VERSION = "0.3.0"  # tag 2.7.0-optimum3.3.6
FRAMEWORK = "huggingface-llm-neuronx"
CORES_PER_CHIP = 2  # NeuronCores per Inferentia2 chip


@cache
def compiled_table() -> dict[str, tuple[CompiledShape, ...]]:
    """Model id → the shapes the neuron cache holds compiled for the pinned image (data/neuron-compiled.json)."""
    text = resources.files("sagellm.engines").joinpath("data", "neuron-compiled.json").read_text()
    return {model_id: tuple(CompiledShape(**shape) for shape in entry["shapes"])
            for model_id, entry in json.loads(text)["models"].items()}


class TgiNeuron(Tgi):
    """TGI on Inferentia2: TGI's variables and wire format, a compiled static shape, its own image."""

    label = "TGI (Neuron)"
    framework = FRAMEWORK

    def image_version(self, version: str) -> str:
        """Always the pinned optimum-neuron image (its TGI version is fixed by the build)."""
        return IMAGE_VERSION

    def compiled_shapes(self, model_id: str) -> tuple[CompiledShape, ...]:
        """The shapes the neuron cache holds for `model_id` (none: it cannot start from the cache)."""
        return compiled_table().get(model_id, ())

    def compiled_kv_tokens(self, max_batch_size: int | None, max_total_tokens: int) -> int:
        """The compiled batch × sequence length: every slot holds one whole sequence."""
        return (max_batch_size or 1) * max_total_tokens

    def environment(self, s: Settings) -> dict[str, str]:
        """TGI's variables, and the compiled shape's batch, core count and cast type."""
        cores = CORES_PER_CHIP * s.tensor_parallel
        shape = next((c for c in self.compiled_shapes(s.model_id) if (c.num_cores, c.batch_size, c.sequence_length)
                      == (cores, s.max_batch_size, s.max_total_tokens)), None)
        if shape is None:  # resolve() refuses such a plan first; this guards a plan built by hand
            raise InputError(f"{s.model_id}: no compiled model of batch {s.max_batch_size} × {s.max_total_tokens} "
                             f"tokens on {cores} NeuronCores in the neuron cache; see docs/containers.md")
        return super().environment(s) | {
            "HF_NUM_CORES": str(cores), "HF_AUTO_CAST_TYPE": shape.auto_cast_type,
            "MAX_BATCH_SIZE": str(shape.batch_size)}

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """Never: the compiled batch takes whole prompts."""
        return False

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """The compiled shape: MAX_BATCH_SIZE slots of MAX_TOTAL_TOKENS each, whatever memory is left."""
        limits = self._limits(env, kv_tokens, context, launcher_3=False)
        kv = self.compiled_kv_tokens(limits.max_batch_size, limits.max_total_tokens)
        return replace(limits, max_batch_total_tokens=kv, max_batch_size=limits.max_batch_size or 1)


TGI_NEURON = TgiNeuron()

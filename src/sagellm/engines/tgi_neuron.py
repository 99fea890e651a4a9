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

The SageMaker image (awslabs/llm-hosting-container huggingface/pytorch/optimum/docker/3.3.6/Dockerfile) runs
that entry point and then `text-generation-launcher --port 8080` itself: no sagemaker-entrypoint.sh copies
HF_MODEL_ID to MODEL_ID any more, and the entry point stops with "No model id provided" without MODEL_ID, so
the plan writes both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from importlib import resources

from sagellm.catalog import instances
from sagellm.engines import images
from sagellm.engines.engine import CompiledShape, InferenceAmiVersion, Limits, Settings
from sagellm.engines.tgi import Tgi
from sagellm.errors import InputError

IMAGE_VERSION = "0.3.0"  # tag 2.7.0-optimum3.3.6
FRAMEWORK = "huggingface-llm-neuronx"
CORES_PER_CHIP = 2  # NeuronCores per Inferentia2 chip
# The image maintainers' own SageMaker test of this image on ml.inf2 (awslabs/llm-hosting-container
# tests/huggingface/sagemaker_dlc_test.py, commit 3911d06b): container_startup_health_check_timeout=1800 and
# inference_ami_version="al2-ami-sagemaker-inference-neuron-2" (the AMI with Neuron driver 2.19, added for
# the TGI 3.3.x neuron images in #156). Loading a compiled model from the cache takes longer than a GPU load.
STARTUP_TIMEOUT_S = 1800
# The compiled models the server looks up as it starts, on the Hub: a model folder without a neuron export (a plain
# snapshot, e.g. weights staged in S3 at /opt/ml/model) is exported from this cache, and `is_cached` first lists the
# repository's registry and matches the folder's config.json against it (TGI v3.3.6
# backends/neuron/server/text_generation_server/model.py `fetch_model`; optimum-neuron cache/hub_cache.py
# `get_hub_cached_entries`, `HfApi.list_repo_files`). Only a folder holding a neuron export skips it.
NEURON_CACHE_REPO = "aws-neuron/optimum-neuron-cache"
INFERENCE_AMI_VERSION: InferenceAmiVersion = "al2-ami-sagemaker-inference-neuron-2"


@cache
def compiled_table() -> dict[str, tuple[CompiledShape, ...]]:
    """Model id → the shapes the neuron cache holds compiled for the pinned image (data/neuron-compiled.json)."""
    text = resources.files("sagellm.engines").joinpath("data", images.COMPILED_SHAPES).read_text()
    return {model_id: tuple(CompiledShape(**shape) for shape in entry["shapes"])
            for model_id, entry in json.loads(text)["models"].items()}


def core_use(instance_type: str, chips: int, model_id: str, copies: Sequence[tuple[int, int]]) -> str:
    """How many of an Inferentia instance's NeuronCores a plan's copies — (chips per copy, copies) each, the
    main model first — use, and why not all: a container runs one copy compiled for a fixed core count."""
    total = CORES_PER_CHIP * chips
    used = sum(CORES_PER_CHIP * tp * n for tp, n in copies)
    split = " + ".join(f"{n} × {CORES_PER_CHIP * tp} cores" for tp, n in copies)
    if used >= total:
        return f"NeuronCores: all {total} of {instance_type} used ({split})"
    compiled = [n for n in sorted({c.num_cores for c in compiled_table().get(model_id, ())}) if n <= total]
    listed = " and ".join(filter(None, (", ".join(map(str, compiled[:-1])), str(compiled[-1]))))
    fewest = compiled[0]
    more = (f"inference components (the replicas profile) run {total // fewest} copies of {fewest} cores"
            if total // fewest * fewest > used else f"no compiled shape of {model_id} fills the other {total - used}")
    return (f"NeuronCores: {used} of the {total} of {instance_type} used ({split}): the neuron cache holds "
            f"{model_id} compiled for {listed} cores here, and a container serves one copy compiled for exactly "
            f"its HF_NUM_CORES; {more}")


class TgiNeuron(Tgi):
    """TGI on Inferentia2: TGI's variables and wire format, a compiled static shape, its own image."""

    label = "TGI (Neuron)"
    # huggingface/text-generation-inference README, 2025-12-11: "in maintenance mode" (docs/containers.md).
    unmaintained = "upstream TGI has been in maintenance mode since 2025-12-11"
    framework = FRAMEWORK
    # The Hugging Face SDK retrieves huggingface-llm-neuronx with inference_tool="neuronx"
    # (get_huggingface_llm_image_uri) and image_uris._format_tag writes `<prefix>-neuronx-py310-…`: the table
    # alone would give `…-inf2-…` (scripts/refresh_image_tables.py records it in the table).
    inference_tool = "neuronx"
    gpu = False
    model_id_variables = ("MODEL_ID", "HF_MODEL_ID")
    min_startup_timeout_s = STARTUP_TIMEOUT_S
    inference_ami_version = INFERENCE_AMI_VERSION
    hub_at_start = NEURON_CACHE_REPO

    def image_version(self, version: str) -> str:
        """Always the pinned optimum-neuron image (its TGI version is fixed by the build)."""
        return IMAGE_VERSION

    def compiled_shapes(self, model_id: str) -> tuple[CompiledShape, ...]:
        """The shapes the neuron cache holds for `model_id` (none: it cannot start from the cache)."""
        return compiled_table().get(model_id, ())

    def compiled_for(self, model_id: str, tp: int, batch_size: int | None = None,
                     sequence_length: int | None = None) -> tuple[CompiledShape, ...]:
        """The cached shapes of `model_id` on `tp` chips' NeuronCores (of that batch and length where given)."""
        return tuple(c for c in self.compiled_shapes(model_id) if c.num_cores == CORES_PER_CHIP * tp
                     and batch_size in (None, c.batch_size) and sequence_length in (None, c.sequence_length))

    def accelerator_units(self, tp: int) -> str:
        """`tp` chips as NeuronCores."""
        return f"{CORES_PER_CHIP * tp} NeuronCores"

    def uncompiled(self, model_id: str, instance_type: str, chips: int, tp: int | None, where_instance: str,
                   where_tp: str) -> str:
        """The neuron cache has no compiled model for `model_id` at `tp` (None: at any TP the instance's `chips`
        allow): what it has, and where that runs."""
        shapes = self.compiled_shapes(model_id)
        if not shapes:
            return (f"{where_instance}: {model_id} has no compiled model in the neuron cache of the pinned Inferentia "
                    f"image (optimum-neuron {IMAGE_VERSION}), so its server would stop with 'No cached version "
                    "found'; use a GPU instance type, or container kind vllm-neuronx, which compiles a model of the "
                    "architectures it serves at start-up (docs/containers.md lists the models compiled for Inferentia)")
        compiled = "; ".join(c.describe() for c in shapes)
        runs = []
        for need in sorted({c.num_cores // CORES_PER_CHIP for c in shapes}):
            names = [i.instance_type for i in instances().values() if i.is_neuron and i.n_accelerators >= need]
            runs.append(f"tensor_parallel {need} on {' or '.join(names)}")
        if tp is None:
            place = (f"{where_instance}: {model_id} has no compiled model in the neuron cache that fits the {chips} "
                     f"chip(s) of {instance_type}")
        else:
            place = (f"{where_tp}: {tp}: {model_id} has no compiled model for {CORES_PER_CHIP * tp} NeuronCores in "
                     "the neuron cache")
        return f"{place} (compiled: {compiled}); use {'; '.join(runs)}"

    def core_notes(self, instance_type: str, chips: int, model_id: str,
                   copies: Sequence[tuple[int, int]]) -> tuple[str, ...]:
        """How many of the instance's NeuronCores the copies use, and why not all."""
        return (core_use(instance_type, chips, model_id, copies),)

    def compiled_kv_tokens(self, max_batch_size: int | None, max_total_tokens: int) -> int:
        """The compiled batch × sequence length: every slot holds one whole sequence."""
        return (max_batch_size or 1) * max_total_tokens

    def environment(self, s: Settings) -> dict[str, str]:
        """TGI's variables, MODEL_ID beside HF_MODEL_ID, and the compiled shape's batch, core count and cast type."""
        cores = CORES_PER_CHIP * s.tensor_parallel
        shape = next((c for c in self.compiled_shapes(s.model_id) if (c.num_cores, c.batch_size, c.sequence_length)
                      == (cores, s.max_batch_size, s.max_total_tokens)), None)
        if shape is None:  # resolve() refuses such a plan first; this guards a plan built by hand
            raise InputError(f"{s.model_id}: no compiled model of batch {s.max_batch_size} × {s.max_total_tokens} "
                             f"tokens on {cores} NeuronCores in the neuron cache; see docs/containers.md")
        return super().environment(s) | {
            "MODEL_ID": s.model_id,  # what the entry point and the launcher read (no SageMaker entrypoint maps it)
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

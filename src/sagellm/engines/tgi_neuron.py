"""Hugging Face TGI on AWS Inferentia2: optimum-neuron's build of TGI 3.3.6 (image 0.3.0).

optimum-neuron compiles the model for a fixed batch size and NeuronCore count, so the plan writes both,
and the server batches statically: it honours MAX_BATCH_SIZE and never chunks prefills. With
MAX_BATCH_SIZE, MAX_TOTAL_TOKENS, HF_NUM_CORES and HF_AUTO_CAST_TYPE all set, TGI's neuron entry point skips
its lookup of cached configurations (text-generation-inference v3.3.6, backends/neuron/tgi_env.py `main`)
and loads the compiled model of exactly that batch size, so the plan's batch is one the neuron cache
publishes; requests beyond it wait in TGI's queue.
"""

from __future__ import annotations

from sagellm.engines.engine import Limits, Settings
from sagellm.engines.tgi import Tgi

IMAGE_VERSION = "0.3.0"  # tag 2.7.0-optimum3.3.6
FRAMEWORK = "huggingface-llm-neuronx"
CORES_PER_CHIP = 2  # NeuronCores per Inferentia2 chip
# Batch sizes of the compiled configurations optimum-neuron's public cache (aws-neuron/optimum-neuron-cache)
# holds for the catalog's decoder models: 1 to 32 (`optimum-cli neuron cache lookup <model id>` lists them).
COMPILED_BATCH_SIZES = (1, 4, 8, 16, 32)


class TgiNeuron(Tgi):
    """TGI on Inferentia2: TGI's variables and wire format, a static batch, its own image."""

    label = "TGI (Neuron)"
    framework = FRAMEWORK
    compiled_batch_sizes = COMPILED_BATCH_SIZES

    def image_version(self, version: str) -> str:
        """Always the pinned optimum-neuron image (its TGI version is fixed by the build)."""
        return IMAGE_VERSION

    def environment(self, s: Settings) -> dict[str, str]:
        """TGI's variables, and the batch and core count the model is compiled for (the plan's batch is one
        of `COMPILED_BATCH_SIZES`)."""
        return super().environment(s) | {
            "HF_NUM_CORES": str(CORES_PER_CHIP * s.tensor_parallel), "HF_AUTO_CAST_TYPE": "bf16",
            "MAX_BATCH_SIZE": str(s.max_batch_size or s.max_concurrent_requests)}

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """Never: the compiled batch takes whole prompts."""
        return False

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """A static batch: MAX_BATCH_SIZE holds, no prefill chunking (the plan writes every other limit)."""
        return self._limits(env, kv_tokens, context, launcher_3=False)


TGI_NEURON = TgiNeuron()

"""Hugging Face's vLLM image for Inferentia2 (`huggingface-vllm-neuronx`): vLLM 0.11's OpenAI server on
optimum-neuron 0.4's vLLM platform, which compiles the shape the plan names when the neuron cache lacks it.

The image (huggingface/optimum-neuron v0.4.4, commit f4bc3c5c, docker/vllm/Dockerfile) writes an `entrypoint.sh`
that turns every `SM_ON_*` variable into a flag of `optimum-cli neuron serve`: `--port 8080`, then the name after
the prefix in lower case (underscores kept: `SM_ON_BATCH_SIZE` → `--batch_size`), then the value unless it is
empty. The serve command (optimum/commands/neuron/serve.py at the same commit) reads `--model`,
`--tensor_parallel_size` (NeuronCores), `--batch_size`, `--sequence_length` and `--allow_non_cached_model`, looks
for a cached configuration of exactly those values (`select_hub_cached_entries`; inf2 counts as `trn1`), and
without one stops with "No cached version found" unless `--allow_non_cached_model` is given; it then starts
vLLM's server with `--tensor-parallel-size`, `--max-num-seqs` = the batch, `--max-model-len` = the sequence length.
The model (optimum/neuron/vllm, AGENTS.md) serves a static batch with continuous batching into its KV slots.
Sources and the per-variable table in docs/containers.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from sagellm.catalog import models
from sagellm.engines.engine import CompiledShape, Generation, InferenceAmiVersion, Limits, Settings, read_int
from sagellm.engines.openai_server import CHAT, COMPLETIONS, OpenAiServer, variable_for
from sagellm.engines.tgi_neuron import CORES_PER_CHIP, INFERENCE_AMI_VERSION, NEURON_CACHE_REPO
from sagellm.engines.vllm import COUNTERS, HISTOGRAMS

PINNED = "0.4.4"  # the newest huggingface-vllm-neuronx image in sagemaker-core 2.27.0's tables (vLLM 0.11.0)
FRAMEWORK = "huggingface-vllm-neuronx"
# The oldest image on vLLM 0.11 (0.4.1 runs 0.10.2); its entrypoint and serve options take what a plan sets as
# 0.4.4's do (huggingface/optimum-neuron v0.4.2..v0.4.4 added only the dashed option aliases and argument pass-through).
OLDEST = (0, 4, 2)
PREFIX = "SM_ON_"
# Compiling a shape the cache lacks runs inside the container's start-up: "30-60 minutes for large models"
# (optimum-neuron v0.4.4 docs/source/guides/cache_system.mdx), and 3600 s is SageMaker's largest
# ContainerStartupHealthCheckTimeoutInSeconds (its own SageMaker notebooks give a 70B model 3600 s).
STARTUP_TIMEOUT_S = 3600
# The shapes a plan asks it to compile: the batch sizes and sequence lengths optimum-neuron's cache configurations
# use (engines/data/neuron-compiled.json lists those of 0.3.0). It compiles any shape; these keep a plan's static
# batch × sequence length where its Inferentia memory holds it (resolve picks the largest batch its admission allows).
BATCH_SIZES = (1, 4, 8, 16, 32)
SEQUENCE_LENGTHS = (2048, 4096)
AUTO_CAST_TYPE = "bf16"  # serve.py's dtype when the model's config names none
# The text-generation model types optimum-neuron 0.4.4 registers (optimum/neuron/models/inference/auto_models.py),
# as their transformers classes (config.json `architectures`).
SERVED = ("GraniteForCausalLM", "LlamaForCausalLM", "Llama4ForCausalLM", "Llama4ForConditionalGeneration",
          "MixtralForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
          "SmolLM3ForCausalLM")
# The catalog's checkpoints by family, with the class their config.json names (the catalog records none).
CATALOG_ARCHITECTURES = {
    "meta-llama/": "LlamaForCausalLM", "deepseek-ai/DeepSeek-R1-Distill-Llama-": "LlamaForCausalLM",
    "Qwen/Qwen2.5-": "Qwen2ForCausalLM", "Qwen/Qwen3-": "Qwen3ForCausalLM", "mistralai/Mixtral-": "MixtralForCausalLM",
    "microsoft/Phi-3": "Phi3ForCausalLM", "microsoft/phi-4": "Phi3ForCausalLM", "mistralai/Mistral-": "MistralForCausalLM",
    "google/gemma-2-": "Gemma2ForCausalLM", "google/gemma-3-": "Gemma3ForConditionalGeneration",
    "tiiuae/falcon-": "FalconForCausalLM",
}

# vLLM V1's scheduler over a static compiled batch: waiting prompts join free slots at every step. No measurement
# of it on Inferentia exists here: it borrows TGI 1.x's fitted step constants, as the other unmeasured engines do.
GENERATION = Generation("vllm-neuronx", "vLLM 0.11 on optimum-neuron 0.4 (Inferentia2)", "tgi-1",
                        waiting_served_ratio=0.0)


def architecture(model_id: str) -> str | None:
    """The transformers class of a model: the catalog's record, else its family's; None: unknown."""
    model = models().get(model_id)
    if model is not None and model.architecture:
        return model.architecture
    return next((arch for prefix, arch in CATALOG_ARCHITECTURES.items() if model_id.startswith(prefix)), None)


class VllmNeuronx(OpenAiServer):
    """vLLM on Inferentia2: OpenAI's wire and vLLM's metrics, a static batch compiled for every NeuronCore."""

    kind = "vllm-neuronx"
    label = "vLLM (Neuron)"
    framework = FRAMEWORK
    # Its tag names the tool in the processor's place, as the SDK's _format_tag does (the table's processor is
    # `neuronx` too), and the SDK appends the Neuron SDK version for this repository (images.tag).
    inference_tool = "neuronx"
    gpu = False
    pinned = PINNED
    oldest = OLDEST
    prefix = PREFIX
    # serve.py's own flags, underscores as the entrypoint writes them; it has none for quantization or a prefill
    # budget (vLLM on Neuron prefills a whole prompt on the context-encoding graph).
    flags: ClassVar[dict[str, str]] = {
        "model_id": "--model",
        "tensor_parallel": "--tensor_parallel_size",
        "max_total_tokens": "--sequence_length",
        "max_batch_size": "--batch_size",
    }
    extra_flags = (("served model name", "--served_model_name"),)
    # An empty value is the bare flag: compile the plan's shape at start-up when the cache lacks it.
    always: ClassVar[dict[str, str]] = {"--allow_non_cached_model": ""}
    quantizations = frozenset[str]()  # serve.py has no quantization flag: the compiled graph holds the weights' dtype
    reads = frozenset({"HF_TOKEN"})
    generation_ = GENERATION
    default_running = 1  # serve.py's batch without a cached entry
    min_startup_timeout_s = STARTUP_TIMEOUT_S
    # The one Neuron host AMI a production variant may name (the TGI neuron image's, with the newer driver).
    inference_ami_version: InferenceAmiVersion | None = INFERENCE_AMI_VERSION
    # A model folder without a neuron export (a plain snapshot, e.g. weights staged in S3) makes serve.py, and again
    # vLLM's model loader, call `select_hub_cached_entries`, which lists this Hub repository (`HfApi.list_repo_files`)
    # with nothing to catch a failure; HF_HUB_OFFLINE=1 only makes that call raise OfflineModeIsEnabled, and
    # CUSTOM_CACHE_REPO / HF_ENDPOINT only name another Hub (optimum-neuron v0.4.4, f4bc3c5c:
    # optimum/commands/neuron/serve.py `run`, optimum/neuron/vllm/model_loader.py `get_optimum_neuron_model`,
    # optimum/neuron/cache/hub_cache.py `get_hub_cached_entries`). No variable keeps it offline, so network isolation
    # stays off by default: an isolated container would stop before serving.
    hub_at_start = NEURON_CACHE_REPO
    invocations = (CHAT, COMPLETIONS)
    sagemaker_api = "openai"
    histograms: ClassVar[dict[str, tuple[str, ...]]] = HISTOGRAMS  # vLLM 0.11's own server
    counters: ClassVar[dict[str, tuple[str, ...]]] = COUNTERS

    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """Never: the context-encoding graph takes whole prompts."""
        return False

    def environment(self, s: Settings) -> dict[str, str]:
        """The model, every NeuronCore of the copy's chips, and the batch and sequence length to compile."""
        values = {"model_id": s.model_id, "tensor_parallel": str(CORES_PER_CHIP * s.tensor_parallel),
                  "max_total_tokens": str(s.max_total_tokens),
                  "max_batch_size": str(s.max_batch_size or s.max_concurrent_requests)}
        env = {variable_for(self.prefix, self.flags[field]): value for field, value in values.items()}
        return env | {variable_for(self.prefix, flag): value for flag, value in self.always.items()}

    def compiled_for(self, model_id: str, tp: int, batch_size: int | None = None,
                     sequence_length: int | None = None) -> tuple[CompiledShape, ...]:
        """The shapes a plan may ask it to compile on `tp` chips' NeuronCores (of that batch and length if given);
        none for an architecture optimum-neuron does not serve (an unknown one may be tried)."""
        if architecture(model_id) not in (None, *SERVED):
            return ()
        return tuple(CompiledShape(b, n, CORES_PER_CHIP * tp, AUTO_CAST_TYPE) for n in SEQUENCE_LENGTHS
                     for b in BATCH_SIZES if batch_size in (None, b) and sequence_length in (None, n))

    def uncompiled(self, model_id: str, instance_type: str, chips: int, tp: int | None, where_instance: str,
                   where_tp: str) -> str:
        """optimum-neuron 0.4.4 has no model of this architecture."""
        served = ", ".join(a.removesuffix("ForCausalLM") for a in SERVED if a.endswith("ForCausalLM"))
        return (f"{where_instance}: {model_id} is a {architecture(model_id)}, which optimum-neuron {PINNED} does not "
                f"serve on Inferentia (it serves {served}); use a GPU instance type and another engine")

    def accelerator_units(self, tp: int) -> str:
        """`tp` chips as NeuronCores."""
        return f"{CORES_PER_CHIP * tp} NeuronCores"

    def core_notes(self, instance_type: str, chips: int, model_id: str,
                   copies: Sequence[tuple[int, int]]) -> tuple[str, ...]:
        """How many of the instance's NeuronCores the copies use."""
        total, used = CORES_PER_CHIP * chips, sum(CORES_PER_CHIP * tp * n for tp, n in copies)
        split = " + ".join(f"{n} × {CORES_PER_CHIP * tp} cores" for tp, n in copies)
        note = (f"NeuronCores: {used} of the {total} of {instance_type} used ({split}); the image compiles the plan's "
                "batch and sequence length for them at start-up unless the neuron cache holds that shape")
        return (note,)

    def compiled_kv_tokens(self, max_batch_size: int | None, max_total_tokens: int) -> int:
        """The compiled batch × sequence length: every slot holds one whole sequence."""
        return (max_batch_size or 1) * max_total_tokens

    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """The compiled shape: `--batch_size` slots of `--sequence_length` tokens; it queues the rest."""
        total = read_int(env, variable_for(self.prefix, self.flags["max_total_tokens"]), context)
        batch = read_int(env, variable_for(self.prefix, self.flags["max_batch_size"]), self.default_running)
        return Limits(max_input_tokens=total - 1, max_total_tokens=total, max_batch_prefill_tokens=batch * total,
                      max_batch_total_tokens=batch * total, max_concurrent_requests=None, max_batch_size=batch)


VLLM_NEURONX = VllmNeuronx()

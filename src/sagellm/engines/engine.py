"""What every serving engine answers: its generation, the settings it is given, the limits it runs with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

from sagellm.engines import images
from sagellm.engines.images import version_key
from sagellm.errors import InputError

# TGI 3's launcher default for MAX_BATCH_PREFILL_TOKENS (within the model's context): the prompt tokens one
# prefill pass takes.
DEFAULT_PREFILL_TOKENS = 4096

# The AMIs a production variant may name (botocore sagemaker service-2.json, ProductionVariantInferenceAmiVersion).
InferenceAmiVersion = Literal[
    "al2-ami-sagemaker-inference-gpu-2", "al2-ami-sagemaker-inference-gpu-2-1", "al2-ami-sagemaker-inference-gpu-3-1",
    "al2-ami-sagemaker-inference-neuron-2", "al2023-ami-sagemaker-inference-gpu-4-1",
]
# The AMI an image built for a newer CUDA than SageMaker's default host needs (NVIDIA driver 535, CUDA 12.2, on
# which CUDA 12.x images run): botocore's ProductionVariant InferenceAmiVersion documentation (botocore 1.44.8)
# lists al2023-ami-sagemaker-inference-gpu-4-1 as NVIDIA driver 580, CUDA 13.0, the only one for CUDA 13.
CUDA_AMIS: dict[int, InferenceAmiVersion] = {13: "al2023-ami-sagemaker-inference-gpu-4-1"}


# The step constants vLLM, LMI (vLLM) and SGLang run (planner/constants.py MEASURED): "vllm" (VLLM_1), which beat
# TGI 1.x's on leave-one-source-out and on 49 published rows frozen before scoring (docs/studies.md, round 5).
CUDA_GRAPH_CONSTANTS = "vllm"


@dataclass(frozen=True)
class Generation:
    """One server generation: its label, the measured constants it uses, and how it batches."""

    name: str  # "tgi-1"
    label: str  # "TGI 1.x"
    constants_from: str  # the generation whose fitted constants it uses (itself when it has measurements)
    # Passes of up to this many token rows compute EVERY expert of a mixture-of-experts layer (0: none).
    # TGI 1.x's Mixtral (flash_mixtral_modeling.py, v1.3.4–v1.4.5) runs `dense_forward` — a bmm over all
    # experts — unless more than 256 tokens are in the pass; TGI 2.0+ and vLLM use a fused MoE kernel that
    # reads only the experts the tokens were routed to.
    moe_dense_max_tokens: int = 0
    # Router: prompts wait until floor(ratio × running) of them are queued, or `max_waiting_tokens` decode
    # steps have passed since the last prefill (TGI's WAITING_SERVED_RATIO / MAX_WAITING_TOKENS). TGI's
    # launcher defaults the ratio to 1.2 up to v1.4 (whole waves in a closed loop). TGI 3 chunks prefills
    # by default for flash-attention models and then ignores both: waiting prompts join the batch at every
    # step (backends/v3/src/backend.rs, v3.3.6), as vLLM does (0). Only a profile that turns chunking off
    # (PREFILL_CHUNKING=0, beside MAX_BATCH_SIZE) gets TGI 3's ratio of 0.3, which the planner does not model.
    waiting_served_ratio: float = 0.3
    max_waiting_tokens: int = 20
    # Whether it shards a model over more GPUs than it has KV heads by replicating them (each GPU holds one):
    # vLLM's QKVParallelLinear, which SGLang shares (num_kv_head_replicas = tp_size // total_num_kv_heads where
    # tp_size >= total_num_kv_heads, vllm/model_executor/layers/linear.py). TGI splits them and refuses that.
    replicates_kv_heads: bool = False
    # GB of each GPU the server gives its weights and KV cache, from the GPU's memory (MiB) and the TP degree (its
    # own default rule); None: all the driver reports less the reserve measured on TGI (planner constants).
    memory_for_model_gb: Callable[[float, int], float] | None = None

    @property
    def calibrated(self) -> bool:
        """Whether this generation's constants were fitted on measurements of this generation."""
        return self.constants_from == self.name


@dataclass(frozen=True)
class Settings:
    """One model copy as the plan serves it, in plain values: what an engine turns into its environment."""

    model_id: str
    version: str  # the pinned image version
    tensor_parallel: int
    quantization: str  # none | gptq | awq | …
    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_concurrent_requests: int
    max_batch_size: int | None  # running sequences; None: the KV cache decides


@dataclass(frozen=True)
class CompiledShape:
    """A configuration a model is compiled for ahead of time (Inferentia): its static batch and sequence
    length, the NeuronCores it is split over and the precision it was cast to."""

    batch_size: int
    sequence_length: int  # MAX_TOTAL_TOKENS: prompt + generated tokens of one sequence
    num_cores: int
    auto_cast_type: str

    def describe(self) -> str:
        """'batch 4 × 4096 tokens on 2 cores (bf16)'."""
        return (f"batch {self.batch_size} × {self.sequence_length} tokens on {self.num_cores} cores "
                f"({self.auto_cast_type})")


def pick_compiled(shapes: Sequence[CompiledShape], max_total: int, batch_size: int | None, concurrent: int,
                  w: Callable[[str], str], errors: list[str]) -> CompiledShape | None:
    """The compiled shape of sequence length `max_total`: the pinned batch, or the largest within the admission
    limit (requests beyond it queue); a shape the cache lacks is refused, naming those it has."""
    compiled = "; ".join(c.describe() for c in shapes)
    at_length = [c for c in shapes if c.sequence_length == max_total]
    if not at_length:
        errors.append(f"{w('max_total_tokens')}: {max_total} is not a compiled sequence length on Inferentia "
                      f"(compiled: {compiled}); use auto")
        return None
    if batch_size is not None:
        match = next((c for c in at_length if c.batch_size == batch_size), None)
        if match is None:
            errors.append(f"{w('max_batch_size')}: {batch_size} has no compiled model on Inferentia (compiled: "
                          f"{compiled}); use auto or one of those batch sizes")
        return match
    within = [c for c in at_length if c.batch_size <= concurrent]
    return max(within, key=lambda c: c.batch_size) if within else min(at_length, key=lambda c: c.batch_size)


@dataclass(frozen=True)
class Variable:
    """One server setting: its names in the environment, and the Settings field the plan sets it from."""

    setting: str  # "shard count"
    names: tuple[str, ...]  # the server's name first, then the aliases it also reads
    sets: str | None  # a Settings field; None: the environment is its only place


@dataclass(frozen=True)
class Limits:
    """A copy's serving limits, as the pinned server reads its environment (docs/containers.md)."""

    max_input_tokens: int
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_batch_total_tokens: int  # KV budget: what is free after warm-up; each sequence reserves input + max_new
    max_concurrent_requests: int | None  # TGI rejects above it (429); None: never rejects (LMI queues)
    max_batch_size: int | None  # running sequences; None: the KV budget alone decides
    kv_block_tokens: int = 1  # paged KV is taken in blocks of this many tokens (vLLM: 16 on GPUs)


class Token(NamedTuple):
    """One generated token as a server reports it (a NamedTuple: one is made per token streamed)."""

    id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class ErrorReply:
    """A refusal as the server writes it: status, content type and body."""

    status: int
    content_type: str
    body: bytes


def read_int(env: dict[str, str], name: str, default: int) -> int:
    """An integer variable of a container environment, or `default` where it is unset."""
    value = env.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InputError(f"environment: {name}: {value!r} is not an integer") from None


class Engine(ABC):
    """A serving engine: its pinned image, what it reads, how it batches and admits, what it says on the wire."""

    kind: str  # the profile's container.kind
    label: str  # "TGI", "LMI"
    framework: str  # the SageMaker SDK's image table
    inference_tool: str | None = None  # what the SDK is called with for this table, written where the processor goes
    gpu = True  # whether its image runs on GPUs (False: on Inferentia only)
    # Why upstream no longer develops it (None: maintained); `recommend` breaks an exact tie away from it.
    unmaintained: str | None = None
    # How a copy schedules its steps (planner/batching.py SCHEDULERS): "tgi" reserves each request's KV
    # and pauses decoding for a prefill pass; "vllm" mixes decodes and prompt chunks in one token-budgeted pass
    # over paged KV; "sglang" alternates prefill and decode passes, prefill first.
    scheduling = "tgi"
    pinned: str  # the version sagellm pins
    oldest: tuple[int, ...]  # the oldest version whose behaviour docs/containers.md describes
    variables: tuple[Variable, ...]  # the settings the plan owns, and the aliases beside them
    # Every value the server's quantization setting takes (its own list, read at the source named beside it in
    # the engine's module); a profile's serving.quantization outside it is refused.
    quantizations: frozenset[str]
    model_id_variables: tuple[str, ...]  # where the server reads the model id
    queues: bool  # admission: True queues every request (no 429), False refuses above MAX_CONCURRENT_REQUESTS
    payload_too_large = ""  # the refusal of a body over payload_limit()
    min_startup_timeout_s = 0  # the least start-up (and download) timeout an `auto` plan gives the image
    # A Hugging Face Hub repository the server reads as it starts even when its weights are on disk (None: none), so
    # network isolation would stop it.
    hub_at_start: str | None = None
    inference_ami_version: InferenceAmiVersion | None = None  # a host AMI every image of the engine needs
    stream_content_type: str  # how a streamed generate reply is framed
    # The bodies its `/invocations` takes (generate: TGI's; chat, completions: OpenAI's), and the one the bench
    # sends a SageMaker endpoint of it by default (the bench's API names: tgi, openai, chat).
    invocations: tuple[str, ...] = ("generate", "chat", "completions")
    sagemaker_api = "tgi"
    # Prometheus /metrics: a results name → the server's histogram (in seconds) or counter, newest name first.
    histograms: ClassVar[dict[str, tuple[str, ...]]]
    counters: ClassVar[dict[str, tuple[str, ...]]]

    @abstractmethod
    def generation(self, version: str | None) -> Generation:
        """The generation of this engine at `version` (None: the pinned one)."""

    @abstractmethod
    def chunks_prefill(self, version: str | None, max_batch_size: int | None) -> bool:
        """Whether the server splits long prompts over several prefill passes."""

    @abstractmethod
    def environment(self, s: Settings) -> dict[str, str]:
        """The variables the plan sets for one copy (the profile's own environment goes on top)."""

    @abstractmethod
    def environment_errors(self, version: str, env: dict[str, str], where: Callable[[str], str]) -> list[str]:
        """`serving.environment` variables the pinned server does not read, or reads without effect."""

    @abstractmethod
    def limits(self, version: str | None, env: dict[str, str], kv_tokens: int, context: int) -> Limits:
        """The limits a copy runs with: its environment, with this server's defaults where a variable is unset."""

    def compiled_shapes(self, model_id: str) -> tuple[CompiledShape, ...] | None:
        """The shapes `model_id` is compiled for ahead of time; None: the server batches dynamically."""
        return None

    def compiled_for(self, model_id: str, tp: int, batch_size: int | None = None,
                     sequence_length: int | None = None) -> tuple[CompiledShape, ...] | None:
        """The shapes `model_id` is compiled for on `tp` accelerators, of that batch and sequence length where
        given; None: the server batches dynamically."""
        return None

    def accelerator_units(self, tp: int) -> str:
        """What `tp` accelerators are as the server counts them ('2 NeuronCores'; on GPUs '2 GPUs')."""
        return f"{tp} GPUs"

    def uncompiled(self, model_id: str, instance_type: str, chips: int, tp: int | None, where_instance: str,
                   where_tp: str) -> str:
        """Why a model cannot start here: nothing compiled for it at `tp` (None: at any `tp` the instance's
        `chips` allow), and what is compiled; only an engine with compiled shapes asks."""
        raise NotImplementedError(f"{self.label} compiles nothing ahead of time")

    def core_notes(self, instance_type: str, chips: int, model_id: str,
                   copies: Sequence[tuple[int, int]]) -> tuple[str, ...]:
        """What `plan` notes about how a plan's copies — (accelerators per copy, copies) each — use the instance."""
        return ()

    def auto_prefill_tokens(self, max_input: int, max_total: int, chunked: bool) -> int:
        """The prefill budget `auto` plans: TGI 3's default where the server chunks prefill; a server that cannot
        chunk must prefill a whole prompt at once."""
        return min(DEFAULT_PREFILL_TOKENS, max_total) if chunked else max(max_input, DEFAULT_PREFILL_TOKENS)

    def tp_choices(self, model_id: str, chips: int, batch_size: int | None,
                   sequence_length: int | None) -> tuple[list[int], list[int]] | None:
        """On an engine that compiles ahead (`compiled_for` is not None): the accelerator counts a copy may take, and
        those auto picks from; None: the planner decides by how the model shards (GPUs).

        A compiled shape shows that a core count shards the model (optimum-neuron pads attention heads that do not
        divide it), and a copy runs on any cores of the instance (the entry point asks only that the compiled cores
        be available): auto picks from the counts compiled for the pinned batch and length, else for any, so 8 of
        an ml.inf2.24xlarge's 12 rather than 2."""
        if self.compiled_for(model_id, 1) is None:
            return None
        valid = list(range(1, chips + 1))
        pinned = [t for t in valid if self.compiled_for(model_id, t, batch_size, sequence_length)]
        return valid, pinned or [t for t in valid if self.compiled_for(model_id, t)]

    def compiled_batch(self, shapes: Sequence[CompiledShape] | None, max_total: int, max_input: int,
                       batch_size: int | None, held: int, where: Callable[[str], str],
                       errors: list[str]) -> tuple[int, int] | None:
        """The compiled batch a copy runs (`pick_compiled`) and the prefill budget its entry point fills in unset:
        batch × max input tokens (TGI's neuron entry point, tgi_env.py); None where nothing compiled fits, or the
        server batches dynamically (`shapes` None)."""
        compiled = pick_compiled(shapes, max_total, batch_size, held, where, errors) if shapes else None
        if compiled is None:
            return None
        return compiled.batch_size, compiled.batch_size * max_input

    def compiled_kv_tokens(self, max_batch_size: int | None, max_total_tokens: int) -> int | None:
        """The KV budget a compiled model holds (its batch × sequence length); None: what memory allows."""
        return None

    def image_version(self, version: str) -> str:
        """The image version deployed for the pinned server version."""
        return version

    def inference_ami(self, version: str) -> InferenceAmiVersion | None:
        """The host AMI the image of `version` needs (ProductionVariant InferenceAmiVersion): the engine's own,
        else the one that carries the image's CUDA; None: SageMaker's default."""
        cuda = images.cuda_major(self.framework, self.image_version(version))
        return self.inference_ami_version or (CUDA_AMIS.get(cuda) if cuda is not None else None)

    def version_errors(self, version: str, where: str) -> list[str]:
        """A pinned version the SDK tables do not know exactly, or older than sagellm models."""
        versions = images.versions(self.framework)
        if version not in versions:
            alias = images.alias(self.framework, version)
            hint = f"use the exact version {alias}" if alias else f"known: {', '.join(versions[-5:])}"
            return [f"{where}: {version!r} is not an exact {self.framework} image version ({hint})"]
        if version_key(version) < self.oldest:
            oldest = ".".join(map(str, self.oldest))
            message = (f"sagellm models {self.kind} {oldest} and newer (pinned default: {self.pinned}); "
                       "see docs/containers.md")
            return [f"{where}: {version!r}: {message}"]
        return []

    def pin_errors(self, version: str, pin: str, where: str) -> list[str]:
        """A pin that is neither a digest nor a full tag of the pinned server `version`'s image."""
        return images.pin_errors(self.framework, self.image_version(version), pin, where)

    def image_uri(self, version: str, region: str, pin: str | None = None) -> str:
        """The ECR image URI of the pinned server `version` in `region` (`pin`: its full tag or digest)."""
        image_version = self.image_version(version)
        if region not in images.regions(self.framework, image_version):
            raise InputError(self.region_error(image_version, region))
        return images.uri(self.framework, image_version, region, pin)

    def region_error(self, version: str, region: str) -> str:
        """Why `region` has no image of `version`, and the fix: the newest version sagellm models there, or a region
        that holds this one (GovCloud and China get new images later than the commercial regions)."""
        held = images.regions(self.framework, version)
        elsewhere = f"a region that has it, such as {'us-east-1' if 'us-east-1' in held else held[0]}"
        there = [v for v in images.versions(self.framework) if region in images.regions(self.framework, v)]
        modelled = [v for v in there if version_key(v) >= self.oldest]
        missing = f"region: {region!r}: no {self.framework} {version} image there"
        if modelled:
            return (f"{missing}; the newest there is {modelled[-1]}: pin it in the profile (container.version: "
                    f"{modelled[-1]}) or deploy to {elsewhere}")
        if there:
            oldest = ".".join(map(str, self.oldest))
            return (f"{missing}, and its newest there, {there[-1]}, is older than the {oldest} sagellm models; use "
                    f"another engine there or deploy to {elsewhere}")
        return f"{missing} (none of any version); use another engine there or deploy to {elsewhere}"

    def payload_limit(self, env: dict[str, str]) -> int | None:
        """The largest request body the server takes (None: no limit of its own)."""
        return None

    def default_max_new_tokens(self) -> int | None:
        """What a generate body without max_new_tokens gets (None: up to the total-token cap)."""
        return None

    @abstractmethod
    def generate_body(self, text: str, details: dict[str, Any] | None, tokens: Sequence[Token], *,
                      invocations: bool) -> Any:
        """A whole generate reply (`details` and `tokens` only when the request asked for details)."""

    @abstractmethod
    def stream_token(self, index: int, token: Token) -> bytes:
        """One piece of a streamed generate reply: the token at `index` (0-based), not the last."""

    @abstractmethod
    def stream_last(self, index: int, token: Token, text: str, details: dict[str, Any] | None) -> bytes:
        """The last piece of a streamed generate reply: the last token, the whole text, `details` if asked."""

    @abstractmethod
    def error_reply(self, status: int, error_type: str, message: str) -> ErrorReply:
        """A refused request as the server answers it."""

    def stream_refusal(self, status: int, error_type: str, message: str) -> ErrorReply:
        """A refused streamed generate request as the server answers it."""
        return self.error_reply(status, error_type, message)

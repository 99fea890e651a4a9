"""Profile schema: frozen pydantic models with extra="forbid" (published as JSON Schema)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from sagellm.catalog.s3_weights import S3_PREFIX
from sagellm.engines import ENGINES, tgi
from sagellm.planner.prefix import CONCURRENCY_THRESHOLD_RANGE, PREFIX_LENGTH_RANGE, RoutingStrategy

# Bounds the services accept: a value outside them would fail only after a paid deploy (or at the
# container's start). Sources: botocore's SageMaker and Application Auto Scaling service models
# (botocore/data/*/service-2.json) and TGI's launcher (launcher/src/main.rs, v3.3).
INT32_MAX = 2**31 - 1  # AWS API `Integer` members (instance counts, CopyCount, capacities, cooldowns) are 32-bit
U32_MAX = tgi.MAX_TOKENS  # the token caps: TGI reads them as u32
TGI_MAX_CONCURRENT = tgi.MAX_CONCURRENT_REQUESTS
TIMEOUT_RANGE_S = (60, 3600)  # ProductionVariant ContainerStartupHealthCheck/ModelDataDownload TimeoutInSeconds
VOLUME_RANGE_GB = (1, 512)  # ProductionVariantVolumeSizeInGB
TARGET_VALUE_MAX = 2.0**360  # TargetTrackingScalingPolicyConfiguration.TargetValue: at most 2^360

Auto = Literal["auto"]
Count = Annotated[int, Field(ge=1, le=INT32_MAX)]  # GPUs, copies, instances: 0 is never meaningful
Tokens = Annotated[int, Field(ge=1, le=U32_MAX)]
Seconds = Annotated[int, Field(ge=TIMEOUT_RANGE_S[0], le=TIMEOUT_RANGE_S[1])]
Cooldown = Annotated[int, Field(ge=0, le=INT32_MAX)]  # a duration is never negative
Billions = Annotated[float, Field(gt=0, allow_inf_nan=False)]  # parameters, in billions


def known_kind(kind: str) -> str:
    """A container kind of a registered engine (sagellm.engines.ENGINES)."""
    if kind not in ENGINES:
        raise PydanticCustomError("unknown_engine", "'{kind}' is not an engine sagellm knows (known: {known})",
                                  {"kind": kind, "known": ", ".join(ENGINES)})
    return kind


# container.kind: one of the registered engines; the JSON Schema lists them as an enum.
Kind = Annotated[str, AfterValidator(known_kind), WithJsonSchema({"type": "string", "enum": list(ENGINES)})]
Quantization = Literal["none", "gptq", "awq", "bitsandbytes", "eetq", "fp8"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Serving(_Strict):
    """Server settings; `auto` values come from the planner for the model × instance × payload."""

    tensor_parallel: Count | Auto = Field("auto", description="GPUs per model copy (SM_NUM_GPUS); auto = all for "
                                        "instance endpoints, the planner's best for inference components")
    quantization: Quantization = "none"
    max_total_tokens: Tokens | Auto = Field("auto", description="MAX_TOTAL_TOKENS (prompt + generation) the "
                                          "application may send; auto = the model's context, unless the KV cache "
                                          "cannot hold two full-length sequences (then half the KV cache)")
    max_input_tokens: Tokens | Auto = Field("auto", description="MAX_INPUT_TOKENS; auto = max_total_tokens − the "
                                          "payload's output tokens (a longest prompt still gets a full answer)")
    max_batch_prefill_tokens: Tokens | Auto = Field("auto", description="MAX_BATCH_PREFILL_TOKENS; auto = 4096 "
                                                  "within the context (TGI 3 chunks longer prompts), at least "
                                                  "max_input_tokens where the server cannot chunk")
    max_batch_size: Count | None = Field(None, description="running sequences per copy (TGI MAX_BATCH_SIZE with "
                                         "PREFILL_CHUNKING=0 on TGI 3, LMI OPTION_MAX_ROLLING_BATCH_SIZE); "
                                         "others queue; default: the KV budget decides")
    max_concurrent_requests: Annotated[int, Field(ge=1, le=TGI_MAX_CONCURRENT)] | Auto = Field(
        "auto", description="MAX_CONCURRENT_REQUESTS per copy (TGI answers 429 above it); auto = largest power of "
        "two whose payload requests finish inside the 60 s invocation timeout")
    environment: dict[str, str] = Field(default_factory=dict, description="Extra container environment: only "
                                        "variables the pinned server reads (docs/containers.md); never tokens")


class Container(_Strict):
    """The serving container, pinned: a redeploy never swaps the server version underneath an endpoint."""

    kind: Kind = Field("tgi", description="the serving engine: " + "; ".join(
        f"{kind}: {engine.label}" for kind, engine in ENGINES.items()))
    version: str | None = Field(None, description="exact image version in the SageMaker SDK tables; default: "
                                "the version sagellm pins (" + ", ".join(
                                    f"{kind} {engine.pinned}" for kind, engine in ENGINES.items()) + ")")
    image_pin: str | None = Field(None, description="that version's image by its full tag (the short tag with "
                                  "its patch suffix, e.g. …-ubuntu22.04-v1.1) or digest (sha256:…); default: the "
                                  "SDK table's tag, which AWS re-pushes with each patch")


class ExtraModel(_Strict):
    """Another model sharing an inference-component endpoint."""

    model: str
    copies: Count = 1
    tensor_parallel: Count = 1
    quantization: Quantization = "none"


class Components(_Strict):
    """Inference-component sizing (endpoint_kind: inference-component)."""

    copies: Count | Auto = Field("auto", description="copies of the main model; auto = GPUs left ÷ TP per copy")
    cpu_cores_per_copy: Annotated[float, Field(ge=0.25, le=INT32_MAX, allow_inf_nan=False)] | Auto = Field(
        "auto", description="NumberOfCpuCoresRequired (at least 0.25); auto = a share of the instance's vCPUs")
    memory_mib_per_copy: Annotated[int, Field(ge=128, le=INT32_MAX)] | Auto = Field(
        "auto", description="MinMemoryRequiredInMb (at least 128); auto = a share of the host memory")
    extra_models: tuple[ExtraModel, ...] = ()


class Autoscaling(_Strict):
    """Application Auto Scaling with target tracking."""

    min_capacity: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        1, description="fewest instances, or copies for inference components; 0 (inference components only) scales "
        "to zero copies and instances when idle, and the first request after zero starts a copy")
    max_capacity: Count = 4
    target_value: Annotated[float, Field(gt=0, le=TARGET_VALUE_MAX, allow_inf_nan=False)] | Auto = Field("auto", description="requests in flight per instance (instance "
                                       "endpoints) or per copy (inference components); "
                                       "auto = the planner's knee")
    scale_in_cooldown_s: Cooldown = 300
    scale_out_cooldown_s: Cooldown = 60


class RoutingSpec(_Strict):
    """How the endpoint sends requests to its instances and copies (the production variant's RoutingConfig)."""

    strategy: RoutingStrategy = Field(
        "least-outstanding", description="least-outstanding (LEAST_OUTSTANDING_REQUESTS), random (RANDOM), "
        "prefix-aware (PREFIX_AWARE: requests sharing their first prefix_length bytes go to the same copy) or "
        "kv-aware (KV_AWARE: the copy whose KV cache holds the prompt's start; the vLLM image only)")
    prefix_length: Annotated[int, Field(ge=PREFIX_LENGTH_RANGE[0], le=PREFIX_LENGTH_RANGE[1])] | None = Field(
        None, description="prefix-aware: bytes of the request body (InvokeEndpoint) or characters of the messages' "
        "text (OpenAI API) compared: the shared part (a system prompt) plus enough unique content to spread load")
    concurrency_threshold: Annotated[int, Field(ge=CONCURRENCY_THRESHOLD_RANGE[0],
                                                le=CONCURRENCY_THRESHOLD_RANGE[1])] | None = Field(
        None, description="prefix-aware: requests in flight on a copy at which the endpoint sends its prefix "
        "elsewhere")


class MetricsSpec(_Strict):
    """What the endpoint publishes to CloudWatch beyond its default metrics (the endpoint config's MetricsConfig)."""

    detailed: bool = Field(False, description="detailed observability (EnableDetailedObservability): the "
                           "container's own Prometheus metrics (TGI, vLLM, SGLang and LMI serve them; for AWS's "
                           "images SageMaker finds the path itself), per-GPU and per-instance metrics; CloudWatch "
                           "bills them as custom metrics")
    enhanced: bool = Field(False, description="enhanced metrics (EnableEnhancedMetrics): utilization and invocation "
                           "metrics per instance and per inference-component container")
    publish_every_s: Literal[10, 30, 60, 120, 180, 240, 300] = Field(
        60, description="how often they are published (MetricPublishFrequencyInSeconds)")


class PayloadSpec(_Strict):
    """The expected request: the workload the admission limit is sized for (not a serving limit)."""

    input_tokens: Tokens = 256
    output_tokens: Tokens = 256


class Architecture(_Strict):
    """Facts for a model the catalog does not know (from its config.json)."""

    params_b: Billions
    n_layers: Count
    hidden_size: Count
    n_heads: Count
    n_kv_heads: Count
    head_dim: Count
    max_context: Tokens
    active_params_b: Billions | None = None
    n_experts: Count = 1
    experts_per_token: Count = 1
    parallel_attention: bool = Field(False, description="attention and MLP side by side (Falcon): one "
                                     "all-reduce per layer under tensor parallelism")
    gated: bool = Field(False, description="the Hub serves the weights only with a token (needs hf_token_secret)")
    kv_lora_rank: Count | None = Field(None, description="compressed-KV attention (DeepSeek's MLA): the latent "
                                       "width each token caches per layer (config.json kv_lora_rank)")
    qk_rope_head_dim: Annotated[int, Field(ge=0, le=INT32_MAX)] = Field(
        0, description="MLA: the rotary key width cached beside the latent (config.json qk_rope_head_dim)")


class ModelSource(_Strict):
    """Where the container reads the main model's weights: an S3 prefix instead of the Hugging Face Hub."""

    s3_uri: str = Field(pattern=S3_PREFIX.pattern, description="an S3 prefix holding the uncompressed snapshot "
                        "(config.json and weights; `sagellm weights upload`), copied to /opt/ml/model: no "
                        "Hugging Face token, no Hub egress")


class Profile(_Strict):
    """A named deployment profile."""

    name: str
    description: str = ""
    extends: str | None = None
    container: Container = Container()
    instance_type: str | Auto = "auto"
    instance_selection: Literal["cheapest-per-hour", "cheapest-per-token"] = Field(
        "cheapest-per-hour", description="how instance_type: auto picks among types where the model fits")
    initial_instance_count: Count = 1
    endpoint_kind: Literal["instance", "inference-component"] = "instance"
    serving: Serving = Serving()
    components: Components = Components()
    autoscaling: Autoscaling | None = None
    startup_health_check_timeout_s: Seconds | Auto = "auto"
    model_data_download_timeout_s: Seconds | Auto = "auto"
    volume_size_gb: Annotated[int, Field(ge=VOLUME_RANGE_GB[0], le=VOLUME_RANGE_GB[1])] | Auto = "auto"
    routing: RoutingSpec | None = Field(None, description="the routing strategy (default: least outstanding "
                                        "requests wherever more than one container serves)")
    metrics: MetricsSpec | None = Field(None, description="CloudWatch metrics beyond the defaults: the containers' "
                                        "Prometheus metrics (detailed) and per-container utilization (enhanced)")
    payload: PayloadSpec = Field(PayloadSpec(), description="the workload: sizes the auto admission limit and is "
                                 "the bench's default; it must fit under the token caps")
    hf_token_secret: str | None = Field(None, description="Secrets Manager name or ARN holding the Hugging Face "
                                        "token (the token itself never goes in a profile)")
    architecture: Architecture | None = None
    model_source: ModelSource | None = Field(None, description="weights from S3 (default: the Hugging Face Hub)")
    tags: dict[str, str] = Field(default_factory=dict)

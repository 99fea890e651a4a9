"""Profile schema: frozen pydantic models with extra="forbid" (published as JSON Schema)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Auto = Literal["auto"]
Count = Annotated[int, Field(ge=1)]  # GPUs, copies, tokens, requests: 0 is never meaningful
Quantization = Literal["none", "gptq", "awq", "bitsandbytes", "eetq", "fp8"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Serving(_Strict):
    """Server settings; `auto` values come from the planner for the model × instance × payload."""

    tensor_parallel: Count | Auto = Field("auto", description="GPUs per model copy (SM_NUM_GPUS); auto = all for "
                                        "instance endpoints, the planner's best for inference components")
    quantization: Quantization = "none"
    max_total_tokens: Count | Auto = Field("auto", description="MAX_TOTAL_TOKENS (prompt + generation) the "
                                         "application may send; auto = the model's context, unless the KV cache "
                                         "cannot hold two full-length sequences (then half the KV cache)")
    max_input_tokens: Count | Auto = Field("auto", description="MAX_INPUT_TOKENS; auto = max_total_tokens − the "
                                         "payload's output tokens (a longest prompt still gets a full answer)")
    max_batch_prefill_tokens: Count | Auto = Field("auto", description="MAX_BATCH_PREFILL_TOKENS; auto = 4096 "
                                                 "within the context (TGI 3 chunks longer prompts), at least "
                                                 "max_input_tokens where the server cannot chunk")
    max_batch_size: Count | None = Field(None, description="running sequences per copy (TGI MAX_BATCH_SIZE with "
                                         "PREFILL_CHUNKING=0 on TGI 3, LMI OPTION_MAX_ROLLING_BATCH_SIZE); "
                                         "others queue; default: the KV budget decides")
    max_concurrent_requests: Count | Auto = Field("auto", description="MAX_CONCURRENT_REQUESTS per copy (TGI "
                                                "answers 429 above it); auto = largest power of two whose "
                                                "payload requests finish inside the 60 s invocation timeout")
    environment: dict[str, str] = Field(default_factory=dict, description="Extra container environment: only "
                                        "variables the pinned server reads (docs/containers.md); never tokens")


class Container(_Strict):
    """The serving container, pinned: a redeploy never swaps the server version underneath an endpoint."""

    kind: Literal["tgi", "lmi"] = Field("tgi", description="tgi: Hugging Face TGI; lmi: AWS LMI (vLLM)")
    version: str | None = Field(None, description="exact image version in the SageMaker SDK tables; default: "
                                "the version sagellm pins (tgi 3.3.6, lmi 0.35.0)")


class ExtraModel(_Strict):
    """Another model sharing an inference-component endpoint."""

    model: str
    copies: Count = 1
    tensor_parallel: Count = 1
    quantization: Quantization = "none"


class Components(_Strict):
    """Inference-component sizing (endpoint_kind: inference-component)."""

    copies: Count | Auto = Field("auto", description="copies of the main model; auto = GPUs left ÷ TP per copy")
    cpu_cores_per_copy: Annotated[float, Field(gt=0)] | Auto = "auto"
    memory_mib_per_copy: Count | Auto = "auto"
    extra_models: tuple[ExtraModel, ...] = ()


class Autoscaling(_Strict):
    """Application Auto Scaling with target tracking."""

    min_capacity: Count = 1
    max_capacity: Count = 4
    target_value: float | Auto = Field("auto", description="invocations per instance per minute (instance "
                                       "endpoints) or concurrent requests per copy (inference components); "
                                       "auto = the planner's knee")
    scale_in_cooldown_s: int = 300
    scale_out_cooldown_s: int = 60


class PayloadSpec(_Strict):
    """The expected request: the workload the admission limit is sized for (not a serving limit)."""

    input_tokens: int = Field(256, gt=0)
    output_tokens: int = Field(256, gt=0)


class Architecture(_Strict):
    """Facts for a model the catalog does not know (from its config.json)."""

    params_b: float
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_context: int
    active_params_b: float | None = None
    n_experts: int = 1
    experts_per_token: int = 1
    gated: bool = Field(False, description="the Hub serves the weights only with a token (needs hf_token_secret)")


class Profile(_Strict):
    """A named deployment profile."""

    name: str
    description: str = ""
    extends: str | None = None
    container: Container = Container()
    instance_type: str | Auto = "auto"
    instance_selection: Literal["cheapest-per-hour", "cheapest-per-token"] = Field(
        "cheapest-per-hour", description="how instance_type: auto picks among types where the model fits")
    initial_instance_count: int = Field(1, ge=1)
    endpoint_kind: Literal["instance", "inference-component"] = "instance"
    serving: Serving = Serving()
    components: Components = Components()
    autoscaling: Autoscaling | None = None
    startup_health_check_timeout_s: Count | Auto = "auto"
    model_data_download_timeout_s: Count | Auto = "auto"
    volume_size_gb: Count | Auto = "auto"
    payload: PayloadSpec = Field(PayloadSpec(), description="the workload: sizes the auto admission limit and is "
                                 "the bench's default; it must fit under the token caps")
    hf_token_secret: str | None = Field(None, description="Secrets Manager name or ARN holding the Hugging Face "
                                        "token (the token itself never goes in a profile)")
    architecture: Architecture | None = None
    tags: dict[str, str] = Field(default_factory=dict)

"""DeploymentPlan: the frozen value every consumer reads (construct, planner, emulator, bench)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from sagellm.catalog import Instance, Model, find_instance, find_model, models
from sagellm.engines import Engine, Limits, engine_for
from sagellm.engines.engine import InferenceAmiVersion
from sagellm.errors import InputError
from sagellm.planner import Shape, StepModel
from sagellm.planner.prefix import Routing
from sagellm.planner.simulate import Served
from sagellm.profiles.schema import Architecture, Kind, MetricsSpec, RoutingSpec


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ComputeRequirements(_Frozen):
    """Per-copy compute of an inference component (CloudFormation ComputeResourceRequirements)."""

    accelerators: int
    cpu_cores: float
    min_memory_mib: int


class ModelDeployment(_Frozen):
    """One model container on the endpoint: an instance-based variant's model, or one inference component."""

    name: str  # short logical name, unique on the endpoint (CDK ids and IC names derive from it)
    model_id: str  # Hugging Face id
    image_uri: str
    environment: dict[str, str]
    tensor_parallel: int
    quantization: str = "none"
    compute: ComputeRequirements | None = None  # inference components only
    copy_count: int = 1  # inference components only
    architecture: Architecture | None = None  # only for models the catalog does not know
    # An S3 prefix SageMaker copies to /opt/ml/model (the environment's model id names that folder); None: the Hub.
    model_data_s3_uri: str | None = None

    def model(self) -> Model:
        """The model's architecture facts: the catalog's, or the ones the profile supplied."""
        if self.architecture is None:
            return find_model(self.model_id, f"models.{self.name}.model_id")
        return Model(hf_id=self.model_id, **self.architecture.model_dump())


# Application Auto Scaling's predefined high-resolution metrics: concurrent requests per model container
# (an instance's model, or one inference-component copy), including those queued in the container and, for
# streamed replies, until the last token; emitted every 10 s
# (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html).
CONCURRENT_REQUESTS_PER_MODEL = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
CONCURRENT_REQUESTS_PER_COPY = "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
HIGH_RESOLUTION_PERIOD_S = 10
# Scale out of zero copies: target tracking cannot (no copy, no per-copy metric), so a step-scaling policy adds one
# copy when an alarm on the component's NoCapacityInvocationFailures fires: Maximum over 30 s, one datapoint
# ≥ 1, the policy's cooldown 60 s (the SageMaker docs "Scale an endpoint to zero instances" and the AWS ML blog
# "Unlock cost savings with the new scale down to zero feature in SageMaker Inference", 2024-12-03).
NO_CAPACITY_METRIC = "NoCapacityInvocationFailures"  # namespace AWS/SageMaker, dimension InferenceComponentName
FROM_ZERO_ALARM_PERIOD_S = 30
FROM_ZERO_COOLDOWN_S = 60


class ScalingPlan(_Frozen):
    """Application Auto Scaling bounds (instances, or copies for inference components) and target tracking."""

    min_capacity: int
    max_capacity: int
    # Concurrent requests in flight per model container (per instance, or per copy); the planner's knee.
    target_value: float
    scale_in_cooldown_s: int = 300
    scale_out_cooldown_s: int = 60
    metric: str = CONCURRENT_REQUESTS_PER_MODEL  # the predefined metric type the policy tracks
    period_s: int = HIGH_RESOLUTION_PERIOD_S  # how often the metric has a datapoint

    @property
    def from_zero(self) -> bool:
        """Whether it scales to zero copies (and needs the step-scaling policy that scales out of zero)."""
        return self.min_capacity == 0


class InstanceScaling(_Frozen):
    """ManagedInstanceScaling of an inference-component endpoint: SageMaker adds instances as copies need them."""

    min_instance_count: int
    max_instance_count: int


def instances_for(copies: list[tuple[ComputeRequirements, int]], instance: Instance) -> int:
    """Instances needed to place `(per-copy compute, copies)` of every model (first fit, largest copies first);
    0 when a single copy is larger than the instance."""
    capacity = (instance.n_accelerators, instance.vcpus, instance.host_mem_gib * 1024)
    free: list[list[float]] = []
    for compute, count in sorted(copies, key=lambda c: -c[0].accelerators):
        need = (compute.accelerators, compute.cpu_cores, compute.min_memory_mib)
        if any(n > c for n, c in zip(need, capacity, strict=True)):
            return 0
        for _ in range(count):
            spot = next((f for f in free if all(n <= left for n, left in zip(need, f, strict=True))), None)
            if spot is None:
                spot = list(capacity)
                free.append(spot)
            for i, n in enumerate(need):
                spot[i] -= n
    return len(free)


def pascal(name: str) -> str:
    """`llama2-13b` → `Llama213b` (CDK ids and output ids must stay alphanumeric)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name))


def component_output(model_name: str) -> str:
    """The EndpointStack output that carries a model's inference component name."""
    return f"ComponentName{pascal(model_name)}"


# The tag naming the sagellm that resolved a plan (the others: sagellm:profile, sagellm:model).
VERSION_TAG = "sagellm:version"


class DeploymentPlan(_Frozen):
    """Everything a deployment needs; nothing downstream re-derives an environment variable."""

    schema_version: int = 1
    profile: str
    region: str
    container: Kind  # a registered engine (sagellm.engines.ENGINES)
    container_version: str | None = None  # the pinned image version; None in hand-built plans: sagellm's pin
    instance_type: str
    initial_instance_count: int
    endpoint_kind: Literal["instance", "inference-component"]
    models: tuple[ModelDeployment, ...]  # exactly one for instance-based endpoints
    scaling: ScalingPlan | None = None
    instance_scaling: InstanceScaling | None = None  # inference components whose copies may need more instances
    startup_health_check_timeout_s: int
    model_data_download_timeout_s: int
    volume_size_gb: int | None = None  # only for instance types without local NVMe storage
    # The host AMI where the image needs one (botocore's ProductionVariantInferenceAmiVersion); None: SageMaker's.
    inference_ami_version: InferenceAmiVersion | None = None
    hf_token_secret: str | None = None  # Secrets Manager name or ARN; never the token itself
    routing: RoutingSpec | None = None  # the profile's routing strategy; None: least outstanding where several serve
    metrics: MetricsSpec | None = None  # CloudWatch metrics beyond the defaults (the endpoint config's MetricsConfig)
    input_tokens: int  # the payload the plan was sized for
    output_tokens: int
    tags: dict[str, str]

    @model_validator(mode="before")
    @classmethod
    def _scaling_metric_of_the_kind(cls, data: object) -> object:
        """A hand-written plan's scaling without a metric tracks what its endpoint kind scales on."""
        if isinstance(data, dict) and isinstance(data.get("scaling"), dict) and "metric" not in data["scaling"]:
            metric = CONCURRENT_REQUESTS_PER_COPY if data.get("endpoint_kind") == "inference-component" \
                else CONCURRENT_REQUESTS_PER_MODEL
            data = {**data, "scaling": {**data["scaling"], "metric": metric}}
        return data

    @model_validator(mode="after")
    def _scaling_metric_fits_the_kind(self) -> DeploymentPlan:
        wanted = CONCURRENT_REQUESTS_PER_COPY if self.endpoint_kind == "inference-component" \
            else CONCURRENT_REQUESTS_PER_MODEL
        if self.scaling is not None and self.scaling.metric != wanted:
            raise ValueError(f"scaling.metric: {self.scaling.metric} does not scale an {self.endpoint_kind} "
                             f"endpoint; use {wanted}")
        return self

    @property
    def primary(self) -> ModelDeployment:
        """The first (for instance-based endpoints, the only) model."""
        return self.models[0]

    @property
    def environment(self) -> dict[str, str]:
        """The primary model's container environment."""
        return self.primary.environment

    @property
    def gated_models(self) -> list[str]:
        """Models whose weights the Hub serves only with a token (catalog flag, or the plan's own facts)."""
        def gated(m: ModelDeployment) -> bool:
            if m.model_data_s3_uri is not None:
                return False  # read from S3: no token
            known = models().get(m.model_id)
            return m.architecture.gated if m.architecture is not None else bool(known and known.gated)

        return [m.model_id for m in self.models if gated(m)]


def with_min_copies(plan: DeploymentPlan, copies: int, where: str) -> DeploymentPlan:
    """The plan with its components' fewest copies set (`LlmEndpoint(min_copies=…)`); 0 also lets the managed
    instances go to zero, as the scale-to-zero profile does."""
    if plan.endpoint_kind != "inference-component" or plan.scaling is None:
        raise InputError(f"{where}: min_copies: needs an inference-component plan with scaling "
                         "(e.g. the scale-to-zero or an autoscaled replicas profile)")
    if copies < 0:
        raise InputError(f"{where}: min_copies: {copies} must be at least 0")
    bounds = plan.instance_scaling
    if copies == 0:
        most = bounds.max_instance_count if bounds is not None else plan.initial_instance_count
        bounds = InstanceScaling(min_instance_count=0, max_instance_count=most)
    return plan.model_copy(update={"scaling": plan.scaling.model_copy(update={"min_capacity": copies}),
                                   "instance_scaling": bounds})


def served_shape(plan: DeploymentPlan, deployment: ModelDeployment) -> tuple[Shape, Engine, Limits]:
    """The planner shape of one copy, the pinned server's engine and the limits it reads from the environment
    (with its own defaults where one is unset); InputError where no KV cache fits."""
    instance = find_instance(plan.instance_type)
    engine = engine_for(plan.container, neuron=instance.is_neuron)
    # The server generation's step constants, as the plan's prediction uses them (TGI 3 is not TGI 1).
    shape = Shape(model=deployment.model(), instance=instance, tensor_parallel=deployment.tensor_parallel,
                  quantization=deployment.quantization, generation=engine.generation(plan.container_version).name)
    limits = engine.limits(plan.container_version, deployment.environment, shape.kv_capacity_tokens,
                           shape.model.max_context)
    if limits.max_batch_total_tokens <= 0:
        raise InputError(f"models.{deployment.name}: {deployment.model_id} does not fit "
                         f"{plan.instance_type} at TP {deployment.tensor_parallel}: no room for the KV cache")
    return shape, engine, limits


def routing_of(plan: DeploymentPlan) -> Routing | None:
    """How the plan's endpoint routes, as the simulation and the emulator route (None: least outstanding)."""
    r = plan.routing
    if r is None:
        return None
    # Unset settings (only strategies other than prefix-aware leave them unset) are never read.
    return Routing(r.strategy, r.prefix_length or PREFIX_LENGTH_DEFAULT, r.concurrency_threshold or 1024)


PREFIX_LENGTH_DEFAULT = 1024


def served(plan: DeploymentPlan, steps: StepModel | None = None) -> Served:
    """The plan's first model as the simulation serves it: its copies (per instance × instances), their step model
    (`steps`: a design's generation and calibration, else the served shape's), limits and scheduling."""
    shape, engine, limits = served_shape(plan, plan.primary)
    return Served(steps or StepModel(shape), limits, engine.scheduling,
                  plan.primary.copy_count * plan.initial_instance_count)

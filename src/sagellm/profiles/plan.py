"""DeploymentPlan: the frozen value every consumer reads (construct, planner, emulator, bench)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sagellm.catalog import Model, find_model
from sagellm.profiles.schema import Architecture


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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
    tp_degree: int
    quantization: str = "none"
    compute: ComputeRequirements | None = None  # inference components only
    copy_count: int = 1  # inference components only
    architecture: Architecture | None = None  # only for models the catalog does not know

    def model(self) -> Model:
        """The model's architecture facts: the catalog's, or the ones the profile supplied."""
        if self.architecture is None:
            return find_model(self.model_id, f"models.{self.name}.model_id")
        return Model(hf_id=self.model_id, **self.architecture.model_dump())


class ScalingPlan(_Frozen):
    """Application Auto Scaling bounds and target tracking."""

    min_capacity: int
    max_capacity: int
    # Instance-based: SageMakerVariantInvocationsPerInstance (invocations per instance per minute).
    # Inference components: concurrent requests per copy (SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution).
    target_value: float
    scale_in_cooldown_s: int = 300
    scale_out_cooldown_s: int = 60


def pascal(name: str) -> str:
    """`llama2-13b` → `Llama213b` (CDK ids and output ids must stay alphanumeric)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name))


def component_output(model_name: str) -> str:
    """The EndpointStack output that carries a model's inference component name."""
    return f"ComponentName{pascal(model_name)}"


class DeploymentPlan(_Frozen):
    """Everything a deployment needs; nothing downstream re-derives an environment variable."""

    schema_version: int = 1
    profile: str
    region: str
    container: Literal["tgi", "lmi"]
    instance_type: str
    initial_instance_count: int
    endpoint_kind: Literal["instance", "inference-component"]
    models: tuple[ModelDeployment, ...]  # exactly one for instance-based endpoints
    scaling: ScalingPlan | None = None
    startup_health_check_timeout_s: int
    model_data_download_timeout_s: int
    volume_size_gb: int | None = None  # only for instance types without local NVMe storage
    hf_token_secret: str | None = None  # Secrets Manager name or ARN; never the token itself
    input_tokens: int  # the payload the plan was sized for
    output_tokens: int
    tags: dict[str, str]

    @property
    def primary(self) -> ModelDeployment:
        """The first (for instance-based endpoints, the only) model."""
        return self.models[0]

    @property
    def environment(self) -> dict[str, str]:
        """The primary model's container environment."""
        return self.primary.environment

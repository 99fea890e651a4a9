"""Hand-built plans for construct tests that need shapes the standard profiles do not produce."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_cdk import App
    from aws_cdk.assertions import Template

from sagellm.profiles.plan import ComputeRequirements, DeploymentPlan, ModelDeployment

LLAMA2_7B = "meta-llama/Llama-2-7b-hf"
CDK_CONTEXT = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]
HF_SECRET = "prod/huggingface/token"  # a Secrets Manager name: the catalog's Llama and Mistral models are gated
# profile → (model, instance): the "done means" commands of issue 3.
STANDARD = {
    "min-latency": (LLAMA2_7B, None),
    "max-throughput": (LLAMA2_7B, None),
    "min-cost": (LLAMA2_7B, None),
    "replicas": ("meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge"),
    "autoscale": (LLAMA2_7B, None),
    "scale-to-zero": (LLAMA2_7B, None),
}
INSTANCE_PROFILES = ["min-latency", "max-throughput", "min-cost", "autoscale"]


def cdk_app(**kwargs: Any) -> App:
    """An app with the context `cdk synth` gives (cdk.json: the recommended feature flags)."""
    from aws_cdk import App

    return App(context=CDK_CONTEXT, **kwargs)


def synth(plan: DeploymentPlan) -> Template:
    """The EndpointStack template of a one-off plan (in its own app)."""
    from aws_cdk.assertions import Template

    from sagellm.stacks import EndpointStack

    return Template.from_stack(EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-test"))

TGI_IMAGE = (
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:"
    "2.4.0-tgi2.4.0-gpu-py311-cu124-ubuntu22.04"
)


def tgi_model(
    name: str, model_id: str, gpus: int, *, compute: ComputeRequirements | None = None, copies: int = 1
) -> ModelDeployment:
    """A TGI container for `model_id` sharded over `gpus` GPUs."""
    return ModelDeployment(
        name=name,
        model_id=model_id,
        image_uri=TGI_IMAGE,
        environment={
            "HF_MODEL_ID": model_id,
            "SM_NUM_GPUS": str(gpus),
            "MAX_INPUT_TOKENS": "2048",
            "MAX_TOTAL_TOKENS": "4096",
            "MAX_CONCURRENT_REQUESTS": "128",
        },
        tensor_parallel=gpus,
        compute=compute,
        copy_count=copies,
    )


def instance_plan(**changes: object) -> DeploymentPlan:
    """An instance-based plan: Llama 2 7B on one ml.g5.12xlarge."""
    values: dict[str, object] = {
        "profile": "max-throughput",
        "region": "us-east-1",
        "container": "tgi",
        "instance_type": "ml.g5.12xlarge",
        "initial_instance_count": 1,
        "endpoint_kind": "instance",
        "models": (tgi_model("llama2-7b", "meta-llama/Llama-2-7b-hf", 4),),
        "startup_health_check_timeout_s": 900,
        "model_data_download_timeout_s": 900,
        "input_tokens": 256,
        "output_tokens": 256,
        "hf_token_secret": HF_SECRET,  # Llama 2 is gated
        "tags": {"sagellm:profile": "max-throughput", "sagellm:model": "meta-llama/Llama-2-7b-hf"},
    }
    values.update(changes)
    return DeploymentPlan.model_validate(values)


def two_model_plan(**changes: object) -> DeploymentPlan:
    """4 × Llama 2 13B + 4 × Mistral 7B as inference components on one ml.p4d.24xlarge."""
    compute = ComputeRequirements(accelerators=1, cpu_cores=10, min_memory_mib=102400)
    values: dict[str, object] = {
        "profile": "replicas",
        "region": "us-east-1",
        "container": "tgi",
        "instance_type": "ml.p4d.24xlarge",
        "initial_instance_count": 1,
        "endpoint_kind": "inference-component",
        "models": (
            tgi_model("llama2-13b", "meta-llama/Llama-2-13b-hf", 1, compute=compute, copies=4),
            tgi_model("mistral-7b", "mistralai/Mistral-7B-v0.1", 1, compute=compute, copies=4),
        ),
        "startup_health_check_timeout_s": 1200,
        "model_data_download_timeout_s": 1200,
        "input_tokens": 256,
        "output_tokens": 256,
        "hf_token_secret": HF_SECRET,  # Llama 2 and Mistral are gated
        "tags": {"sagellm:profile": "replicas"},
    }
    values.update(changes)
    return DeploymentPlan.model_validate(values)


def scaled(plan: DeploymentPlan, **scaling: object) -> DeploymentPlan:
    """`plan` with target tracking (defaults: 1..4, target 100, on the metric of the plan's endpoint kind)."""
    values: dict[str, object] = {"min_capacity": 1, "max_capacity": 4, "target_value": 100.0}
    values.update(scaling)
    return DeploymentPlan.model_validate({**plan.model_dump(), "scaling": values})

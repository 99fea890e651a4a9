"""AWS::SageMaker::InferenceComponent: copies of one model with per-copy compute on a shared endpoint."""

from __future__ import annotations

import hashlib
import re

from aws_cdk import Stack, Token
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

# CreateInferenceComponent's InferenceComponentName (botocore sagemaker service-2.json): at most 63 of
# [a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?
MAX_NAME_LENGTH = 63
NAME = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def name_part(model_name: str) -> str:
    """A plan's model name in the characters SageMaker takes: as it is when it has only those; else each run
    of others (`.`, `_`, `/`) as one hyphen, plus 6 hex of the name itself, so that two names never meet
    (`llama3.1-8b` → `llama3-1-8b-<6 hex>`, never the same as a plan's `llama3-1-8b`)."""
    if NAME.match(model_name):
        return model_name
    clean = re.sub(r"[^a-zA-Z0-9]+", "-", model_name).strip("-")
    return f"{clean}-{_digest(model_name, 6)}" if clean else _digest(model_name, 6)


def component_name(scope: Construct, model_name: str) -> str:
    """`<stack name>-<model name>-<6 hex of the construct path>`, within SageMaker's 63 characters.

    CfnInferenceComponent exposes only its ARN, so the name is set here to be known for outputs and
    scaling. Any model name will do (`name_part`): the stack name keeps it unique per account and region,
    the construct path per stack: two endpoints serving the same model in one stack get different names.
    """
    stack_name = Stack.of(scope).stack_name
    model_name = name_part(model_name)
    path = _digest(scope.node.path, 6)
    if Token.is_unresolved(stack_name):
        return f"{stack_name}-{model_name}-{path}"
    name = f"{stack_name}-{model_name}"
    room = MAX_NAME_LENGTH - len(path) - 1
    if len(name) > room:
        digest = _digest(name, 8)
        name = f"{name[: room - 9].rstrip('-')}-{digest}"
    return f"{name}-{path}"


def inference_component(
    scope: Construct,
    id: str,
    *,
    name: str,
    plan: DeploymentPlan,
    model: ModelDeployment,
    model_name: str,
    endpoint_name: str,
    variant_name: str,
) -> sagemaker.CfnInferenceComponent:
    """`model.copy_count` copies of `model`, each reserving `model.compute` on the endpoint's instances."""
    assert model.compute is not None  # checked by LlmEndpoint's validation
    return sagemaker.CfnInferenceComponent(
        scope,
        id,
        inference_component_name=name,
        endpoint_name=endpoint_name,
        variant_name=variant_name,
        specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
            model_name=model_name,
            compute_resource_requirements=sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                number_of_accelerator_devices_required=model.compute.accelerators,
                number_of_cpu_cores_required=model.compute.cpu_cores,
                min_memory_required_in_mb=model.compute.min_memory_mib,
            ),
            startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                container_startup_health_check_timeout_in_seconds=plan.startup_health_check_timeout_s,
                model_data_download_timeout_in_seconds=plan.model_data_download_timeout_s,
            ),
        ),
        # The plan's starting copies: with a scaler, Application Auto Scaling owns the copies afterwards
        # (UpdateInferenceComponentRuntimeConfig). CloudFormation updates a component only when its properties
        # change, and this count changes only with the plan's copies, so other updates (scaling, alarms) leave
        # the scaler's copies. An update of the component itself (model, image, timeouts, tags) may send it
        # again: CopyCount is write-only in the resource schema and the handler is not public (docs/deploy.md).
        runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
            copy_count=model.copy_count
        ),
    )

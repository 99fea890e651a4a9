"""AWS::SageMaker::InferenceComponent: copies of one model with per-copy compute on a shared endpoint."""

from __future__ import annotations

import hashlib
import re

from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from sagellm.constructs.endpoint import VARIANT_NAME
from sagellm.constructs.scaling import COMPONENT_COPIES, Scaling
from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

# A rolling update (InferenceComponentRollingUpdatePolicy, botocore sagemaker service-2.json): each batch is a
# share of the copies, which SageMaker wants within 5–50 %; a quarter moves one copy of four at a time. Each batch
# bakes for WAIT_INTERVAL_S (0–3600) while the alarms are watched: long enough for the alarms' two one-minute
# periods to be evaluated twice. A rollback brings all the old copies back at once (SageMaker's default, said).
ROLLING_BATCH_PERCENT = 25
ROLLBACK_BATCH_PERCENT = 100
WAIT_INTERVAL_S = 300
EXECUTION_TIMEOUT_RANGE_S = (600, 28800)  # MaximumExecutionTimeoutInSeconds
# The alarms that roll an update back: any 5XX from the new copies in two minutes running, or p90 model latency
# near the 60 s invocation timeout (ModelLatency is in microseconds) in two minutes running.
ALARM_PERIODS = 2
LATENCY_ALARM_US = int(0.9 * INVOCATION_TIMEOUT_S * 1_000_000)

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


def scaled_component(
    scope: Construct,
    suffix: str,
    *,
    name: str,
    plan: DeploymentPlan,
    model: ModelDeployment,
    model_name: str,
    endpoint_name: str,
) -> sagemaker.CfnInferenceComponent:
    """`Component<suffix>` (with its rollback alarms) on the endpoint's variant, and `Scaling<suffix>` of its
    copies when the plan scales: what LlmEndpoint builds per model and LlmComponent for its one."""
    component = inference_component(
        scope,
        f"Component{suffix}",
        name=name,
        plan=plan,
        model=model,
        model_name=model_name,
        endpoint_name=endpoint_name,
        variant_name=VARIANT_NAME,
    )
    if plan.scaling is not None:
        scaling = Scaling(
            scope,
            f"Scaling{suffix}",
            resource_id=f"inference-component/{name}",
            dimension=COMPONENT_COPIES,
            scaling=plan.scaling,
            component_name=name,
        )
        # The resource id is a plain name, not a reference: order it after the component.
        scaling.node.add_dependency(component)
    return component


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
    """`model.copy_count` copies of `model`, each reserving `model.compute` on the endpoint's instances, with its
    weights cached on the instances and updates rolled out copy by copy behind its error and latency alarms
    (children `<id>Errors`, `<id>Latency`)."""
    assert model.compute is not None  # checked by LlmEndpoint's validation
    alarms = rollback_alarms(scope, id, name)
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
            # Each instance keeps the model data and image once a copy has started there, so the next copy on it
            # (scale-out, scale from zero, an update's new copies) starts without downloading them again.
            data_cache_config=sagemaker.CfnInferenceComponent.InferenceComponentDataCacheConfigProperty(
                enable_caching=True
            ),
        ),
        deployment_config=deployment_config(plan, alarms),
        # The plan's starting copies: with a scaler, Application Auto Scaling owns the copies afterwards
        # (UpdateInferenceComponentRuntimeConfig). CloudFormation updates a component only when its properties
        # change, and this count changes only with the plan's copies, so other updates (scaling, alarms) leave
        # the scaler's copies. An update of the component itself (model, image, timeouts, tags) may send it
        # again: CopyCount is write-only in the resource schema and the handler is not public (docs/deploy.md).
        runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
            copy_count=model.copy_count
        ),
    )


def rollback_alarms(scope: Construct, id: str, name: str) -> list[cloudwatch.Alarm]:
    """The component's 5XX-error and latency alarms (by InferenceComponentName), which roll an update back."""
    def alarm(suffix: str, metric_name: str, statistic: str, threshold: float, what: str) -> cloudwatch.Alarm:
        return cloudwatch.Alarm(
            scope, f"{id}{suffix}", threshold=threshold, alarm_description=f"{name}: {what} (rolls an update of "
            "the component back)",
            metric=cloudwatch.Metric(namespace="AWS/SageMaker", metric_name=metric_name, statistic=statistic,
                                     dimensions_map={"InferenceComponentName": name}, period=Duration.minutes(1)),
            evaluation_periods=ALARM_PERIODS, datapoints_to_alarm=ALARM_PERIODS,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # No requests, no datapoints: an idle component is healthy.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    return [
        alarm("Errors", "Invocation5XXErrors", "Sum", 1, "5XX errors"),
        alarm("Latency", "ModelLatency", "p90", LATENCY_ALARM_US, "p90 model latency near the 60 s invocation timeout"),
    ]


def deployment_config(plan: DeploymentPlan, alarms: list[cloudwatch.Alarm]
                      ) -> sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty:
    """A rolling update behind `alarms`, with time for every batch to download, start and bake."""
    def share(percent: int) -> sagemaker.CfnInferenceComponent.InferenceComponentCapacitySizeProperty:
        return sagemaker.CfnInferenceComponent.InferenceComponentCapacitySizeProperty(
            type="CAPACITY_PERCENT", value=percent
        )

    batches = 100 // ROLLING_BATCH_PERCENT
    per_batch = plan.model_data_download_timeout_s + plan.startup_health_check_timeout_s + WAIT_INTERVAL_S
    low, high = EXECUTION_TIMEOUT_RANGE_S
    return sagemaker.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty(
        rolling_update_policy=sagemaker.CfnInferenceComponent.InferenceComponentRollingUpdatePolicyProperty(
            maximum_batch_size=share(ROLLING_BATCH_PERCENT),
            rollback_maximum_batch_size=share(ROLLBACK_BATCH_PERCENT),
            wait_interval_in_seconds=WAIT_INTERVAL_S,
            maximum_execution_timeout_in_seconds=min(high, max(low, batches * per_batch)),
        ),
        auto_rollback_configuration=sagemaker.CfnInferenceComponent.AutoRollbackConfigurationProperty(
            alarms=[sagemaker.CfnInferenceComponent.AlarmProperty(alarm_name=a.alarm_name) for a in alarms]
        ),
    )

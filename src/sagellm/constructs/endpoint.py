"""AWS::SageMaker::EndpointConfig (one production variant) and AWS::SageMaker::Endpoint."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from sagellm.planner.prefix import SAGEMAKER_STRATEGIES
from sagellm.profiles.plan import DeploymentPlan

VARIANT_NAME = "AllTraffic"


def serves_several(plan: DeploymentPlan) -> bool:
    """Whether more than one container (instance, or inference-component copy) may serve the endpoint."""
    most = plan.scaling.max_capacity if plan.scaling is not None else 1
    if plan.endpoint_kind == "instance":
        return max(plan.initial_instance_count, most) > 1
    instances = plan.instance_scaling.max_instance_count if plan.instance_scaling is not None else 1
    copies = max(most, *(m.copy_count for m in plan.models))
    return max(plan.initial_instance_count, instances, copies) > 1


def routing_config(plan: DeploymentPlan) -> sagemaker.CfnEndpointConfig.RoutingConfigProperty | None:
    """The variant's RoutingConfig: the profile's strategy (PrefixAwareRoutingConfig with prefix-aware routing), else
    least outstanding requests where several containers serve: TGI refuses above its admission limit (429), so each
    request goes to the one with the fewest in flight rather than at random (SageMaker's default)."""
    r = plan.routing
    if r is None:
        return sagemaker.CfnEndpointConfig.RoutingConfigProperty(
            routing_strategy="LEAST_OUTSTANDING_REQUESTS"
        ) if serves_several(plan) else None
    return sagemaker.CfnEndpointConfig.RoutingConfigProperty(
        routing_strategy=SAGEMAKER_STRATEGIES[r.strategy],
        prefix_aware_routing_config=sagemaker.CfnEndpointConfig.PrefixAwareRoutingConfigProperty(
            prefix_length=r.prefix_length, concurrency_threshold=r.concurrency_threshold,
        ) if r.strategy == "prefix-aware" else None,
    )


def endpoint_config(
    scope: Construct,
    id: str,
    *,
    plan: DeploymentPlan,
    model_name: str | None,
    role: iam.IRole,
    kms_key: kms.IKey | None,
    vpc_config: sagemaker.CfnModel.VpcConfigProperty | None,
    network_isolation: bool,
) -> sagemaker.CfnEndpointConfig:
    """An endpoint config: with `model_name` an instance-based variant, without it one for inference components."""
    instance_based = model_name is not None
    variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
        variant_name=VARIANT_NAME,
        model_name=model_name,
        instance_type=plan.instance_type,
        initial_instance_count=plan.initial_instance_count,
        initial_variant_weight=1 if instance_based else None,
        # Inference components carry their own start-up guards (StartupParameters).
        container_startup_health_check_timeout_in_seconds=(
            plan.startup_health_check_timeout_s if instance_based else None
        ),
        model_data_download_timeout_in_seconds=plan.model_data_download_timeout_s if instance_based else None,
        volume_size_in_gb=plan.volume_size_gb,
        inference_ami_version=plan.inference_ami_version,
        routing_config=routing_config(plan),
        # Inference components beyond what the starting instances hold: SageMaker adds instances for them.
        managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
            status="ENABLED",
            min_instance_count=plan.instance_scaling.min_instance_count,
            max_instance_count=plan.instance_scaling.max_instance_count,
            # Copies scale in on whichever instances they ran: releasing only empty instances (IDLE_RELEASE) can
            # leave several half-used ones paid for. Consolidation moves the remaining copies together (at most
            # one instance released at a time, 20 min after the last endpoint operation: SageMaker's defaults).
            scale_in_policy=sagemaker.CfnEndpointConfig.ScaleInPolicyProperty(strategy="CONSOLIDATION"),
        ) if plan.instance_scaling is not None else None,
    )
    config_vpc = None
    if vpc_config is not None and not instance_based:
        config_vpc = sagemaker.CfnEndpointConfig.VpcConfigProperty(
            security_group_ids=vpc_config.security_group_ids, subnets=vpc_config.subnets
        )
    return sagemaker.CfnEndpointConfig(
        scope,
        id,
        production_variants=[variant],
        kms_key_id=kms_key.key_arn if kms_key is not None else None,
        # An inference-component endpoint has no model in its variant: the role, VPC and isolation
        # that a model would carry are set on the config instead.
        execution_role_arn=None if instance_based else role.role_arn,
        vpc_config=config_vpc,
        enable_network_isolation=(network_isolation or None) if not instance_based else None,
        metrics_config=metrics_config(plan),
    )


def metrics_config(plan: DeploymentPlan) -> sagemaker.CfnEndpointConfig.MetricsConfigProperty | None:
    """The config's MetricsConfig where the profile asks for more than the default metrics: detailed observability
    scrapes the container's Prometheus endpoint (for AWS's images SageMaker finds its path, so no
    ContainerMetricsConfig, which CloudFormation's AWS::SageMaker::Model does not carry, is needed; botocore 1.44.8
    ContainerMetricsConfig)."""
    m = plan.metrics
    if m is None or not (m.detailed or m.enhanced):
        return None
    return sagemaker.CfnEndpointConfig.MetricsConfigProperty(
        enable_detailed_observability=m.detailed or None, enable_enhanced_metrics=m.enhanced or None,
        metric_publish_frequency_in_seconds=m.publish_every_s)

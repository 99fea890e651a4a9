"""Application Auto Scaling: a scalable target and a target-tracking policy, through the service-linked role."""

from __future__ import annotations

from aws_cdk import aws_applicationautoscaling as appscaling
from constructs import Construct

from sagellm.profiles.plan import ScalingPlan

VARIANT_INSTANCES = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_COPIES = "sagemaker:inference-component:DesiredCopyCount"


class Scaling(Construct):
    """Target tracking on one SageMaker scalable dimension (children: `Target`, `Policy`)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        resource_id: str,
        dimension: str,
        scaling: ScalingPlan,
    ) -> None:
        super().__init__(scope, id)
        # No RoleARN: Application Auto Scaling uses its SageMaker service-linked role (the L2
        # ScalableTarget would create an extra IAM role instead).
        self.target = appscaling.CfnScalableTarget(
            self,
            "Target",
            service_namespace="sagemaker",
            resource_id=resource_id,
            scalable_dimension=dimension,
            min_capacity=scaling.min_capacity,
            max_capacity=scaling.max_capacity,
        )
        self.policy = appscaling.CfnScalingPolicy(
            self,
            "Policy",
            # Policy names are scoped to their scalable target, so a fixed name never collides.
            policy_name="sagellm-target-tracking",
            policy_type="TargetTrackingScaling",
            scaling_target_id=self.target.ref,
            target_tracking_scaling_policy_configuration=appscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=scaling.target_value,
                predefined_metric_specification=appscaling.CfnScalingPolicy.PredefinedMetricSpecificationProperty(
                    predefined_metric_type=scaling.metric
                ),
                scale_in_cooldown=scaling.scale_in_cooldown_s,
                scale_out_cooldown=scaling.scale_out_cooldown_s,
            ),
        )

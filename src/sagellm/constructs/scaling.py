"""Application Auto Scaling: a scalable target and a target-tracking policy, through the service-linked role; for
an inference component that scales to zero also the step-scaling policy and alarm that bring it back."""

from __future__ import annotations

from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from sagellm.profiles.plan import (
    FROM_ZERO_ALARM_PERIOD_S,
    FROM_ZERO_COOLDOWN_S,
    NO_CAPACITY_METRIC,
    ScalingPlan,
)

VARIANT_INSTANCES = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_COPIES = "sagemaker:inference-component:DesiredCopyCount"


class Scaling(Construct):
    """Target tracking on one SageMaker scalable dimension (children: `Target`, `Policy`); with
    `component_name` and a plan that scales to zero also `FromZero` and `FromZeroAlarm`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        resource_id: str,
        dimension: str,
        scaling: ScalingPlan,
        component_name: str | None = None,
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
        if component_name is not None and scaling.from_zero:
            self._from_zero(component_name)

    def _from_zero(self, component_name: str) -> None:
        """One copy when a request finds none: target tracking has no per-copy metric at zero copies."""
        self.from_zero = appscaling.CfnScalingPolicy(
            self,
            "FromZero",
            policy_name="sagellm-from-zero",
            policy_type="StepScaling",
            scaling_target_id=self.target.ref,
            step_scaling_policy_configuration=appscaling.CfnScalingPolicy.StepScalingPolicyConfigurationProperty(
                adjustment_type="ChangeInCapacity",
                metric_aggregation_type="Maximum",
                cooldown=FROM_ZERO_COOLDOWN_S,
                step_adjustments=[
                    appscaling.CfnScalingPolicy.StepAdjustmentProperty(
                        metric_interval_lower_bound=0, scaling_adjustment=1
                    )
                ],
            ),
        )
        self.from_zero_alarm = cloudwatch.CfnAlarm(
            self,
            "FromZeroAlarm",
            alarm_description="A request found no copy of the inference component: start one (sagellm scale-to-zero)",
            namespace="AWS/SageMaker",
            metric_name=NO_CAPACITY_METRIC,
            dimensions=[cloudwatch.CfnAlarm.DimensionProperty(name="InferenceComponentName", value=component_name)],
            statistic="Maximum",
            period=FROM_ZERO_ALARM_PERIOD_S,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            threshold=1,
            comparison_operator="GreaterThanOrEqualToThreshold",
            treat_missing_data="missing",
            alarm_actions=[self.from_zero.attr_arn],
        )

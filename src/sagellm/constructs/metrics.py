"""CloudWatch metrics of an LLM endpoint, as an aws-cdk L2 gives them, and endpoints deployed elsewhere.

Names, namespaces, dimensions and units are SageMaker's ("SageMaker AI metrics in Amazon CloudWatch",
https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html): invocation metrics in
`AWS/SageMaker` by `EndpointName`+`VariantName`, or by `InferenceComponentName` for an endpoint with
inference components; instance utilisation in `/aws/sagemaker/Endpoints` by `EndpointName`+`VariantName`
(GPUUtilization is 0–100 % per GPU, summed over the instance's GPUs). ModelLatency is in microseconds.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from aws_cdk import Arn, ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from constructs import Construct

from sagellm.constructs.endpoint import VARIANT_NAME
from sagellm.constructs.role import INVOKE_ACTIONS

SAGEMAKER = "AWS/SageMaker"
ENDPOINTS = "/aws/sagemaker/Endpoints"
COMPONENTS = "/aws/sagemaker/InferenceComponents"
# SageMaker publishes once a minute: a shorter period would show gaps.
PERIOD = Duration.minutes(1)


@runtime_checkable
class ILlmEndpoint(Protocol):
    """An LLM endpoint as other constructs use it, deployed by this app (LlmEndpoint) or elsewhere
    (`LlmEndpoint.from_endpoint_name`/`from_endpoint_arn`): its name and ARN, its components, invoke, metrics."""

    endpoint_name: str
    endpoint_arn: str
    inference_component_names: dict[str, str]  # model name in the plan → inference component name

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to invoke the endpoint (plain and streaming), and nothing else."""
        ...

    def metric(self, namespace: str, metric_name: str, *, statistic: str, model: str | None = None,
               by_component: bool = True, period: Duration = PERIOD,
               unit: cloudwatch.Unit | None = None) -> cloudwatch.Metric:
        """Any SageMaker metric of the endpoint, with the dimensions SageMaker publishes it under."""
        ...

    def metric_model_latency(self, *, statistic: str = "p90", model: str | None = None,
                             period: Duration = PERIOD) -> cloudwatch.Metric:
        """ModelLatency (microseconds)."""
        ...

    def metric_invocations(self, *, model: str | None = None, period: Duration = PERIOD) -> cloudwatch.Metric:
        """Invocations (Sum)."""
        ...

    def metric_errors(self, kind: Literal["4XX", "5XX"] = "5XX", *, statistic: str = "Sum",
                      model: str | None = None, period: Duration = PERIOD) -> cloudwatch.Metric:
        """Invocation4XXErrors / Invocation5XXErrors."""
        ...

    def metric_gpu_utilization(self, *, statistic: str = "Average", model: str | None = None,
                               period: Duration = PERIOD) -> cloudwatch.Metric:
        """GPUUtilization of the instances, or a component's GPUUtilizationNormalized."""
        ...


class EndpointMetrics:
    """`metric_*` methods for a class with `endpoint_name` and `inference_component_names` (plan name → name)."""

    endpoint_name: str
    inference_component_names: dict[str, str]

    def _component(self, model: str | None) -> str | None:
        """The inference component a metric is for: the named model's, else the first; None without components."""
        names = self.inference_component_names
        if not names:
            if model is not None:
                raise ValueError(f"model {model!r}: this endpoint has no inference components")
            return None
        if model is None:
            return next(iter(names.values()))
        if model not in names:
            raise ValueError(f"model {model!r}: not on this endpoint (models: {', '.join(names)})")
        return names[model]

    def metric(self, namespace: str, metric_name: str, *, statistic: str, model: str | None = None,
               by_component: bool = True, period: Duration = PERIOD,
               unit: cloudwatch.Unit | None = None) -> cloudwatch.Metric:
        """Any SageMaker metric of this endpoint, with the dimensions SageMaker publishes it under."""
        component = self._component(model) if by_component else None
        dims = ({"InferenceComponentName": component} if component is not None
                else {"EndpointName": self.endpoint_name, "VariantName": VARIANT_NAME})
        return cloudwatch.Metric(namespace=namespace, metric_name=metric_name, dimensions_map=dims,
                                 statistic=statistic, period=period, unit=unit)

    def metric_model_latency(self, *, statistic: str = "p90", model: str | None = None,
                             period: Duration = PERIOD) -> cloudwatch.Metric:
        """ModelLatency (microseconds): the container's time for a request, as SageMaker sees it."""
        return self.metric(SAGEMAKER, "ModelLatency", statistic=statistic, model=model, period=period,
                           unit=cloudwatch.Unit.MICROSECONDS)

    def metric_invocations(self, *, model: str | None = None, period: Duration = PERIOD) -> cloudwatch.Metric:
        """Invocations (Sum): requests sent to the endpoint (or its inference component)."""
        return self.metric(SAGEMAKER, "Invocations", statistic="Sum", model=model, period=period)

    def metric_errors(self, kind: Literal["4XX", "5XX"] = "5XX", *, statistic: str = "Sum",
                      model: str | None = None, period: Duration = PERIOD) -> cloudwatch.Metric:
        """Invocation4XXErrors / Invocation5XXErrors (Sum: how many; Average: the error rate)."""
        return self.metric(SAGEMAKER, f"Invocation{kind}Errors", statistic=statistic, model=model, period=period)

    def metric_gpu_utilization(self, *, statistic: str = "Average", model: str | None = None,
                               period: Duration = PERIOD) -> cloudwatch.Metric:
        """GPUUtilization (percent, 0–100 per GPU summed over the instance's GPUs), averaged over instances;
        with `model` on an inference-component endpoint, that component's GPUUtilizationNormalized (0–100 %
        of the GPUs its copies reserve)."""
        if model is not None:
            return self.metric(COMPONENTS, "GPUUtilizationNormalized", statistic=statistic, model=model,
                               period=period)
        return self.metric(ENDPOINTS, "GPUUtilization", statistic=statistic, by_component=False, period=period)

    @staticmethod
    def from_endpoint_name(scope: Construct, id: str, endpoint_name: str, *,
                           inference_components: dict[str, str] | None = None) -> ILlmEndpoint:
        """An endpoint deployed elsewhere, by name (its ARN in this stack's account and region)."""
        arn = Stack.of(scope).format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name)
        return ImportedLlmEndpoint(scope, id, endpoint_name, arn, inference_components or {})

    @staticmethod
    def from_endpoint_arn(scope: Construct, id: str, endpoint_arn: str, *,
                          inference_components: dict[str, str] | None = None) -> ILlmEndpoint:
        """An endpoint deployed elsewhere, by ARN (`arn:aws:sagemaker:REGION:ACCOUNT:endpoint/NAME`)."""
        name = Arn.split(endpoint_arn, ArnFormat.SLASH_RESOURCE_NAME).resource_name
        if name is None:
            raise ValueError(f"endpoint_arn: {endpoint_arn!r} names no endpoint (…:endpoint/NAME)")
        return ImportedLlmEndpoint(scope, id, name, endpoint_arn, inference_components or {})


class ImportedLlmEndpoint(Construct, EndpointMetrics):
    """An endpoint this app did not deploy: its name, ARN, metrics and `grant_invoke`; nothing is created."""

    def __init__(self, scope: Construct, id: str, endpoint_name: str, endpoint_arn: str,
                 inference_components: dict[str, str]):
        super().__init__(scope, id)
        self.endpoint_name = endpoint_name
        self.endpoint_arn = endpoint_arn
        self.inference_component_names = dict(inference_components)

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow `grantee` to invoke this endpoint (plain and streaming), and nothing else."""
        return iam.Grant.add_to_principal(grantee=grantee, actions=INVOKE_ACTIONS, resource_arns=[self.endpoint_arn])

"""LlmEndpoint's CloudWatch metrics (as an aws-cdk L2 gives them), endpoints imported by name or ARN, and the
example alarm app."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template
from construct_plans import instance_plan, two_model_plan

from sagellm.constructs import LlmEndpoint

ALARM = "AWS::CloudWatch::Alarm"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "alarm_app.py"


def _stack() -> Stack:
    return Stack(App(), "Stack", stack_name="sagellm-test", env={"account": "111122223333", "region": "us-east-1"})


def _alarm(stack: Stack, metric: object) -> dict[str, object]:
    """The template properties of an alarm on `metric` (what CloudFormation is given)."""
    metric.create_alarm(stack, "Alarm", threshold=1, evaluation_periods=1)  # type: ignore[attr-defined]
    alarms = Template.from_stack(stack).find_resources(ALARM)
    # This one, not the rollback alarms each inference component has of its own.
    (alarm,) = (a for logical_id, a in alarms.items() if logical_id.startswith("Alarm"))
    return alarm["Properties"]


def _endpoint_ref(stack: Stack, endpoint: LlmEndpoint) -> object:
    return stack.resolve(endpoint.endpoint_name)


def test_model_latency_is_sagemakers_metric_by_endpoint_and_variant_in_microseconds() -> None:
    stack = _stack()
    endpoint = LlmEndpoint(stack, "Llm", plan=instance_plan())
    props = _alarm(stack, endpoint.metric_model_latency())
    assert props["Namespace"] == "AWS/SageMaker"
    assert props["MetricName"] == "ModelLatency"
    assert props["ExtendedStatistic"] == "p90"
    assert props["Period"] == 60
    assert props["Unit"] == "Microseconds"
    assert props["Dimensions"] == [{"Name": "EndpointName", "Value": _endpoint_ref(stack, endpoint)},
                                   {"Name": "VariantName", "Value": "AllTraffic"}]


@pytest.mark.parametrize(("method", "name", "statistic"), [
    ("metric_invocations", "Invocations", "Sum"),
    ("metric_errors", "Invocation5XXErrors", "Sum"),
])
def test_counts_are_sums(method: str, name: str, statistic: str) -> None:
    stack = _stack()
    endpoint = LlmEndpoint(stack, "Llm", plan=instance_plan())
    props = _alarm(stack, getattr(endpoint, method)())
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == ("AWS/SageMaker", name, statistic)


def test_4xx_errors_as_a_rate() -> None:
    stack = _stack()
    endpoint = LlmEndpoint(stack, "Llm", plan=instance_plan())
    props = _alarm(stack, endpoint.metric_errors("4XX", statistic="Average", period=Duration.minutes(5)))
    assert (props["MetricName"], props["Statistic"], props["Period"]) == ("Invocation4XXErrors", "Average", 300)


def test_gpu_utilization_is_in_the_endpoints_namespace() -> None:
    stack = _stack()
    endpoint = LlmEndpoint(stack, "Llm", plan=instance_plan())
    props = _alarm(stack, endpoint.metric_gpu_utilization())
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        "/aws/sagemaker/Endpoints", "GPUUtilization", "Average")
    assert [d["Name"] for d in props["Dimensions"]] == ["EndpointName", "VariantName"]  # type: ignore[index]


def test_inference_component_endpoints_measure_by_component() -> None:
    stack = _stack()
    endpoint = LlmEndpoint(stack, "Llm", plan=two_model_plan())
    first, second = endpoint.inference_component_names.values()
    props = _alarm(stack, endpoint.metric_invocations(model=list(endpoint.inference_component_names)[1]))
    assert props["Dimensions"] == [{"Name": "InferenceComponentName", "Value": stack.resolve(second)}]
    assert stack.resolve(first) != stack.resolve(second)
    # Utilisation stays per endpoint variant (what /aws/sagemaker/Endpoints publishes).
    gpu = endpoint.metric_gpu_utilization()
    assert set(gpu.dimensions or {}) == {"EndpointName", "VariantName"}
    per_copy = endpoint.metric_gpu_utilization(model=next(iter(endpoint.inference_component_names)))
    assert (per_copy.namespace, per_copy.metric_name) == ("/aws/sagemaker/InferenceComponents",
                                                          "GPUUtilizationNormalized")
    assert set(per_copy.dimensions or {}) == {"InferenceComponentName"}
    with pytest.raises(ValueError, match="not on this endpoint"):
        endpoint.metric_model_latency(model="nope")


def test_an_endpoint_by_name_has_the_same_metrics_and_grants_invoke_on_its_arn() -> None:
    stack = _stack()
    imported = LlmEndpoint.from_endpoint_name(stack, "Other", "prod-chat")
    arn = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":sagemaker:us-east-1:111122223333:endpoint/prod-chat"]]}
    assert stack.resolve(imported.endpoint_arn) == arn
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    imported.grant_invoke(role)
    props = _alarm(stack, imported.metric_model_latency(statistic="p99"))
    assert props["Dimensions"] == [{"Name": "EndpointName", "Value": "prod-chat"},
                                   {"Name": "VariantName", "Value": "AllTraffic"}]
    assert props["ExtendedStatistic"] == "p99"
    Template.from_stack(stack).has_resource_properties("AWS::IAM::Policy", {"PolicyDocument": {"Statement": [{
        "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
        "Resource": arn}]}})
    Template.from_stack(stack).resource_count_is("AWS::SageMaker::Endpoint", 0)  # nothing is created


def test_an_endpoint_by_arn_reads_its_name_and_may_name_its_components() -> None:
    stack = _stack()
    arn = "arn:aws:sagemaker:us-east-1:444455556666:endpoint/shared"
    imported = LlmEndpoint.from_endpoint_arn(stack, "Shared", arn, inference_components={"chat": "shared-chat"})
    assert (imported.endpoint_name, imported.endpoint_arn) == ("shared", arn)
    props = _alarm(stack, imported.metric_errors())
    assert props["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "shared-chat"}]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("alarm_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_app_alarms_on_slow_p90_latency_and_5xx_errors() -> None:
    stack = _example().build(App(), "prod-chat")
    template = Template.from_stack(stack)
    template.resource_count_is(ALARM, 4)
    template.has_resource_properties(ALARM, {
        "MetricName": "ModelLatency", "ExtendedStatistic": "p90", "Threshold": 20_000_000, "EvaluationPeriods": 3,
        "Dimensions": Match.array_with([{"Name": "EndpointName", "Value": "prod-chat"}])})
    template.has_resource_properties(ALARM, {
        "MetricName": "Invocation5XXErrors", "Statistic": "Sum", "Threshold": 0,
        "ComparisonOperator": "GreaterThanThreshold",
        "Dimensions": Match.array_with([{"Name": "EndpointName", "Value": {"Fn::GetAtt": Match.any_value()}}])})


def test_an_endpoint_deployed_here_or_elsewhere_is_an_ILlmEndpoint() -> None:
    from typing import get_type_hints

    from sagellm.constructs import ILlmEndpoint

    stack = _stack()
    imported = LlmEndpoint.from_endpoint_name(stack, "Other", "prod-chat")
    by_arn = LlmEndpoint.from_endpoint_arn(stack, "Shared", "arn:aws:sagemaker:us-east-1:444455556666:endpoint/shared")
    deployed = LlmEndpoint(stack, "Llm", plan=instance_plan())
    assert all(isinstance(e, ILlmEndpoint) for e in (imported, by_arn, deployed))
    assert get_type_hints(LlmEndpoint.from_endpoint_name)["return"] is ILlmEndpoint
    assert get_type_hints(LlmEndpoint.from_endpoint_arn)["return"] is ILlmEndpoint
    assert not isinstance(stack, ILlmEndpoint)

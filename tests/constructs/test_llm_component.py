"""LlmComponent: one model as an inference component of its own, added to an LlmEndpoint or to an endpoint deployed
elsewhere, with its own scaling, rollback alarms, grant_invoke and metrics."""

from __future__ import annotations

import json

import pytest
from aws_cdk import Environment, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import lint
from construct_plans import cdk_app, instance_plan, scaled, two_model_plan

from sagellm.constructs import ILlmEndpoint, LlmComponent, LlmEndpoint
from sagellm.errors import InputError
from sagellm.profiles import DeploymentPlan, resolve
from sagellm.profiles.plan import InstanceScaling

MODEL = "AWS::SageMaker::Model"
ENDPOINT = "AWS::SageMaker::Endpoint"
COMPONENT = "AWS::SageMaker::InferenceComponent"
TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"
ALARM = "AWS::CloudWatch::Alarm"
ENV = Environment(account="111122223333", region="us-east-1")


def one_model(index: int, **scaling: object) -> DeploymentPlan:
    """The inference-component plan of one of two_model_plan's models (0: Llama 2 13B, 1: Mistral 7B), scaled."""
    plan = two_model_plan()
    return scaled(plan.model_copy(update={"models": (plan.models[index],)}), **scaling)


def stack() -> Stack:
    return Stack(cdk_app(), "Stack", stack_name="sagellm-test", env=ENV)


def component_props(template: Template, name: str) -> dict:
    (props,) = (c["Properties"] for c in template.find_resources(COMPONENT).values()
                if c["Properties"]["InferenceComponentName"] == name)
    return props


@pytest.fixture(scope="module")
def shared() -> tuple[Template, Stack, LlmEndpoint, LlmComponent]:
    """Llama 2 13B by LlmEndpoint (1..4 copies, target 100) and Mistral 7B added beside it (0..2, target 3)."""
    where = stack()
    endpoint = LlmEndpoint(where, "Llm", plan=one_model(0))
    mistral = LlmComponent(where, "Mistral", endpoint=endpoint, plan=one_model(1, min_capacity=0, max_capacity=2,
                                                                               target_value=3))
    return Template.from_stack(where), where, endpoint, mistral


def test_two_models_share_one_endpoint_each_as_its_own_component(shared) -> None:
    template, where, endpoint, mistral = shared
    template.resource_count_is(ENDPOINT, 1)
    template.resource_count_is(MODEL, 2)
    template.resource_count_is(COMPONENT, 2)
    (llama,) = endpoint.inference_component_names.values()
    assert mistral.component_name != llama and mistral.component_name.startswith("sagellm-test-mistral-7b-")
    props = component_props(template, mistral.component_name)
    # On the LlmEndpoint's endpoint, running this construct's own model.
    assert where.resolve(endpoint.endpoint_name) == props["EndpointName"]
    assert props["VariantName"] == "AllTraffic"
    (model_id,) = (i for i, m in template.find_resources(MODEL).items()
                   if m["Properties"]["PrimaryContainer"]["Environment"]["HF_MODEL_ID"] == "mistralai/Mistral-7B-v0.1")
    assert props["Specification"]["ModelName"] == {"Fn::GetAtt": [model_id, "ModelName"]}
    assert props["Specification"]["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"] == 1
    assert props["RuntimeConfig"] == {"CopyCount": 4}


def test_each_component_scales_its_own_copies(shared) -> None:
    template, _, endpoint, mistral = shared
    (llama,) = endpoint.inference_component_names.values()
    targets = {t["Properties"]["ResourceId"]: t["Properties"] for t in template.find_resources(TARGET).values()}
    assert {r: (t["MinCapacity"], t["MaxCapacity"]) for r, t in targets.items()} == {
        f"inference-component/{llama}": (1, 4), f"inference-component/{mistral.component_name}": (0, 2)}
    tracked = sorted(p["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
                     for p in template.find_resources(POLICY).values()
                     if p["Properties"]["PolicyType"] == "TargetTrackingScaling")
    assert tracked == [3, 100]
    # Mistral scales to zero: the step policy and its alarm on its own NoCapacityInvocationFailures.
    template.has_resource_properties(ALARM, {
        "MetricName": "NoCapacityInvocationFailures",
        "Dimensions": [{"Name": "InferenceComponentName", "Value": mistral.component_name}]})
    # The target names the component instead of referencing it: it waits for this construct's component.
    (target_id,) = (i for i, t in template.find_resources(TARGET).items()
                    if t["Properties"]["ResourceId"].endswith(mistral.component_name))
    assert any(dep.startswith("MistralComponent") for dep in template.to_json()["Resources"][target_id]["DependsOn"])


def test_a_component_rolls_out_and_caches_as_the_endpoints_own_components_do(shared) -> None:
    template, _, endpoint, mistral = shared
    (llama,) = endpoint.inference_component_names.values()
    own, added = component_props(template, llama), component_props(template, mistral.component_name)
    assert added["Specification"]["DataCacheConfig"] == own["Specification"]["DataCacheConfig"] == {
        "EnableCaching": True}
    assert added["Specification"]["StartupParameters"] == own["Specification"]["StartupParameters"]
    policy = added["DeploymentConfig"]["RollingUpdatePolicy"]
    assert policy == own["DeploymentConfig"]["RollingUpdatePolicy"]
    # Its rollback alarms are its own: 5XX errors and p90 latency by its InferenceComponentName.
    alarms = added["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    assert [a["AlarmName"]["Ref"][:len("MistralComponent")] for a in alarms] == ["MistralComponent"] * 2
    for metric in ("Invocation5XXErrors", "ModelLatency"):
        template.has_resource_properties(ALARM, {
            "MetricName": metric,
            "Dimensions": [{"Name": "InferenceComponentName", "Value": mistral.component_name}]})


def test_grant_invoke_allows_invoking_the_endpoint_and_nothing_else() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=one_model(0))
    added = LlmComponent(where, "Mistral", endpoint=host, plan=one_model(1))
    caller = iam.Role(where, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    added.grant_invoke(caller)
    (policy,) = (p for i, p in Template.from_stack(where).find_resources("AWS::IAM::Policy").items()
                 if i.startswith("CallerDefaultPolicy"))
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [{
        "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
        "Effect": "Allow", "Resource": where.resolve(host.endpoint_arn)}]


def test_metrics_are_the_components_own(shared) -> None:
    _, _, endpoint, mistral = shared
    for metric in (mistral.metric_model_latency(), mistral.metric_invocations(), mistral.metric_errors("4XX")):
        assert metric.dimensions == {"InferenceComponentName": mistral.component_name}
    latency = mistral.metric_model_latency()
    assert (latency.namespace, latency.metric_name, latency.statistic) == ("AWS/SageMaker", "ModelLatency", "p90")
    gpu = mistral.metric_gpu_utilization()
    assert (gpu.namespace, gpu.metric_name) == ("/aws/sagemaker/InferenceComponents", "GPUUtilizationNormalized")
    assert gpu.dimensions == {"InferenceComponentName": mistral.component_name}
    # The endpoint's metrics stay its own model's.
    (llama,) = endpoint.inference_component_names.values()
    assert endpoint.metric_invocations().dimensions == {"InferenceComponentName": llama}
    assert isinstance(mistral, ILlmEndpoint)


def test_a_component_joins_an_endpoint_deployed_elsewhere_by_name() -> None:
    where = stack()
    shared_endpoint = LlmEndpoint.from_endpoint_name(where, "Shared", "shared-p4d")
    added = LlmComponent(where, "Mistral", endpoint=shared_endpoint, plan=one_model(1))
    template = Template.from_stack(where)
    template.resource_count_is(ENDPOINT, 0)
    template.resource_count_is("AWS::SageMaker::EndpointConfig", 0)
    template.resource_count_is(MODEL, 1)
    template.resource_count_is(COMPONENT, 1)
    template.has_resource_properties(COMPONENT, {"EndpointName": "shared-p4d", "VariantName": "AllTraffic",
                                                 "InferenceComponentName": added.component_name})
    # Its own least-privilege execution role, which may write the component's log group and nothing else's.
    template.resource_count_is("AWS::IAM::Role", 1)
    template.has_resource_properties(MODEL, {"ExecutionRoleArn": {"Fn::GetAtt": [Match.string_like_regexp(
        "^MistralRole"), "Arn"]}})
    template.has_resource_properties("AWS::IAM::Policy", {"PolicyDocument": {"Statement": Match.array_with([
        Match.object_like({"Sid": "WriteEndpointLogs", "Resource": [
            f"arn:aws:logs:us-east-1:111122223333:log-group:/aws/sagemaker/InferenceComponents/{added.component_name}",
            (f"arn:aws:logs:us-east-1:111122223333:log-group:/aws/sagemaker/InferenceComponents/{added.component_name}"
            ":log-stream:*")]})])}})
    assert added.metric_errors().dimensions == {"InferenceComponentName": added.component_name}


def test_the_templates_pass_cfn_lint(shared) -> None:
    template, _, _, _ = shared
    where = stack()
    LlmComponent(where, "Mistral", endpoint=LlmEndpoint.from_endpoint_name(where, "Shared", "shared-p4d"),
                 plan=one_model(1))
    for each in (template, Template.from_stack(where)):
        assert [f"{m.rule.id} {m.message}" for m in lint(json.dumps(each.to_json()), regions=["us-east-1"])] == []


def test_rejects_an_instance_based_endpoint() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=instance_plan())
    with pytest.raises(InputError) as caught:
        LlmComponent(where, "Mistral", endpoint=host, plan=one_model(1))
    assert caught.value.messages == [(
        "Stack/Mistral: endpoint: Stack/Llm is instance-based and cannot host inference components; deploy it from "
        "an inference-component plan (e.g. the replicas profile)")]


def test_rejects_a_plan_that_is_not_one_inference_component_on_the_endpoints_instances() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=one_model(0))
    for index, (plan, expected) in enumerate([
        (instance_plan(), "plan.endpoint_kind: 'instance'; a component needs an inference-component plan"),
        (two_model_plan(), "plan.models: a component serves exactly one model, got 2"),
        (one_model(1).model_copy(update={"instance_type": "ml.g5.12xlarge"}),
         "plan.instance_type: ml.g5.12xlarge but endpoint Stack/Llm runs ml.p4d.24xlarge"),
    ]):
        with pytest.raises(InputError) as caught:
            LlmComponent(where, f"Bad{index}", endpoint=host, plan=plan)
        assert any(expected in m for m in caught.value.messages), caught.value.messages


def test_checks_its_plan_as_llm_endpoint_does() -> None:
    plan = one_model(1, min_capacity=3, max_capacity=2).model_copy(update={"hf_token_secret": None})
    where = stack()
    with pytest.raises(InputError) as caught:
        LlmComponent(where, "Mistral", endpoint=LlmEndpoint.from_endpoint_name(where, "Shared", "shared"), plan=plan)
    assert "Stack/Mistral: plan.scaling.max_capacity: 2 must not be below min_capacity (3)" in caught.value.messages
    assert any("gated" in m for m in caught.value.messages)


def test_only_the_endpoint_warns_that_its_instances_stay_when_copies_scale_to_zero() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=one_model(0, min_capacity=0))
    LlmComponent(where, "Mistral", endpoint=host, plan=one_model(1, min_capacity=0))
    warnings = Annotations.from_stack(where).find_warning("*", Match.string_like_regexp("instances stay"))
    assert [w.id for w in warnings] == ["/Stack/Llm"]


@pytest.mark.slow
def test_aws_solutions_pack_passes_on_components_added_here_and_to_an_endpoint_elsewhere(tmp_path) -> None:
    app = cdk_app(outdir=str(tmp_path))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    where = Stack(app, "Stack", env=ENV)
    host = LlmEndpoint(where, "Llm", plan=one_model(0))
    LlmComponent(where, "Mistral", endpoint=host, plan=one_model(1, min_capacity=0))
    LlmComponent(where, "Elsewhere", endpoint=LlmEndpoint.from_endpoint_name(where, "Shared", "shared-p4d"),
                 plan=one_model(1))
    app.synth()  # raises on any unacknowledged AwsSolutions finding
    assert json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"] == []


LLAMA31_8B = "meta-llama/Llama-3.1-8B-Instruct"


def replicas_on_g5(copies: int | None = None, profile: str = "replicas") -> DeploymentPlan:
    """Llama 3.1 8B on ml.g5.12xlarge (4 GPUs): `replicas` puts one copy per GPU, each reserving 1 GPU."""
    return resolve(profile, LLAMA31_8B, "ml.g5.12xlarge", copies=copies, hf_token_secret="prod/huggingface/token")


def test_refuses_in_one_line_a_component_whose_copies_the_endpoints_instances_cannot_hold() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=replicas_on_g5())  # 4 copies × 1 GPU: the instance's 4 GPUs
    with pytest.raises(InputError) as caught:
        LlmComponent(where, "Extra", endpoint=host, plan=replicas_on_g5(copies=1))
    assert caught.value.messages == [(
        "Stack/Extra: plan.models: its 1 copy at the start cannot join endpoint Stack/Llm: beside the 4 copies already "
        "there, the starting copies need 2 × ml.g5.12xlarge but the endpoint may have 1 (1 accelerator over, 2 CPU "
        "cores over), and SageMaker places no copy beyond its instances; raise the endpoint plan's "
        "initial_instance_count to 2, or start fewer copies here or there")]


def test_components_that_fit_the_endpoints_instances_join_it_without_a_warning() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=replicas_on_g5(copies=3))
    LlmComponent(where, "Extra", endpoint=host, plan=replicas_on_g5(copies=1))
    Template.from_stack(where).resource_count_is(COMPONENT, 2)
    assert Annotations.from_stack(where).find_warning("*", Match.string_like_regexp("most copies")) == []


def test_with_instance_scaling_the_endpoints_most_instances_hold_the_starting_copies() -> None:
    # SageMaker adds instances as copies need them, up to MaxInstanceCount.
    plan = replicas_on_g5().model_copy(update={"instance_scaling": InstanceScaling(min_instance_count=1,
                                                                                   max_instance_count=2)})
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=plan)
    LlmComponent(where, "Extra", endpoint=host, plan=replicas_on_g5(copies=4))
    with pytest.raises(InputError) as caught:
        LlmComponent(where, "More", endpoint=host, plan=replicas_on_g5(copies=1))
    assert "raise the endpoint plan's instance_scaling.max_instance_count to 3" in caught.value.messages[0]


def test_warns_where_the_components_most_copies_together_outgrow_the_endpoint() -> None:
    where = stack()
    host = LlmEndpoint(where, "Llm", plan=replicas_on_g5(copies=3))
    LlmComponent(where, "Chat", endpoint=host, plan=replicas_on_g5(profile="scale-to-zero"))  # 1 copy, at most 4
    (warning,) = Annotations.from_stack(where).find_warning("*", Match.string_like_regexp("most copies"))
    assert warning.id == "/Stack/Chat"
    assert warning.entry.data.startswith(
        "endpoint Stack/Llm: its components at their scaling's most copies (7) need 2 × ml.g5.12xlarge but it may "
        "have 1 (3 accelerators over")


def test_the_package_exports_the_constructs_and_the_endpoint_interface_they_take() -> None:
    import sagellm
    from sagellm import ILlmEndpoint as exported
    from sagellm import constructs

    assert exported is ILlmEndpoint
    assert sagellm.__all__ == constructs.__all__ == ["BenchStep", "ILlmEndpoint", "LlmComponent", "LlmEndpoint"]

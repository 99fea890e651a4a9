"""Two endpoints serving the same model from one stack deploy through CloudFormation (the local AWS, which
refuses a second inference component of the same name as SageMaker does)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import BootstraplessSynthesizer, Stack
from aws_cdk.assertions import Template
from construct_plans import HF_SECRET, cdk_app, scaled, tgi_model, two_model_plan

from sagellm.aws.local import LocalAws
from sagellm.constructs import LlmEndpoint
from sagellm.profiles import DeploymentPlan, resolve
from sagellm.profiles.plan import ComputeRequirements
from sagellm.stacks import EndpointStack

pytestmark = pytest.mark.integration


def test_two_endpoints_of_one_model_in_one_stack_deploy_and_delete(server: LocalAws) -> None:
    server.reset()
    stack = Stack(cdk_app(), "Shared", stack_name="sagellm-shared", synthesizer=BootstraplessSynthesizer())
    chat = LlmEndpoint(stack, "Chat", plan=two_model_plan())
    batch = LlmEndpoint(stack, "Batch", plan=two_model_plan())
    template = json.dumps(Template.from_stack(stack).to_json())

    cfn = server.client("cloudformation")
    cfn.create_stack(StackName="sagellm-shared", TemplateBody=template, Capabilities=["CAPABILITY_IAM"])
    status = cfn.describe_stacks(StackName="sagellm-shared")["Stacks"][0]["StackStatus"]
    reasons = [e.get("ResourceStatusReason") for e in cfn.describe_stack_events(StackName="sagellm-shared")
               ["StackEvents"] if "FAILED" in e["ResourceStatus"]]
    assert status == "CREATE_COMPLETE", reasons

    sagemaker = server.client("sagemaker")
    deployed = {c["InferenceComponentName"] for c in sagemaker.list_inference_components()["InferenceComponents"]}
    assert deployed == {*chat.inference_component_names.values(), *batch.inference_component_names.values()}
    assert len(deployed) == 4 and len(sagemaker.list_endpoints()["Endpoints"]) == 2

    cfn.delete_stack(StackName="sagellm-shared")
    assert server.leftovers() == {}


def autoscale_template(instance: str) -> str:
    """The autoscale stack's template on `instance` (as `-c instance=…` makes it)."""
    plan = resolve("autoscale", "meta-llama/Llama-2-7b-hf", instance, hf_token_secret=HF_SECRET)
    stack = EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-autoscale",
                          synthesizer=BootstraplessSynthesizer())
    return json.dumps(Template.from_stack(stack).to_json())


def test_a_new_instance_type_on_an_autoscaled_endpoint_replaces_the_endpoint_and_its_scaling(
        server: LocalAws) -> None:
    """SageMaker refuses UpdateEndpoint to change the instance type of a variant registered as a scalable target;
    the stack therefore makes a new endpoint (its logical id carries the instance type), moves the scaling to it
    and deletes the old one. What moto cannot show: SageMaker's refusal itself (moto updates anything),
    CloudFormation's replacement order (moto points the new endpoint at the old config's name), and the policy
    following its target (moto re-creates a resource only when its own JSON changes, not when a Ref it holds
    resolves anew, so the policy goes with the old target). What it shows: one endpoint, the new one, and the
    scalable target on it, with the update complete and nothing left after deletion."""
    server.reset()
    cfn, sagemaker = server.client("cloudformation"), server.client("sagemaker")
    autoscaling = server.client("application-autoscaling")
    cfn.create_stack(StackName="sagellm-autoscale", TemplateBody=autoscale_template("ml.g6.xlarge"),
                     Capabilities=["CAPABILITY_IAM"])
    [before] = [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]

    cfn.update_stack(StackName="sagellm-autoscale", TemplateBody=autoscale_template("ml.g6.2xlarge"),
                     Capabilities=["CAPABILITY_IAM"])
    assert cfn.describe_stacks(StackName="sagellm-autoscale")["Stacks"][0]["StackStatus"] == "UPDATE_COMPLETE"
    [after] = [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]
    assert "LlmEndpointMlG6Xlarge" in before and "LlmEndpointMlG62xlarge" in after
    [target] = autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert target["ResourceId"] == f"endpoint/{after}/variant/AllTraffic"
    assert target["MinCapacity"] >= 1

    cfn.delete_stack(StackName="sagellm-autoscale")
    assert server.leftovers() == {}


def scaled_components(target: float = 100.0, **changes: object) -> DeploymentPlan:
    """Two models as inference components, 2 copies each at the start, their copies scaled 1..4."""
    compute = ComputeRequirements(accelerators=1, cpu_cores=10, min_memory_mib=102400)
    models = (tgi_model("llama2-13b", "meta-llama/Llama-2-13b-hf", 1, compute=compute, copies=2),
              tgi_model("mistral-7b", "mistralai/Mistral-7B-v0.1", 1, compute=compute, copies=2))
    return scaled(two_model_plan(models=models, **changes), target_value=target)


def components_template(plan: DeploymentPlan) -> str:
    stack = EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-replicas",
                          synthesizer=BootstraplessSynthesizer())
    return json.dumps(Template.from_stack(stack).to_json())


def test_a_stack_update_leaves_the_copies_the_scaler_added(server: LocalAws) -> None:
    """Application Auto Scaling sets a component's copies with UpdateInferenceComponentRuntimeConfig; a later
    stack update that does not change the component (here: the scaling target) leaves them: CloudFormation, as
    moto, calls a resource's update handler only when its properties changed. An update that does change the
    component (here: its start-up timeouts) sends the template's copy count again: the local AWS assumes the
    worst of CloudFormation's handler (not public), so the copies fall back to the plan's until the scaler acts."""
    server.reset()
    cfn, sagemaker = server.client("cloudformation"), server.client("sagemaker")
    autoscaling = server.client("application-autoscaling")

    def update(plan: DeploymentPlan) -> None:
        cfn.update_stack(StackName="sagellm-replicas", TemplateBody=components_template(plan),
                         Capabilities=["CAPABILITY_IAM"])
        assert cfn.describe_stacks(StackName="sagellm-replicas")["Stacks"][0]["StackStatus"] == "UPDATE_COMPLETE"

    def copies() -> dict[str, int]:
        listed = sagemaker.list_inference_components()["InferenceComponents"]
        return {c["InferenceComponentName"]: sagemaker.describe_inference_component(
            InferenceComponentName=c["InferenceComponentName"])["RuntimeConfig"]["DesiredCopyCount"]
            for c in listed}

    cfn.create_stack(StackName="sagellm-replicas", TemplateBody=components_template(scaled_components()),
                     Capabilities=["CAPABILITY_IAM"])
    llama, mistral = sorted(copies())
    assert copies() == {llama: 2, mistral: 2}
    sagemaker.update_inference_component_runtime_config(InferenceComponentName=llama,
                                                         DesiredRuntimeConfig={"CopyCount": 4})

    update(scaled_components(target=50.0))
    assert copies() == {llama: 4, mistral: 2}
    targets = {p["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
               for p in autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]}
    assert targets == {50.0}

    update(scaled_components(target=50.0, startup_health_check_timeout_s=1500))
    assert copies() == {llama: 2, mistral: 2}

    cfn.delete_stack(StackName="sagellm-replicas")
    assert server.leftovers() == {}


def test_the_scale_to_zero_stack_deploys_with_its_alarm_acting_on_the_step_policy(server: LocalAws) -> None:
    server.reset()
    plan = resolve("scale-to-zero", "meta-llama/Llama-2-7b-hf", hf_token_secret=HF_SECRET)
    stack = EndpointStack(cdk_app(), "Stack", plan=plan, stack_name="sagellm-stz",
                          synthesizer=BootstraplessSynthesizer())
    cfn = server.client("cloudformation")
    cfn.create_stack(StackName="sagellm-stz", TemplateBody=json.dumps(Template.from_stack(stack).to_json()),
                     Capabilities=["CAPABILITY_IAM"])
    status = cfn.describe_stacks(StackName="sagellm-stz")["Stacks"][0]["StackStatus"]
    reasons = [e.get("ResourceStatusReason") for e in cfn.describe_stack_events(StackName="sagellm-stz")
               ["StackEvents"] if "FAILED" in e["ResourceStatus"]]
    assert status == "CREATE_COMPLETE", reasons
    autoscaling = server.client("application-autoscaling")
    [target] = autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert (target["ScalableDimension"], target["MinCapacity"]) == ("sagemaker:inference-component:DesiredCopyCount", 0)
    policies = autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    [step] = [p for p in policies if p["PolicyType"] == "StepScaling"]
    alarms = server.client("cloudwatch").describe_alarms()["MetricAlarms"]
    # Beside the component's two rollback alarms (5XX errors, p90 latency), one on no-capacity failures.
    assert sorted(a["MetricName"] for a in alarms) == ["Invocation5XXErrors", "ModelLatency",
                                                       "NoCapacityInvocationFailures"]
    [alarm] = [a for a in alarms if a["MetricName"] == "NoCapacityInvocationFailures"]
    assert alarm["MetricName"] == "NoCapacityInvocationFailures" and alarm["AlarmActions"] == [step["PolicyARN"]]
    component = target["ResourceId"].removeprefix("inference-component/")
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": component}]
    cfn.delete_stack(StackName="sagellm-stz")
    assert server.leftovers() == {}

"""LlmEndpoint and EndpointStack: the template each plan produces."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.assertions import Annotations, Match, Template
from construct_plans import (
    HF_SECRET,
    INSTANCE_PROFILES,
    cdk_app,
    instance_plan,
    scaled,
    synth,
    two_model_plan,
)

from sagellm.constructs import LlmEndpoint
from sagellm.errors import InputError
from sagellm.profiles import DeploymentPlan
from sagellm.profiles.plan import VERSION_TAG, pascal
from sagellm.stacks import EndpointStack

MODEL = "AWS::SageMaker::Model"
CONFIG = "AWS::SageMaker::EndpointConfig"
ENDPOINT = "AWS::SageMaker::Endpoint"
COMPONENT = "AWS::SageMaker::InferenceComponent"
TARGET = "AWS::ApplicationAutoScaling::ScalableTarget"
POLICY = "AWS::ApplicationAutoScaling::ScalingPolicy"
TOKEN_REF = f"{{{{resolve:secretsmanager:{HF_SECRET}:SecretString:::}}}}"
COMPONENT_NAME = r"^{stack}-{model}-[0-9a-f]{{6}}$"


def endpoint_template(plan: DeploymentPlan, **kwargs: object) -> tuple[Template, LlmEndpoint, Stack]:
    """A bare stack holding one LlmEndpoint built with `kwargs` (CDK objects need the stack first)."""
    stack = Stack(cdk_app(), "Stack", stack_name="sagellm-test")
    factories = {key: value(stack) if callable(value) else value for key, value in kwargs.items()}
    endpoint = LlmEndpoint(stack, "Llm", plan=plan, **factories)
    return Template.from_stack(stack), endpoint, stack


# --- instance-based profiles -------------------------------------------------------------------


@pytest.mark.parametrize("profile", INSTANCE_PROFILES)
@pytest.mark.slow
def test_model_runs_plan_image_with_exact_plan_environment(profile, plans, templates):
    plan = plans[profile]
    templates[profile].resource_count_is(MODEL, 1)
    templates[profile].has_resource_properties(
        MODEL,
        {
            "PrimaryContainer": {
                "Image": plan.primary.image_uri,
                # The plan's environment and the gated model's token, as a dynamic reference only.
                "Environment": Match.exact({**plan.environment, "HF_TOKEN": TOKEN_REF}),
            },
            "ExecutionRoleArn": {"Fn::GetAtt": [Match.string_like_regexp("^LlmRole"), "Arn"]},
        },
    )


@pytest.mark.parametrize("profile", INSTANCE_PROFILES)
def test_variant_carries_instance_type_count_and_startup_guards(profile, plans, templates):
    plan = plans[profile]
    templates[profile].has_resource_properties(
        CONFIG,
        {
            "ProductionVariants": [
                Match.object_equals(
                    {
                        "VariantName": "AllTraffic",
                        "ModelName": {"Fn::GetAtt": [Match.string_like_regexp("^LlmModel"), "ModelName"]},
                        "InstanceType": plan.instance_type,
                        "InitialInstanceCount": plan.initial_instance_count,
                        "InitialVariantWeight": 1,
                        "ContainerStartupHealthCheckTimeoutInSeconds": plan.startup_health_check_timeout_s,
                        "ModelDataDownloadTimeoutInSeconds": plan.model_data_download_timeout_s,
                        # Several instances may serve (two from the start, or the scaler's): least outstanding
                        # requests routing, else SageMaker's default.
                        **({"RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}
                           if plan.initial_instance_count > 1 or (plan.scaling and plan.scaling.max_capacity > 1)
                           else {}),
                    }
                )
            ],
            "ExecutionRoleArn": Match.absent(),
            "KmsKeyId": Match.absent(),
        },
    )
    templates[profile].has_resource_properties(
        ENDPOINT,
        {
            "EndpointConfigName": {
                "Fn::GetAtt": [Match.string_like_regexp("^LlmConfig"), "EndpointConfigName"]
            }
        },
    )


def test_min_latency_runs_one_sequence_at_a_time_over_all_gpus_and_queues_the_rest(plans, templates):
    env = (
        templates["min-latency"]
        .find_resources(MODEL)
        .popitem()[1]["Properties"]["PrimaryContainer"]["Environment"]
    )
    # TGI 3.3.6 honours MAX_BATCH_SIZE only with prefill chunking off; callers beyond it queue (no 429).
    assert (env["MAX_BATCH_SIZE"], env["PREFILL_CHUNKING"]) == ("1", "0")
    assert int(env["MAX_CONCURRENT_REQUESTS"]) > 1
    assert env["SM_NUM_GPUS"] == str(plans["min-latency"].primary.tensor_parallel)


def test_volume_size_is_set_only_when_the_plan_asks():
    template = synth(instance_plan(instance_type="ml.inf2.8xlarge", volume_size_gb=120))
    template.has_resource_properties(
        CONFIG, {"ProductionVariants": [Match.object_like({"VolumeSizeInGB": 120})]}
    )
    template = synth(instance_plan())
    template.has_resource_properties(
        CONFIG, {"ProductionVariants": [Match.object_like({"VolumeSizeInGB": Match.absent()})]}
    )


@pytest.mark.parametrize("profile", ["min-latency", "max-throughput", "min-cost", "replicas"])
def test_profiles_without_scaling_create_no_scaling_resources(profile, templates):
    templates[profile].resource_count_is(TARGET, 0)
    templates[profile].resource_count_is(POLICY, 0)


def test_autoscale_starts_with_several_instances_and_tracks_concurrent_requests_per_instance(plans, templates):
    plan, template = plans["autoscale"], templates["autoscale"]
    assert plan.initial_instance_count > 1 and plan.scaling is not None
    template.has_resource_properties(
        CONFIG,
        {"ProductionVariants": [Match.object_like({"InitialInstanceCount": plan.initial_instance_count})]},
    )
    template.has_resource_properties(
        TARGET,
        {
            "ServiceNamespace": "sagemaker",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "ResourceId": {
                "Fn::Join": [
                    "",
                    [
                        "endpoint/",
                        {"Fn::GetAtt": [Match.string_like_regexp("^LlmEndpoint"), "EndpointName"]},
                        "/variant/AllTraffic",
                    ],
                ]
            },
            "MinCapacity": plan.scaling.min_capacity,
            "MaxCapacity": plan.scaling.max_capacity,
            "RoleARN": Match.absent(),  # the service-linked role
        },
    )
    template.has_resource_properties(
        POLICY,
        {
            "PolicyType": "TargetTrackingScaling",
            "ScalingTargetId": {"Ref": Match.string_like_regexp("^LlmScalingTarget")},
            "TargetTrackingScalingPolicyConfiguration": {
                # In-flight requests per instance every 10 s (streams count until their last token).
                "PredefinedMetricSpecification": {
                    "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
                },
                "TargetValue": plan.scaling.target_value,
                "ScaleInCooldown": plan.scaling.scale_in_cooldown_s,
                "ScaleOutCooldown": plan.scaling.scale_out_cooldown_s,
            },
        },
    )
    template.resource_count_is("AWS::IAM::Role", 1)  # no extra role for Application Auto Scaling


def test_the_emulator_simulates_the_policy_the_autoscale_stack_deploys(plans, templates):
    # One source: the local ramp's target tracking reads the same plan fields the construct deploys.
    from sagellm.emulator import Emulator

    plan = plans["autoscale"]
    (policy,) = templates["autoscale"].find_resources(POLICY).values()
    deployed = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    emulator = Emulator(plan)
    assert emulator.autoscaling is not None
    simulated = emulator.autoscaling.to_dict()["policy"]
    assert simulated["metric"] == deployed["PredefinedMetricSpecification"]["PredefinedMetricType"]
    assert simulated["target"] == deployed["TargetValue"]
    assert simulated["scale_in_cooldown_s"] == deployed["ScaleInCooldown"]
    assert simulated["scale_out_cooldown_s"] == deployed["ScaleOutCooldown"]
    assert simulated["period_s"] == 10  # the high-resolution metric's datapoints
    (target,) = templates["autoscale"].find_resources(TARGET).values()
    assert (simulated["min_capacity"], simulated["max_capacity"]) == (
        target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"])


# --- inference components ----------------------------------------------------------------------


def test_replicas_endpoint_config_has_execution_role_and_no_model(plans, templates):
    plan = plans["replicas"]
    templates["replicas"].has_resource_properties(
        CONFIG,
        {
            "ExecutionRoleArn": {"Fn::GetAtt": [Match.string_like_regexp("^LlmRole"), "Arn"]},
            "ProductionVariants": [
                Match.object_equals(
                    {
                        "VariantName": "AllTraffic",
                        "InstanceType": plan.instance_type,
                        "InitialInstanceCount": plan.initial_instance_count,
                        # Two copies serve: least outstanding requests routing.
                        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
                    }
                )
            ],
        },
    )


def test_replicas_component_reserves_plan_compute_per_copy(plans, stacks, templates):
    plan = plans["replicas"]
    model = plan.primary
    name = stacks["replicas"].endpoint.inference_component_names[model.name]
    assert re.match(COMPONENT_NAME.format(stack="sagellm-replicas", model=model.name), name)
    assert model.compute is not None and plan.instance_type == "ml.p4d.24xlarge"
    templates["replicas"].resource_count_is(COMPONENT, 1)
    templates["replicas"].has_resource_properties(
        COMPONENT,
        {
            "InferenceComponentName": name,
            "EndpointName": {"Fn::GetAtt": [Match.string_like_regexp("^LlmEndpoint"), "EndpointName"]},
            "VariantName": "AllTraffic",
            "RuntimeConfig": {"CopyCount": model.copy_count},
            "Specification": {
                "ModelName": {"Fn::GetAtt": [Match.string_like_regexp("^LlmModel"), "ModelName"]},
                "ComputeResourceRequirements": {
                    "NumberOfAcceleratorDevicesRequired": model.compute.accelerators,
                    "NumberOfCpuCoresRequired": model.compute.cpu_cores,
                    "MinMemoryRequiredInMb": model.compute.min_memory_mib,
                },
                "StartupParameters": {
                    "ContainerStartupHealthCheckTimeoutInSeconds": plan.startup_health_check_timeout_s,
                    "ModelDataDownloadTimeoutInSeconds": plan.model_data_download_timeout_s,
                },
            },
        },
    )
    templates["replicas"].has_resource_properties(
        MODEL,
        {
            "PrimaryContainer": {
                "Image": model.image_uri,
                "Environment": Match.exact({**model.environment, "HF_TOKEN": TOKEN_REF}),
            }
        },
    )
    templates["replicas"].has_output(f"ComponentName{'Llama213b'}", {"Value": name})


@pytest.mark.slow
def test_two_models_share_one_endpoint_as_separate_components():
    plan = two_model_plan()
    template, endpoint, _ = endpoint_template(plan)
    template.resource_count_is(ENDPOINT, 1)
    template.resource_count_is(MODEL, 2)
    template.resource_count_is(COMPONENT, 2)
    for model in plan.models:
        template.has_resource_properties(
            MODEL,
            {
                "PrimaryContainer": Match.object_like(
                    {"Environment": Match.object_like({"HF_MODEL_ID": model.model_id})}
                )
            },
        )
        template.has_resource_properties(
            COMPONENT,
            {
                "InferenceComponentName": endpoint.inference_component_names[model.name],
                "RuntimeConfig": {"CopyCount": 4},
            },
        )
    names = endpoint.inference_component_names
    assert set(names) == {m.name for m in plan.models}
    assert all(re.match(COMPONENT_NAME.format(stack="sagellm-test", model=m), n) for m, n in names.items())
    stack_template = synth(plan)
    # The same construct path (Stack/Llm) gives the same names in the EndpointStack.
    stack_template.has_output("ComponentNameLlama213b", {"Value": names["llama2-13b"]})
    stack_template.has_output("ComponentNameMistral7b", {"Value": names["mistral-7b"]})


def test_two_endpoints_of_one_model_in_one_stack_get_different_component_names():
    stack = Stack(cdk_app(), "Stack", stack_name="sagellm-test")
    first = LlmEndpoint(stack, "Chat", plan=two_model_plan())
    second = LlmEndpoint(stack, "Batch", plan=two_model_plan())
    names = [*first.inference_component_names.values(), *second.inference_component_names.values()]
    assert len(set(names)) == 4
    Template.from_stack(stack).resource_count_is(COMPONENT, 4)


def test_component_scaling_tracks_concurrent_requests_per_copy():
    plan = scaled(two_model_plan(), min_capacity=1, max_capacity=4, target_value=4)
    template, endpoint, _ = endpoint_template(plan)
    template.resource_count_is(TARGET, 2)
    for model in plan.models:
        template.has_resource_properties(
            TARGET,
            {
                "ResourceId": f"inference-component/{endpoint.inference_component_names[model.name]}",
                "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
                "MinCapacity": 1,
                "MaxCapacity": 4,
            },
        )
    template.has_resource_properties(
        POLICY,
        {
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
                    },
                    "TargetValue": 4,
                }
            )
        },
    )
    # The resource id names the component instead of referencing it: the target must wait for it.
    targets = template.find_resources(TARGET)
    assert all(any(dep.startswith("LlmComponent") for dep in t["DependsOn"]) for t in targets.values())


def test_component_names_stay_within_63_characters():
    stack = Stack(cdk_app(), "Stack", stack_name="sagellm-a-very-long-team-stack-name-for-a-shared-p4d-endpoint")
    endpoint = LlmEndpoint(stack, "Llm", plan=two_model_plan())
    names = list(endpoint.inference_component_names.values())
    assert all(len(n) <= 63 for n in names) and len(set(names)) == 2


# --- security ----------------------------------------------------------------------------------


def role_statements(template: Template) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    assert len(policies) == 1
    return policies.popitem()[1]["Properties"]["PolicyDocument"]["Statement"]


def test_execution_role_is_least_privilege(templates):
    template = templates["max-throughput"]
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": Match.object_like(
                {"Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]}
            ),
            "ManagedPolicyArns": Match.absent(),
        },
    )
    by_sid = {s["Sid"]: s for s in role_statements(template)}
    assert set(by_sid) == {"PullContainerImage", "RegistryLogin", "WriteEndpointLogs", "WriteEndpointMetrics"}
    assert by_sid["PullContainerImage"]["Resource"] == (
        "arn:aws:ecr:us-east-1:763104351884:repository/huggingface-pytorch-tgi-inference"
    )
    assert by_sid["RegistryLogin"]["Action"] == "ecr:GetAuthorizationToken"
    assert (
        by_sid["WriteEndpointLogs"]["Resource"]["Fn::Join"][1][-1] == ":log-group:/aws/sagemaker/Endpoints/*"
    )
    assert by_sid["WriteEndpointMetrics"]["Condition"] == {
        "StringEquals": {
            "cloudwatch:namespace": ["/aws/sagemaker/Endpoints", "/aws/sagemaker/InferenceComponents"]
        }
    }
    actions = [
        a for s in by_sid.values() for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]
    assert not any(
        a.endswith("*") or a.startswith(("secretsmanager:", "kms:", "s3:", "iam:")) for a in actions
    )


def test_kms_key_encrypts_endpoint_storage_and_only_that_key_is_granted():
    # An instance type without NVMe instance storage: its EBS volume takes the key.
    template, _, _ = endpoint_template(
        instance_plan(instance_type="ml.inf2.8xlarge"), kms_key=lambda s: kms.Key(s, "Key", enable_key_rotation=True)
    )
    template.has_resource_properties(
        CONFIG, {"KmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^Key"), "Arn"]}}
    )
    (kms_statement,) = [s for s in role_statements(template) if "kms:Decrypt" in s["Action"]]
    assert kms_statement["Action"] == [
        "kms:CreateGrant",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:GenerateDataKeyWithoutPlaintext",
    ]
    assert kms_statement["Resource"]["Fn::GetAtt"][0].startswith("Key")


def test_hf_token_reaches_the_container_only_as_a_secrets_manager_reference():
    template = synth(instance_plan(hf_token_secret="team/hf-token"))
    template.has_resource_properties(
        MODEL,
        {
            "PrimaryContainer": Match.object_like(
                {
                    "Environment": Match.object_like(
                        {"HF_TOKEN": "{{resolve:secretsmanager:team/hf-token:SecretString:::}}"}
                    )
                }
            )
        },
    )


def test_given_secret_is_referenced_and_overrides_the_plan_secret_name():
    template, _, _ = endpoint_template(
        instance_plan(hf_token_secret="ignored"),
        hf_token_secret=lambda s: secretsmanager.Secret.from_secret_name_v2(s, "Token", "team/hf"),
    )
    env = template.find_resources(MODEL).popitem()[1]["Properties"]["PrimaryContainer"]["Environment"]
    assert "{{resolve:secretsmanager:" in str(env["HF_TOKEN"]) and "team/hf" in str(env["HF_TOKEN"])
    assert "ignored" not in str(env)


@pytest.mark.slow
def test_vpc_places_model_in_private_subnets_with_an_egress_only_security_group():
    def vpc(stack: Stack) -> ec2.IVpc:
        return ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)

    template, _, _ = endpoint_template(instance_plan(), vpc=vpc)
    template.has_resource_properties(
        MODEL,
        {
            "VpcConfig": {
                "Subnets": [
                    {"Ref": Match.string_like_regexp("PrivateSubnet1")},
                    {"Ref": Match.string_like_regexp("PrivateSubnet2")},
                ],
                "SecurityGroupIds": [
                    {"Fn::GetAtt": [Match.string_like_regexp("^LlmSecurityGroup"), "GroupId"]}
                ],
            },
            "EnableNetworkIsolation": Match.absent(),
        },
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {"GroupDescription": Match.string_like_regexp("sagellm"), "SecurityGroupIngress": Match.absent()},
    )


def test_network_isolation_is_opt_in_and_warns_that_the_hub_is_unreachable():
    template, _, stack = endpoint_template(two_model_plan(), network_isolation=True)
    template.has_resource_properties(MODEL, {"EnableNetworkIsolation": True})
    template.has_resource_properties(CONFIG, {"EnableNetworkIsolation": True})
    Annotations.from_stack(stack).has_warning("/Stack/Llm", Match.string_like_regexp("Hugging Face Hub"))


def test_grant_invoke_allows_invoking_this_endpoint_only():
    stack = Stack(cdk_app(), "Stack")
    endpoint = LlmEndpoint(stack, "Llm", plan=instance_plan())
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    endpoint.grant_invoke(caller)
    Template.from_stack(stack).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": Match.string_like_regexp("^Caller")}],
            "PolicyDocument": {
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
                        "Resource": {"Ref": Match.string_like_regexp("^LlmEndpoint")},
                    }
                ],
                "Version": "2012-10-17",
            },
        },
    )


def test_given_role_is_used_and_no_role_is_created():
    def role(stack: Stack) -> iam.IRole:
        return iam.Role.from_role_arn(stack, "Given", "arn:aws:iam::123456789012:role/team-sagemaker")

    template, _, _ = endpoint_template(instance_plan(), role=role)
    template.resource_count_is("AWS::IAM::Role", 0)
    template.has_resource_properties(
        MODEL, {"ExecutionRoleArn": "arn:aws:iam::123456789012:role/team-sagemaker"}
    )


# --- shape of the construct and the stack ------------------------------------------------------


@pytest.mark.parametrize("profile", ["max-throughput", "replicas", "autoscale"])
def test_children_have_short_fixed_ids_and_resources_have_no_physical_names(profile, plans, stacks, templates):
    ids = {child.node.id for child in stacks[profile].endpoint.node.children}
    # A scaled instance-based endpoint is named by its instance type: a new type makes a new endpoint.
    endpoint = f"Endpoint{pascal(plans[profile].instance_type)}" if profile == "autoscale" else "Endpoint"
    expected = (
        {"Role", "Config", endpoint}
        | ({"ModelLlama213b", "ComponentLlama213b", "ComponentLlama213bErrors", "ComponentLlama213bLatency"}
           if profile == "replicas" else {"Model"})
        | ({"Scaling"} if profile == "autoscale" else set())
    )
    assert ids == expected
    physical_names = {
        MODEL: "ModelName",
        CONFIG: "EndpointConfigName",
        ENDPOINT: "EndpointName",
        "AWS::IAM::Role": "RoleName",
        "AWS::CloudWatch::Alarm": "AlarmName",
    }
    for resource in templates[profile].to_json()["Resources"].values():
        if resource["Type"] in physical_names:
            assert physical_names[resource["Type"]] not in resource["Properties"], resource["Type"]


@pytest.mark.parametrize("profile", ["min-latency", "replicas", "autoscale"])
def test_plan_tags_are_on_every_taggable_resource(profile, plans, templates):
    expected = [{"Key": k, "Value": v} for k, v in plans[profile].tags.items()]
    resources = templates[profile].to_json()["Resources"].values()
    tagged = [r for r in resources if r["Type"] not in ("AWS::IAM::Policy", POLICY)]
    assert tagged
    for resource in tagged:
        # A component leaves out the version tag (an upgrade must not update it: see the test below).
        wanted = [t for t in expected if t["Key"] != VERSION_TAG] if resource["Type"] == COMPONENT else expected
        assert all(tag in resource["Properties"]["Tags"] for tag in wanted), resource["Type"]


def test_stack_outputs_the_endpoint_name_and_runs_in_the_plan_region(stacks, templates):
    templates["max-throughput"].has_output(
        "EndpointName", {"Value": {"Fn::GetAtt": [Match.string_like_regexp("^LlmEndpoint"), "EndpointName"]}}
    )
    assert set(templates["max-throughput"].to_json()["Outputs"]) == {"EndpointName"}
    assert stacks["max-throughput"].region == "us-east-1"


@pytest.mark.slow
def test_llm_endpoint_imports_from_the_package_root_without_loading_cdk_on_import():
    code = "import sys, sagellm; assert 'aws_cdk' not in sys.modules; from sagellm import LlmEndpoint; print(LlmEndpoint.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "LlmEndpoint"


# --- validation --------------------------------------------------------------------------------


def validation_errors(plan: DeploymentPlan, **kwargs: object) -> list[str]:
    with pytest.raises(InputError) as caught:
        endpoint_template(plan, **kwargs)
    return caught.value.messages


def test_rejects_a_token_in_the_environment_naming_the_variable():
    model = instance_plan().primary
    env = {**model.environment, "HF_TOKEN": "hf_" + "a" * 30}
    (message,) = validation_errors(instance_plan(models=(model.model_copy(update={"environment": env}),)))
    assert "plan.models[0].environment.HF_TOKEN" in message and "hf_token_secret" in message
    assert "hf_aaaa" not in message  # the error never echoes the secret


def test_reports_every_problem_of_a_plan_at_once():
    plan = two_model_plan(endpoint_kind="instance", startup_health_check_timeout_s=5)
    bad_model = plan.models[1].model_copy(update={"image_uri": "docker.io/library/tgi:latest"})
    messages = validation_errors(plan.model_copy(update={"models": (plan.models[0], bad_model)}))
    assert any("exactly one model, got 2" in m for m in messages)
    assert any("plan.startup_health_check_timeout_s: 5" in m for m in messages)
    assert any("plan.models[1].image_uri" in m and "not an ECR image URI" in m for m in messages)
    assert all(m.startswith("Stack/Llm: ") for m in messages)


def test_rejects_components_without_compute_and_inverted_scaling_bounds():
    plan = scaled(two_model_plan(), min_capacity=4, max_capacity=2)
    plan = plan.model_copy(
        update={"models": (plan.models[0].model_copy(update={"compute": None}), plan.models[1])}
    )
    messages = validation_errors(plan)
    assert any("plan.models[0].compute: required" in m for m in messages)
    assert any("plan.scaling.max_capacity: 2 must not be below min_capacity (4)" in m for m in messages)


def test_rejects_security_groups_without_a_vpc():
    def groups(stack: Stack) -> list[ec2.ISecurityGroup]:
        return [ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-12345678")]

    assert any("without a vpc" in m for m in validation_errors(instance_plan(), security_groups=groups))


def test_rejects_an_initial_count_outside_the_scaling_bounds():
    assert validation_errors(scaled(instance_plan(initial_instance_count=6), max_capacity=4)) == [
        "Stack/Llm: plan.initial_instance_count: 6 lies outside the scaling bounds 1..4; start within them"
    ]


# --- what SageMaker refuses or ignores, caught at synth ------------------------------------------


def test_rejects_a_gated_model_without_a_token_secret():
    assert validation_errors(instance_plan(hf_token_secret=None)) == [
        ("Stack/Llm: meta-llama/Llama-2-7b-hf is gated on the Hugging Face Hub and no hf_token_secret is set: the "
        "endpoint would never start; store a token that has access in Secrets Manager and pass -c "
        "hf_token_secret=<secret name or ARN> (or hf_token_secret: in the profile)")
    ]
    # A secret given to the construct is enough; an ungated model needs none.
    endpoint_template(
        instance_plan(hf_token_secret=None),
        hf_token_secret=lambda s: secretsmanager.Secret.from_secret_name_v2(s, "Token", "team/hf"),
    )
    falcon = instance_plan().primary.model_copy(update={"model_id": "tiiuae/falcon-7b"})
    endpoint_template(instance_plan(hf_token_secret=None, models=(falcon,)))


def test_rejects_a_token_given_as_the_secret_name_in_the_words_of_every_other_path():
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    assert validation_errors(instance_plan(hf_token_secret=token)) == [
        ("Stack/Llm: plan.hf_token_secret: looks like a Hugging Face access token itself; give the name or ARN of "
        "the Secrets Manager secret that holds the token (e.g. prod/huggingface/token)")
    ]


def test_rejects_a_kms_key_on_an_instance_type_with_nvme_storage():
    assert validation_errors(instance_plan(), kms_key=lambda s: kms.Key(s, "Key", enable_key_rotation=True)) == [
        ("Stack/Llm: kms_key: ml.g5.12xlarge has NVMe instance storage, which SageMaker encrypts in hardware, and "
        "CreateEndpointConfig refuses a KmsKeyId for it; drop kms_key (the storage is encrypted already) or use an "
        "instance type without instance storage")
    ]


def test_rejects_a_volume_size_on_an_instance_type_with_nvme_storage():
    assert validation_errors(instance_plan(volume_size_gb=100)) == [
        ("Stack/Llm: plan.volume_size_gb: ml.g5.12xlarge brings its own NVMe storage and SageMaker refuses "
        "VolumeSizeInGB for it; leave volume_size_gb unset")
    ]


def log_groups(template: Template) -> list[str]:
    (statement,) = [s for s in role_statements(template) if s["Sid"] == "WriteEndpointLogs"]
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    return [r["Fn::Join"][1][-1] for r in resources]


def test_an_inference_component_role_writes_only_its_components_log_groups(stacks, templates):
    (component,) = stacks["replicas"].endpoint.inference_component_names.values()
    group = f":log-group:/aws/sagemaker/InferenceComponents/{component}"
    # The group, and its streams (PutLogEvents' resource): no other component's, and no endpoint's.
    assert log_groups(templates["replicas"]) == [group, f"{group}:log-stream:*"]
    # An instance-based endpoint's group is named after the endpoint, which CloudFormation names after the role.
    assert log_groups(templates["max-throughput"]) == [":log-group:/aws/sagemaker/Endpoints/*"]


def test_copies_beyond_one_instance_get_managed_instance_scaling_from_the_plan():
    from sagellm.profiles import resolve

    # 1..8 copies of Llama 2 13B at TP 2 on an 8-GPU p4d: 8 copies need two instances.
    plan = resolve("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", tensor_parallel=2, copies=1,
                   hf_token_secret=HF_SECRET)
    plan = scaled(plan, min_capacity=1, max_capacity=8)
    from sagellm.profiles.plan import InstanceScaling

    plan = plan.model_copy(update={"instance_scaling": InstanceScaling(min_instance_count=1, max_instance_count=2)})
    template, _, _ = endpoint_template(plan)
    template.has_resource_properties(
        CONFIG,
        {
            "ProductionVariants": [
                Match.object_like(
                    {"ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2}}
                )
            ]
        },
    )
    # Without the bounds the extra copies could never be placed.
    assert validation_errors(plan.model_copy(update={"instance_scaling": None})) == [
        ("Stack/Llm: plan.scaling.max_capacity: 8 copies per component need 2 × ml.p4d.24xlarge, but the endpoint "
        "may only have 1: the extra copies could never be placed; set instance_scaling (ManagedInstanceScaling) to "
        "at most 2 instances or lower max_capacity")
    ]


def test_rejects_starting_copies_that_one_instance_cannot_hold_and_bounds_that_exclude_the_start():
    from sagellm.profiles.plan import InstanceScaling

    plan = two_model_plan()
    too_many = plan.models[0].model_copy(update={"copy_count": 6})
    bounds = InstanceScaling(min_instance_count=2, max_instance_count=3)
    assert validation_errors(plan.model_copy(update={"models": (too_many, plan.models[1]), "instance_scaling": bounds})) == [
        "Stack/Llm: plan.instance_scaling: 2..3 instances must include initial_instance_count (1)",
        ("Stack/Llm: plan.models: the starting copies need 2 × ml.p4d.24xlarge but the endpoint starts with 1; raise "
        "initial_instance_count or lower copy_count or the per-copy compute"),
    ]
    assert validation_errors(instance_plan(instance_scaling=bounds)) == [
        "Stack/Llm: plan.instance_scaling: only inference-component endpoints scale instances for copies"
    ]


def test_an_lmi_plan_deploys_the_pinned_lmi_image_with_the_vllm_engine_named(tmp_path):
    from sagellm.profiles import resolve

    (tmp_path / "lmi.yaml").write_text("name: lmi\nextends: max-throughput\ncontainer: {kind: lmi}\n")
    plan = resolve("lmi", "meta-llama/Llama-2-7b-hf", "ml.g5.12xlarge", profiles_dir=tmp_path,
                   hf_token_secret=HF_SECRET)
    synth(plan).has_resource_properties(
        MODEL,
        {
            "PrimaryContainer": {
                "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.38.0-lmi29.0.0-cu130",
                "Environment": Match.exact({**plan.environment, "HF_TOKEN": TOKEN_REF}),
            }
        },
    )
    assert plan.environment["OPTION_ENTRYPOINT"] == "djl_python.lmi_vllm.vllm_async_service"
    # The CUDA 13 image's host: the AMI with NVIDIA driver 580 on the production variant.
    synth(plan).has_resource_properties(CONFIG, {"ProductionVariants": [Match.object_like({
        "InstanceType": "ml.g5.12xlarge", "InferenceAmiVersion": "al2023-ami-sagemaker-inference-gpu-4-1"})]})


@pytest.mark.slow
def test_an_inferentia_plan_deploys_the_neuronx_image_on_the_neuron_ami_with_the_neuron_timeouts(plans):
    from sagellm.profiles import resolve

    plan = resolve("max-throughput", "meta-llama/Llama-3.1-8B", "ml.inf2.xlarge", hf_token_secret=HF_SECRET)
    template = synth(plan)
    template.has_resource_properties(CONFIG, {"ProductionVariants": [Match.object_like({
        "InstanceType": "ml.inf2.xlarge", "InferenceAmiVersion": "al2-ami-sagemaker-inference-neuron-2",
        "ContainerStartupHealthCheckTimeoutInSeconds": 1800, "ModelDataDownloadTimeoutInSeconds": 1800})]})
    template.has_resource_properties(MODEL, {"PrimaryContainer": Match.object_like({
        "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:"
                 "2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04",
        "Environment": Match.object_like({"MODEL_ID": "meta-llama/Llama-3.1-8B",
                                          "HF_MODEL_ID": "meta-llama/Llama-3.1-8B"})})})
    # A GPU plan keeps SageMaker's default AMI.
    assert "InferenceAmiVersion" not in str(synth(plans["max-throughput"]).find_resources(CONFIG))


@pytest.mark.slow
def test_a_vllm_neuronx_plan_deploys_its_image_on_every_neuroncore_with_an_hour_to_compile() -> None:
    from sagellm.profiles import resolve

    plan = resolve("max-throughput", "Qwen/Qwen3-8B", "ml.inf2.24xlarge", hf_token_secret=HF_SECRET,
                   engine="vllm-neuronx")
    template = synth(plan)
    template.has_resource_properties(CONFIG, {"ProductionVariants": [Match.object_like({
        "InstanceType": "ml.inf2.24xlarge", "InferenceAmiVersion": "al2-ami-sagemaker-inference-neuron-2",
        "ContainerStartupHealthCheckTimeoutInSeconds": 3600, "ModelDataDownloadTimeoutInSeconds": 3600})]})
    template.has_resource_properties(MODEL, {"PrimaryContainer": Match.object_like({
        "Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-vllm-inference-neuronx:"
                 "0.11.0-optimum0.4.4-neuronx-py310-sdk2.26.1-ubuntu22.04",
        "Environment": Match.object_like({"SM_ON_MODEL": "Qwen/Qwen3-8B", "SM_ON_TENSOR_PARALLEL_SIZE": "12",
                                          "SM_ON_SEQUENCE_LENGTH": "4096", "SM_ON_ALLOW_NON_CACHED_MODEL": ""})})})


def endpoint_ids(plan: DeploymentPlan) -> set[str]:
    return set(synth(plan).find_resources(ENDPOINT))


@pytest.mark.slow
def test_only_a_scaled_variant_gets_a_new_endpoint_for_a_new_instance_type(plans) -> None:
    """SageMaker refuses UpdateEndpoint to change a scaled variant's instance type; an unscaled one updates."""
    scaled_plan, fixed = plans["autoscale"], plans["max-throughput"]
    assert endpoint_ids(scaled_plan) != endpoint_ids(scaled_plan.model_copy(update={"instance_type": "ml.g6.2xlarge"}))
    assert endpoint_ids(fixed) == endpoint_ids(fixed.model_copy(update={"instance_type": "ml.g6.2xlarge"}))
    [endpoint] = synth(scaled_plan).find_resources(ENDPOINT).values()
    # Updates keep the instance count the scaler set.
    assert endpoint["Properties"]["RetainAllVariantProperties"] is True
    [endpoint] = synth(fixed).find_resources(ENDPOINT).values()
    assert "RetainAllVariantProperties" not in endpoint["Properties"]


@pytest.mark.slow
def test_an_update_of_the_scaling_alone_leaves_the_components_as_they_were(plans) -> None:
    """CloudFormation calls a resource's update handler only when its properties change: a new target value
    changes the scaling policies and no inference component, so none is sent its copy count again. The template's
    count is the plan's starting copies, which only a change of the copies themselves changes."""
    plan = scaled(plans["replicas"], min_capacity=1, max_capacity=plans["replicas"].models[0].copy_count)
    before, after = synth(plan), synth(scaled(plan, min_capacity=1, max_capacity=plan.scaling.max_capacity,
                                                target_value=plan.scaling.target_value / 2))
    assert before.find_resources(COMPONENT) == after.find_resources(COMPONENT)
    assert before.find_resources(POLICY) != after.find_resources(POLICY)
    [component] = before.find_resources(COMPONENT).values()
    assert component["Properties"]["RuntimeConfig"] == {"CopyCount": plan.models[0].copy_count}


@pytest.mark.slow
def test_a_sagellm_upgrade_alone_leaves_the_components_as_they_were(plans, tmp_path) -> None:
    """The version tag changes with every upgrade; on a component it would be an update that may send the copy
    count again, so components do not carry it (the endpoint does), nor does the stack (CloudFormation copies
    stack tags onto every resource)."""
    plan = plans["replicas"]
    app = App(outdir=str(tmp_path))
    stack = EndpointStack(app, "Upgraded", plan=plan)
    stack_tags = app.synth().get_stack_artifact(stack.artifact_id).tags
    assert stack_tags == {k: v for k, v in plan.tags.items() if k != VERSION_TAG}

    upgraded = plan.model_copy(update={"tags": {**plan.tags, VERSION_TAG: "99.0.0"}})
    before, after = synth(plan), synth(upgraded)
    assert before.find_resources(COMPONENT) == after.find_resources(COMPONENT)
    assert before.find_resources(ENDPOINT) != after.find_resources(ENDPOINT)
    [component] = before.find_resources(COMPONENT).values()
    assert {t["Key"] for t in component["Properties"]["Tags"]} == set(plan.tags) - {VERSION_TAG}


@pytest.mark.parametrize("reference", [":2.4.0-tgi2.4.0-gpu-py311-cu124-ubuntu22.04-v2.2", "@sha256:" + "ab" * 32])
def test_an_image_pinned_by_full_tag_or_digest_is_deployed_and_pulled_as_is(reference: str) -> None:
    """A plan's image may name its full tag or digest (`container.image_pin`); the role may pull that repository."""
    repository = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference"
    plan = instance_plan()
    model = plan.models[0].model_copy(update={"image_uri": repository + reference})
    template = synth(plan.model_copy(update={"models": (model,)}))
    template.has_resource_properties(MODEL, {"PrimaryContainer": {"Image": repository + reference}})
    by_sid = {s["Sid"]: s for s in role_statements(template)}
    assert by_sid["PullContainerImage"]["Resource"] == (
        "arn:aws:ecr:us-east-1:763104351884:repository/huggingface-pytorch-tgi-inference"
    )


def test_scale_to_zero_deploys_sagemakers_recipe(plans, templates):
    # docs "Scale an endpoint to zero instances": MinInstanceCount 0, copies from 0, a step-scaling policy on an
    # alarm on the component's NoCapacityInvocationFailures, target tracking per copy above one.
    plan = plans["scale-to-zero"]
    template = templates["scale-to-zero"]
    template.has_resource_properties(CONFIG, {"ProductionVariants": [Match.object_like({
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0,
                                   "MaxInstanceCount": plan.instance_scaling.max_instance_count}})]})
    template.has_resource_properties(TARGET, {
        "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount", "MinCapacity": 0, "MaxCapacity": 4})
    template.has_resource_properties(POLICY, {
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": Match.object_like({"PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"}})})
    step = template.find_resources(POLICY, {"Properties": {"PolicyType": "StepScaling"}})
    ((step_id, step_policy),) = step.items()
    assert step_policy["Properties"]["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity", "MetricAggregationType": "Maximum", "Cooldown": 60,
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]}
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SageMaker", "MetricName": "NoCapacityInvocationFailures",
        "Dimensions": [{"Name": "InferenceComponentName", "Value": Match.any_value()}],
        "Statistic": "Maximum", "Period": 30, "EvaluationPeriods": 1, "DatapointsToAlarm": 1, "Threshold": 1,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "AlarmActions": [{"Fn::GetAtt": [step_id, "Arn"]}]})


NO_CAPACITY_ALARM = {"Properties": {"MetricName": "NoCapacityInvocationFailures"}}


def test_a_component_that_keeps_at_least_one_copy_gets_no_step_policy(templates):
    # Its only alarms are the rollout's error and latency alarms, none on no-capacity failures.
    assert templates["replicas"].find_resources("AWS::CloudWatch::Alarm", NO_CAPACITY_ALARM) == {}
    assert templates["replicas"].find_resources(POLICY, {"Properties": {"PolicyType": "StepScaling"}}) == {}


def test_min_copies_zero_turns_an_autoscaled_component_into_scale_to_zero(plans) -> None:
    plan = scaled(plans["replicas"], min_capacity=1, max_capacity=plans["replicas"].models[0].copy_count)
    stack = Stack(cdk_app(), "S")
    endpoint = LlmEndpoint(stack, "Llm", plan=plan, min_copies=0)
    assert endpoint.plan.scaling is not None and endpoint.plan.scaling.min_capacity == 0
    template = Template.from_stack(stack)
    template.has_resource_properties(TARGET, {"MinCapacity": 0})
    template.has_resource_properties(CONFIG, {"ProductionVariants": [Match.object_like({
        "ManagedInstanceScaling": Match.object_like({"MinInstanceCount": 0})})]})
    assert len(template.find_resources("AWS::CloudWatch::Alarm", NO_CAPACITY_ALARM)) == 1
    with pytest.raises(InputError, match="min_copies: needs an inference-component plan with scaling"):
        LlmEndpoint(Stack(cdk_app(), "T"), "Llm", plan=plans["max-throughput"], min_copies=0)

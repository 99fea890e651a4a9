"""The construct in its stack's region and partition, regions without a resource type, and a VPC."""

from __future__ import annotations

import json

import pytest
from aws_cdk import Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Annotations, Match, Template
from construct_plans import HF_SECRET, LLAMA2_7B, cdk_app, two_model_plan

from sagellm.constructs import LlmEndpoint
from sagellm.constructs.role import ecr_repository_arn
from sagellm.engines import images
from sagellm.errors import InputError
from sagellm.profiles import resolve

FALCON = "tiiuae/falcon-7b"
POLICY = "AWS::IAM::Policy"


def user_stack(region: str | None) -> Stack:
    """A CDK user's own stack, with or without a region."""
    env = Environment(region=region) if region else None
    return Stack(cdk_app(), "Llm", env=env)


def policy_statements(template: Template) -> dict[str, dict]:
    [policy] = template.find_resources(POLICY).values()
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_a_plan_for_another_region_than_the_stack_is_one_line() -> None:
    plan = resolve("max-throughput", FALCON, "ml.g5.2xlarge")  # region default: us-east-1
    with pytest.raises(InputError) as exc:
        LlmEndpoint(user_stack("eu-west-1"), "Chat", plan=plan)
    assert exc.value.messages == [
        ("Llm/Chat: plan.region: the plan was resolved for us-east-1 (its image, prices and instance choice) but "
        "stack Llm deploys to eu-west-1; resolve it with region='eu-west-1'")
    ]


def test_a_plan_for_the_stacks_region_pulls_its_image_there() -> None:
    plan = resolve("max-throughput", FALCON, "ml.g5.2xlarge", region="eu-west-1")
    stack = user_stack("eu-west-1")
    LlmEndpoint(stack, "Chat", plan=plan)
    template = Template.from_stack(stack)
    image = plan.primary.image_uri
    assert ".dkr.ecr.eu-west-1.amazonaws.com/" in image
    template.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": {"Image": image}})
    repository = policy_statements(template)["PullContainerImage"]["Resource"]
    assert repository.startswith("arn:aws:ecr:eu-west-1:"), repository


def test_a_stack_without_a_region_warns_where_the_image_lives() -> None:
    stack = user_stack(None)
    LlmEndpoint(stack, "Chat", plan=resolve("max-throughput", FALCON, "ml.g5.2xlarge"))
    Annotations.from_stack(stack).has_warning(
        "/Llm/Chat", Match.string_like_regexp(r"stack Llm names no region: .* us-east-1; deploy it there, or give")
    )


def test_govcloud_pulls_with_the_govcloud_partition() -> None:
    plan = resolve("max-throughput", FALCON, "ml.g6.2xlarge", region="us-gov-west-1")  # no G5 there
    stack = user_stack("us-gov-west-1")
    LlmEndpoint(stack, "Chat", plan=plan)
    pull = policy_statements(Template.from_stack(stack))["PullContainerImage"]["Resource"]
    assert pull.startswith("arn:aws-us-gov:ecr:us-gov-west-1:"), pull


@pytest.mark.parametrize(
    ("region", "host", "arn"),
    [
        ("us-iso-east-1", ".dkr.ecr.us-iso-east-1.c2s.ic.gov/", "arn:aws-iso:ecr:us-iso-east-1:"),
        ("us-isob-east-1", ".dkr.ecr.us-isob-east-1.sc2s.sgov.gov/", "arn:aws-iso-b:ecr:us-isob-east-1:"),
        ("cn-north-1", ".dkr.ecr.cn-north-1.amazonaws.com.cn/", "arn:aws-cn:ecr:cn-north-1:"),
        ("eusc-de-east-1", ".dkr.ecr.eusc-de-east-1.amazonaws.eu/", "arn:aws-eusc:ecr:eusc-de-east-1:"),
    ],
)
def test_image_host_and_repository_arn_follow_the_partition(region: str, host: str, arn: str) -> None:
    image = images.uri("huggingface-llm", "3.3.6", region)
    assert host in image
    assert (ecr_repository_arn(image) or "").startswith(arn)


def test_an_image_host_outside_its_regions_partition_is_not_an_ecr_uri() -> None:
    assert ecr_repository_arn("763104351884.dkr.ecr.us-iso-east-1.amazonaws.com/repo:tag") is None


def test_replicas_where_cloudformation_has_no_inference_component_is_one_line_before_anything() -> None:
    with pytest.raises(InputError) as exc:
        resolve("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", region="eu-west-3",
                hf_token_secret=HF_SECRET)
    assert exc.value.messages == [
        ("region: CloudFormation offers no AWS::SageMaker::InferenceComponent in eu-west-3; use endpoint_kind: "
        "instance (a profile without inference components) or a region such as us-east-1")
    ]
    # An instance-based profile deploys there.
    assert resolve("max-throughput", LLAMA2_7B, "ml.g6.2xlarge", region="eu-west-3").region == "eu-west-3"


@pytest.mark.parametrize("profile", ["min-latency", "max-throughput", "min-cost", "replicas", "autoscale"])
def test_every_profile_in_me_central_1_is_one_line(profile: str) -> None:
    with pytest.raises(InputError) as exc:
        resolve(profile, LLAMA2_7B, None, region="me-central-1", hf_token_secret=HF_SECRET)
    [line] = exc.value.messages
    assert line.startswith("region: CloudFormation offers no AWS::SageMaker::Model, ") and "me-central-1" in line


def test_a_hand_built_component_plan_in_eu_west_3_is_refused_by_the_construct() -> None:
    plan = two_model_plan().model_copy(update={"region": "eu-west-3"})
    with pytest.raises(InputError, match="CloudFormation offers no AWS::SageMaker::InferenceComponent in eu-west-3"):
        LlmEndpoint(user_stack("eu-west-3"), "Chat", plan=plan)


def vpc_in(stack: Stack) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a", "us-east-1b"],
        private_subnet_ids=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
        private_subnet_route_table_ids=["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"],
    )


def test_a_vpc_gives_the_role_what_sagemaker_needs_for_network_interfaces_and_warns_about_egress() -> None:
    stack = user_stack("us-east-1")
    LlmEndpoint(stack, "Chat", plan=resolve("max-throughput", FALCON, "ml.g5.2xlarge"), vpc=vpc_in(stack))
    template = Template.from_stack(stack)
    statements = policy_statements(template)
    create = statements["CreateEndpointNetworkInterfaces"]
    assert create["Action"] == "ec2:CreateNetworkInterface"
    text = json.dumps(create["Resource"])
    assert "network-interface/*" in text and "subnet/subnet-0123456789abcdef0" in text
    assert "subnet/subnet-0123456789abcdef1" in text and "security-group/" in text
    assert statements["ManageEndpointNetworkInterfaces"]["Action"] == [
        "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface"]
    assert set(statements["DescribeEndpointNetwork"]["Action"]) == {
        "ec2:DeleteNetworkInterfacePermission", "ec2:DescribeDhcpOptions", "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"}
    assert statements["DescribeEndpointNetwork"]["Resource"] == "*"
    Annotations.from_stack(stack).has_warning("/Llm/Chat", Match.string_like_regexp("NAT gateway"))


def test_without_a_vpc_the_role_has_no_ec2_permission() -> None:
    stack = user_stack("us-east-1")
    LlmEndpoint(stack, "Chat", plan=resolve("max-throughput", FALCON, "ml.g5.2xlarge"))
    assert "ec2:" not in json.dumps(Template.from_stack(stack).find_resources(POLICY))

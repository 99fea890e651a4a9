"""The execution role SageMaker assumes: pull the image, write its own logs and metrics, nothing else."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Acknowledgment, ArnFormat, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from sagellm.catalog.regions import find_partition
from sagellm.catalog.s3_weights import split_s3_prefix

# <account>.dkr.ecr.<region>.<the partition's DNS suffix>/<repository>[:tag|@digest]
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.(?P<suffix>[a-z0-9.-]+)/(?P<repo>[^:@]+)"
)
# SageMaker's own metric namespaces; PutMetricData has no resource-level permissions, so the
# namespace condition is the only way to narrow it.
METRIC_NAMESPACES = ["/aws/sagemaker/Endpoints", "/aws/sagemaker/InferenceComponents"]
# Where SageMaker writes a container's logs: `/aws/sagemaker/Endpoints/<endpoint name>` for an instance-based
# endpoint (streams `<variant>/<instance id>`, docs.aws.amazon.com/sagemaker/latest/dg/logging-cloudwatch.html), and
# `/aws/sagemaker/InferenceComponents/<component name>` for an inference component's container, not its endpoint's.
ENDPOINT_LOGS = "/aws/sagemaker/Endpoints"
COMPONENT_LOGS = "/aws/sagemaker/InferenceComponents"
ENDPOINT_GROUPS = ("SageMaker names the log group after the endpoint, whose name CloudFormation sets only after this "
                   "role exists (naming it here would be a circular dependency); scoped to this account, region and "
                   "SageMaker's log-group prefix for endpoints.")
COMPONENT_STREAMS = ("SageMaker names a component's log streams after the instances and containers it starts; "
                     "scoped to this inference component's own log group.")
# What `grant_invoke` allows on an endpoint: plain and streaming invocations, nothing else.
INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]


def ecr_repository_arn(image_uri: str) -> str | None:
    """The ECR repository ARN an image URI points at, or None when it is not an ECR URI."""
    match = _ECR_URI.match(image_uri)
    if match is None:
        return None
    # The ARN's partition is the region's (aws-us-gov, aws-cn, aws-iso, ...), and the host must be in it.
    partition = find_partition(match["region"])
    if partition is None or partition.dns_suffix != match["suffix"]:
        return None
    return f"arn:{partition.name}:ecr:{match['region']}:{match['account']}:repository/{match['repo']}"


def execution_role(scope: Construct, id: str, *, image_uris: list[str], kms_key: kms.IKey | None,
                   components: Sequence[str] = (), network: VpcNetwork | None = None,
                   weights_s3_uris: list[str] | None = None) -> iam.Role:
    """A least-privilege SageMaker execution role for the given images (and key, VPC and weights' S3 prefixes,
    when given), writing the logs of the named inference components, or of an instance-based endpoint if none.
    """
    stack = Stack.of(scope)
    role = iam.Role(
        scope,
        id,
        assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
        description="SageMaker execution role for a sagellm endpoint",
    )
    repositories = sorted({arn for uri in image_uris if (arn := ecr_repository_arn(uri))})
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="PullContainerImage",
            actions=["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            resources=repositories,
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(sid="RegistryLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"])
    )

    def log_group(name: str) -> str:
        return stack.format_arn(service="logs", resource="log-group", resource_name=name,
                                arn_format=ArnFormat.COLON_RESOURCE_NAME)

    # PutLogEvents acts on a stream (`log-group:<group>:log-stream:<stream>`), the other actions on the group
    # (Service Authorization Reference, CloudWatch Logs). A component's name is in the template, so its role writes
    # that component's group only. An endpoint's name is CloudFormation's (LlmEndpoint sets none, so CloudFormation
    # can replace it; a name change would also replace every named component on it), and naming it here would make
    # the role depend on the endpoint that needs the role: an instance-based endpoint's role writes under SageMaker's
    # prefix for endpoints.
    if components:
        groups = [f"{COMPONENT_LOGS}/{name}" for name in components]
        log_arns = [arn for group in groups for arn in (log_group(group), log_group(f"{group}:log-stream:*"))]
        log_wildcards = {f"{group}:log-stream:*": COMPONENT_STREAMS for group in groups}
    else:
        log_arns = [log_group(f"{ENDPOINT_LOGS}/*")]
        log_wildcards = {f"{ENDPOINT_LOGS}/*": ENDPOINT_GROUPS}
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="WriteEndpointLogs",
            actions=[
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
            ],
            resources=log_arns,
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="WriteEndpointMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACES}},
        )
    )
    vpc_findings = _allow_network_interfaces(role, stack, network) if network is not None else []
    weight_findings = _allow_weights(role, stack, weights_s3_uris) if weights_s3_uris else []
    if kms_key is not None:
        # The endpoint's storage volume is encrypted with the key under the role's identity.
        kms_key.grant(
            role, "kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext"
        )
    policy = role.node.find_child("DefaultPolicy")
    Validations.of(policy).acknowledge(
        iam_acknowledgment(
            "Resource::*",
            "ecr:GetAuthorizationToken and cloudwatch:PutMetricData support no resource-level permissions; "
            "PutMetricData is narrowed by a cloudwatch:namespace condition instead. With a VPC: ec2:Describe* "
            "support no resource-level permissions, and DeleteNetworkInterfacePermission names only a "
            "permission id SageMaker created.",
        ),
        *(
            iam_acknowledgment(
                f"Resource::arn:{_nag_label(stack.partition, 'AWS::Partition')}:logs:"
                f"{_nag_label(stack.region, 'AWS::Region')}:"
                f"{_nag_label(stack.account, 'AWS::AccountId')}:log-group:{wildcard}",
                reason,
            )
            for wildcard, reason in log_wildcards.items()
        ),
        *vpc_findings,
        *weight_findings,
    )
    return role


def _allow_weights(role: iam.Role, stack: Stack, uris: list[str]) -> list[Acknowledgment]:
    """Read the weights under each S3 prefix and nothing else of the bucket: GetObject on `prefix*`, ListBucket
    only with an `s3:prefix` condition (SageMaker lists the prefix, then copies each object). Returns the cdk-nag
    acknowledgments of the object wildcards."""
    findings = []
    for bucket, prefix in sorted({split_s3_prefix(uri, "model_data_s3_uri") for uri in uris}):
        objects = f"arn:{stack.partition}:s3:::{bucket}/{prefix}*"
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[f"arn:{stack.partition}:s3:::{bucket}"],
            conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
        ))
        findings.append(iam_acknowledgment(
            f"Resource::arn:{_nag_label(stack.partition, 'AWS::Partition')}:s3:::{bucket}/{prefix}*",
            "The model's weights are every object under its S3 prefix (a snapshot of several files, named by "
            "the model's authors); the role reads only that prefix.",
        ))
    return findings


@dataclass(frozen=True)
class VpcNetwork:
    """Where SageMaker attaches the containers' network interfaces: subnet and security group ids."""

    subnet_ids: list[str]
    security_group_ids: list[str]


def _allow_network_interfaces(role: iam.Role, stack: Stack, network: VpcNetwork) -> list[Acknowledgment]:
    """What SageMaker needs for a VpcConfig: create its network interfaces in the given subnets and security
    groups, and describe the VPC ("Give SageMaker AI Hosted Endpoints Access to Resources in Your Amazon VPC",
    https://docs.aws.amazon.com/sagemaker/latest/dg/host-vpc.html). Returns the cdk-nag acknowledgments."""
    def ec2_arn(resource: str, name: str) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name=name)

    interfaces = ec2_arn("network-interface", "*")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="CreateEndpointNetworkInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[interfaces, *(ec2_arn("subnet", s) for s in network.subnet_ids),
                       *(ec2_arn("security-group", g) for g in network.security_group_ids)],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="ManageEndpointNetworkInterfaces",
            actions=["ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface"],
            resources=[interfaces],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="DescribeEndpointNetwork",
            actions=["ec2:DeleteNetworkInterfacePermission", "ec2:DescribeDhcpOptions",
                     "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets",
                     "ec2:DescribeVpcs"],
            resources=["*"],
        )
    )
    return [
        iam_acknowledgment(
            f"Resource::arn:{_nag_label(stack.partition, 'AWS::Partition')}:ec2:"
            f"{_nag_label(stack.region, 'AWS::Region')}:{_nag_label(stack.account, 'AWS::AccountId')}"
            ":network-interface/*",
            "SageMaker creates the containers' network interfaces itself, so their ids exist only at deploy "
            "time; scoped to this account and region, and creation to the given subnets and security groups.",
        ),
    ]


def iam_acknowledgment(finding: str, reason: str) -> Acknowledgment:
    """A cdk-nag AwsSolutions-IAM5 acknowledgment for one finding, with its reason."""
    return Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason)


def _nag_label(value: str, pseudo: str) -> str:
    """How cdk-nag prints a value in a finding id: literal, or `<AWS::Pseudo>` for a pseudo parameter."""
    return f"<{pseudo}>" if Token.is_unresolved(value) else value

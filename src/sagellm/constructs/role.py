"""The execution role SageMaker assumes: pull the image, write its own logs and metrics, nothing else."""

from __future__ import annotations

import re

from aws_cdk import Acknowledgment, ArnFormat, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>[:tag|@digest]
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?P<cn>\.cn)?/(?P<repo>[^:@]+)"
)
# SageMaker's own metric namespaces; PutMetricData has no resource-level permissions, so the
# namespace condition is the only way to narrow it.
METRIC_NAMESPACES = ["/aws/sagemaker/Endpoints", "/aws/sagemaker/InferenceComponents"]
# Log groups SageMaker writes a container's logs to: the endpoint's, and an inference component's own.
LOG_PREFIXES = ("/aws/sagemaker/Endpoints", "/aws/sagemaker/InferenceComponents")
# What `grant_invoke` allows on an endpoint: plain and streaming invocations, nothing else.
INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]


def ecr_repository_arn(image_uri: str) -> str | None:
    """The ECR repository ARN an image URI points at, or None when it is not an ECR URI."""
    match = _ECR_URI.match(image_uri)
    if match is None:
        return None
    partition = "aws-cn" if match["cn"] else "aws"
    return f"arn:{partition}:ecr:{match['region']}:{match['account']}:repository/{match['repo']}"


def execution_role(scope: Construct, id: str, *, image_uris: list[str], kms_key: kms.IKey | None,
                   inference_components: bool = False) -> iam.Role:
    """A least-privilege SageMaker execution role for the given images (and key, when given).

    An inference component's container logs to `/aws/sagemaker/InferenceComponents/<component name>`, not
    to the endpoint's log group: those endpoints get that prefix too.
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
    prefixes = LOG_PREFIXES if inference_components else LOG_PREFIXES[:1]
    log_groups = [
        stack.format_arn(service="logs", resource="log-group", resource_name=f"{prefix}/*",
                         arn_format=ArnFormat.COLON_RESOURCE_NAME)
        for prefix in prefixes
    ]
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="WriteEndpointLogs",
            actions=[
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:DescribeLogStreams",
                "logs:PutLogEvents",
            ],
            resources=log_groups,
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
            "PutMetricData is narrowed by a cloudwatch:namespace condition instead.",
        ),
        *(
            iam_acknowledgment(
                f"Resource::arn:{_nag_label(stack.partition, 'AWS::Partition')}:logs:"
                f"{_nag_label(stack.region, 'AWS::Region')}:"
                f"{_nag_label(stack.account, 'AWS::AccountId')}:log-group:{prefix}/*",
                "SageMaker names the log group after the endpoint or inference component, whose name exists "
                "only after this role (naming it here would be a circular dependency); scoped to this account, "
                "region and SageMaker's log-group prefix.",
            )
            for prefix in prefixes
        ),
    )
    return role


def iam_acknowledgment(finding: str, reason: str) -> Acknowledgment:
    """A cdk-nag AwsSolutions-IAM5 acknowledgment for one finding, with its reason."""
    return Acknowledgment(id=f"AwsSolutions-IAM5[{finding}]", reason=reason)


def _nag_label(value: str, pseudo: str) -> str:
    """How cdk-nag prints a value in a finding id: literal, or `<AWS::Pseudo>` for a pseudo parameter."""
    return f"<{pseudo}>" if Token.is_unresolved(value) else value

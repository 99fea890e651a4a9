"""AWS::SageMaker::Model: one container with the plan's image and environment."""

from __future__ import annotations

from aws_cdk import SecretValue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from sagellm.profiles.plan import ModelDeployment


def container_model(
    scope: Construct,
    id: str,
    *,
    model: ModelDeployment,
    role: iam.IRole,
    hf_token: SecretValue | None,
    vpc_config: sagemaker.CfnModel.VpcConfigProperty | None,
    network_isolation: bool,
) -> sagemaker.CfnModel:
    """A model whose container runs `model.image_uri` with `model.environment` (plus HF_TOKEN by reference)."""
    environment = dict(model.environment)
    if hf_token is not None:
        # TGI reads the token only from its environment: the template carries a CloudFormation dynamic
        # reference ({{resolve:secretsmanager:...}}), resolved at deploy time, never the token itself.
        environment["HF_TOKEN"] = hf_token.unsafe_unwrap()
    return sagemaker.CfnModel(
        scope,
        id,
        execution_role_arn=role.role_arn,
        primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
            image=model.image_uri, environment=environment
        ),
        vpc_config=vpc_config,
        enable_network_isolation=network_isolation or None,
    )

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
    own_role: bool,
) -> sagemaker.CfnModel:
    """A model whose container runs `model.image_uri` with `model.environment` (plus HF_TOKEN by reference), its
    weights from the Hub or, with `model.model_data_s3_uri`, from that S3 prefix (no token then). With `own_role`
    (a role made by `execution_role` beside it) it waits for the role's policy."""
    environment = dict(model.environment)
    if hf_token is not None and model.model_data_s3_uri is None:
        # TGI reads the token only from its environment: the template carries a CloudFormation dynamic
        # reference ({{resolve:secretsmanager:...}}), resolved at deploy time, never the token itself.
        environment["HF_TOKEN"] = hf_token.unsafe_unwrap()
    cfn = sagemaker.CfnModel(
        scope,
        id,
        execution_role_arn=role.role_arn,
        primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
            image=model.image_uri, environment=environment, model_data_source=_s3_weights(model.model_data_s3_uri)
        ),
        vpc_config=vpc_config,
        enable_network_isolation=network_isolation or None,
    )
    if own_role:
        # SageMaker checks the role's permissions when it creates the model and pulls the image: wait for the
        # policy too (the role itself is a dependency already, through its ARN).
        cfn.node.add_dependency(role.node.find_child("DefaultPolicy"))
    return cfn


def _s3_weights(uri: str | None) -> sagemaker.CfnModel.ModelDataSourceProperty | None:
    """The uncompressed S3 prefix SageMaker copies to /opt/ml/model before the container starts."""
    if uri is None:
        return None
    return sagemaker.CfnModel.ModelDataSourceProperty(
        s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
            s3_uri=uri, s3_data_type="S3Prefix", compression_type="None"
        )
    )

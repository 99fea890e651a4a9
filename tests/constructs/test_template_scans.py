"""Whole-template checks: snapshots per standard profile, no secrets, no managed policies, cdk-nag passes."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk import Annotations, App, Environment, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from cdk_nag import AwsSolutionsChecks
from construct_plans import STANDARD, cdk_app, instance_plan, scaled, two_model_plan
from syrupy.extensions.json import JSONSnapshotExtension

from sagellm.constructs import LlmEndpoint
from sagellm.profiles import DeploymentPlan
from sagellm.stacks import EndpointStack

HF_TOKEN = re.compile(r"hf_[A-Za-z]{20,}")
MANAGED_POLICY = "arn:aws:iam::aws:policy/"
ASSET_HASH = re.compile(r"[0-9a-f]{64}")
VERSION_TAG = "sagellm:version"


def masked(template: dict) -> dict:
    """The template with asset hashes and the tool version (which changes every release) masked."""
    text = ASSET_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True))
    data = json.loads(text)
    for resource in data.get("Resources", {}).values():
        for tag in resource.get("Properties", {}).get("Tags", []):
            if isinstance(tag, dict) and tag.get("Key") == VERSION_TAG:
                tag["Value"] = "<version>"
    return data


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("profile", list(STANDARD))
def test_template_matches_snapshot(profile, templates, json_snapshot):
    assert masked(templates[profile].to_json()) == json_snapshot


@pytest.mark.parametrize("profile", list(STANDARD))
def test_template_holds_no_token_and_no_managed_policy(profile, templates):
    text = json.dumps(templates[profile].to_json())
    assert not HF_TOKEN.search(text)
    assert MANAGED_POLICY not in text and "ManagedPolicyArns" not in text


def add_nag_app(outdir: str) -> App:
    app = cdk_app(outdir=outdir)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


@pytest.mark.slow
def test_aws_solutions_pack_passes_on_every_profile_and_option(plans: dict[str, DeploymentPlan], tmp_path):
    app = add_nag_app(str(tmp_path))
    for name, plan in plans.items():
        EndpointStack(app, f"Stack-{name}", plan=plan.model_copy(update={"hf_token_secret": "team/hf"}))
    # Inferentia's vLLM image: its own environment, AMI and timeouts (docs/containers.md).
    from sagellm.profiles import resolve

    EndpointStack(app, "Stack-vllm-neuronx", plan=resolve("max-throughput", "Qwen/Qwen3-8B", "ml.inf2.24xlarge",
                                                          hf_token_secret="team/hf", engine="vllm-neuronx"))
    # Every optional part at once: VPC, two scaled components, a KMS key (where the instance has EBS storage).
    stack = Stack(app, "Options", env=Environment(region="us-east-1"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-east-1a"],
        private_subnet_ids=["subnet-0123456789abcdef0"],
        private_subnet_route_table_ids=["rtb-0123456789abcdef0"],
    )
    in_vpc = LlmEndpoint(stack, "Components", plan=scaled(two_model_plan()), vpc=vpc)
    # The one warning a VPC brings (the container needs a route out), acknowledged as a user would.
    Annotations.of(in_vpc).acknowledge_warning("sagellm:VpcEgress", "this test's VPC is imported, not deployed")
    LlmEndpoint(stack, "Instance", plan=scaled(instance_plan(instance_type="ml.inf2.8xlarge")), kms_key=key)
    # Weights from S3: the role's read of one prefix (its object wildcard acknowledged).
    primary = instance_plan().primary
    from_s3 = primary.model_copy(update={"model_data_s3_uri": "s3://team-models/llama-2-7b/"})
    LlmEndpoint(stack, "FromS3", plan=instance_plan(models=(from_s3,), hf_token_secret=None))
    app.synth()  # raises on any unacknowledged AwsSolutions finding
    report = json.loads((tmp_path / "validation-report.json").read_text())
    # Not even a warning, from cdk-nag or CDK's built-in CloudFormation schema check (plugins with
    # findings are listed; the test below shows this app's nag plugin does report).
    assert report["pluginReports"] == []


@pytest.mark.slow
def test_aws_solutions_pack_rejects_a_managed_full_access_role(tmp_path):
    app = add_nag_app(str(tmp_path))
    stack = Stack(app, "Stack")
    role = iam.Role(
        stack,
        "Wide",
        assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerFullAccess")],
    )
    LlmEndpoint(stack, "Llm", plan=instance_plan(), role=role)
    with pytest.raises(Exception, match="ValidationFailed"):
        app.synth()
    assert "AwsSolutions-IAM4" in (tmp_path / "validation-report.json").read_text()

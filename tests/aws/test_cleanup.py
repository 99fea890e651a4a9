"""`sagellm cleanup`: find sagellm leftovers by tag and delete them, sparing everything else."""

from __future__ import annotations

import json

import pytest

from sagellm.aws.cleanup import KINDS, delete_leftovers, find_leftovers
from sagellm.aws.local import LocalAws

TAGS = [{"Key": "sagellm:profile", "Value": "max-throughput"}, {"Key": "sagellm:version", "Value": "0.1.0"}]
ROLE = "arn:aws:iam::123456789012:role/sagellm-test"
VARIANT = [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": 1}]


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    sm, aas = server.client("sagemaker"), server.client("application-autoscaling")
    # A deployed stack that a killed bench never destroyed.
    template = {
        "Resources": {
            "Model": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {"ExecutionRoleArn": ROLE, "PrimaryContainer": {"Image": "tgi"}, "Tags": TAGS},
            }
        }
    }
    server.client("cloudformation").create_stack(
        StackName="sagellm-crashed", TemplateBody=json.dumps(template), Tags=TAGS
    )
    # Orphans a failed teardown left (tagged), and someone else's endpoint (untagged), each scaled.
    for prefix, tags in (("orphan", TAGS), ("theirs", [{"Key": "team", "Value": "search"}])):
        sm.create_model(
            ModelName=f"{prefix}-model", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": "tgi"}, Tags=tags
        )
        sm.create_endpoint_config(
            EndpointConfigName=f"{prefix}-config", ProductionVariants=VARIANT, Tags=tags
        )
        sm.create_endpoint(
            EndpointName=f"{prefix}-endpoint", EndpointConfigName=f"{prefix}-config", Tags=tags
        )
        sm.create_inference_component(
            InferenceComponentName=f"{prefix}-component",
            EndpointName=f"{prefix}-endpoint",
            VariantName="AllTraffic",
            Specification={"ModelName": f"{prefix}-model"},
            RuntimeConfig={"CopyCount": 1},
            Tags=tags,
        )
        aas.register_scalable_target(
            ServiceNamespace="sagemaker",
            ResourceId=f"endpoint/{prefix}-endpoint/variant/AllTraffic",
            ScalableDimension="sagemaker:variant:DesiredInstanceCount",
            MinCapacity=1,
            MaxCapacity=2,
        )
    return server


def test_finds_tagged_stacks_and_orphans_in_deletion_order(aws: LocalAws) -> None:
    found = find_leftovers(aws.session(), endpoint_url=aws.endpoint_url)

    assert [(x.kind, x.name) for x in found] == [
        ("stack", "sagellm-crashed"),
        ("scalable-target", "endpoint/orphan-endpoint/variant/AllTraffic"),
        ("inference-component", "orphan-component"),
        ("endpoint", "orphan-endpoint"),
        ("endpoint-config", "orphan-config"),
        ("model", "orphan-model"),
    ]
    assert [x.kind for x in found] == list(KINDS)
    assert all(x.created is not None for x in found)
    # The stack's own model carries the tags too, but goes with its stack.
    assert not [x for x in found if x.name.startswith("theirs")]


def test_older_than_skips_what_is_younger(aws: LocalAws) -> None:
    assert find_leftovers(aws.session(), older_than_s=2 * 3600, endpoint_url=aws.endpoint_url) == []


def test_deletes_leftovers_and_spares_untagged_resources(aws: LocalAws) -> None:
    found = find_leftovers(aws.session(), endpoint_url=aws.endpoint_url)

    assert delete_leftovers(aws.session(), found, endpoint_url=aws.endpoint_url) == []

    assert find_leftovers(aws.session(), endpoint_url=aws.endpoint_url) == []
    assert aws.leftovers() == {
        "endpoints": ["theirs-endpoint"],
        "endpoint_configs": ["theirs-config"],
        "models": ["theirs-model"],
        "inference_components": ["theirs-component"],
        "scalable_targets": ["endpoint/theirs-endpoint/variant/AllTraffic"],
    }
    # Deleting again (a second `sagellm cleanup` racing the first) reports nothing: gone counts as deleted.
    assert delete_leftovers(aws.session(), found, endpoint_url=aws.endpoint_url) == []

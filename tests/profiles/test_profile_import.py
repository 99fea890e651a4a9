"""`sagellm profiles import`: a SageMaker AI recommendation's DeploymentConfiguration as a profile that validates
and synthesizes. The response is a fixture written from botocore's model (tests/fixtures/aws-ai-jobs/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from sagellm.errors import InputError
from sagellm.profiles.imported import container_of, write_imported
from sagellm.profiles.loader import all_sources
from sagellm.profiles.validate import validate_profile

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aws-ai-jobs" / "describe-ai-recommendation-job.json"


def described() -> dict:
    """The fixture as DescribeAIRecommendationJob returns it through botocore (the Stubber checks its shape)."""
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")  # never sent: the Stubber answers
    response = json.loads(FIXTURE.read_text())
    with Stubber(client) as stub:
        stub.add_response("describe_ai_recommendation_job", response, {"AIRecommendationJobName": "llama-2-7b-chat"})
        got = client.describe_ai_recommendation_job(AIRecommendationJobName="llama-2-7b-chat")
    got.pop("ResponseMetadata", None)
    return json.loads(json.dumps(got, default=str))  # timestamps as text, as a saved response holds them


def test_copies_per_instance_become_a_replicas_profile_that_validates(tmp_path: Path) -> None:
    path, model = write_imported(described(), 1, "aws-rec", tmp_path)
    body = yaml.safe_load(path.read_text())
    assert body["extends"] == "replicas" and body["container"] == {"kind": "vllm", "version": "0.30.0"}
    assert body["instance_type"] == "ml.g5.12xlarge" and body["components"] == {"copies": 4,
                                                                                  "memory_mib_per_copy": 16384}
    assert body["serving"] == {"tensor_parallel": 1, "max_total_tokens": 4096, "max_batch_size": 64,
                               "environment": {"SM_VLLM_ENABLE_PREFIX_CACHING": "true"}}
    assert body["model_source"] == {"s3_uri": "s3://team-models/llama-2-7b-hf/"}
    assert model is None  # the container reads /opt/ml/model: the model is in S3
    assert "# expected p90 ttft-ms: 412 Milliseconds" in path.read_text()
    assert validate_profile("aws-rec", all_sources(tmp_path)) == []


def test_an_lmi_recommendation_keeps_its_count_and_names_the_model_to_deploy(tmp_path: Path) -> None:
    path, model = write_imported(described(), 2, "aws-lmi", tmp_path)
    body = yaml.safe_load(path.read_text())
    assert body["extends"] == "max-throughput" and body["container"]["kind"] == "lmi"
    assert body["initial_instance_count"] == 2 and body["serving"]["tensor_parallel"] == 4
    assert model == "meta-llama/Llama-2-7b-hf"
    assert validate_profile("aws-lmi", all_sources(tmp_path)) == []


def test_an_image_sagellm_does_not_pin_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        write_imported(described(), 3, "aws-spec", tmp_path)
    assert len(caught.value.messages) == 1
    assert caught.value.messages[0].startswith("Recommendations[2].DeploymentConfiguration.ImageUri: "
                                               "'111122223333.dkr.ecr.us-east-1.amazonaws.com/team-vllm:spec-1' is "
                                               "not an image in sagellm's tables")
    assert not tmp_path.joinpath("aws-spec.yaml").exists()


def test_a_full_tag_becomes_the_pin_and_a_digest_is_refused() -> None:
    uri = "763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker"
    assert container_of(uri + "-v1.2", "ImageUri") == {"kind": "vllm", "version": "0.30.0", "image_pin":
                                                       "0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker-v1.2"}
    with pytest.raises(InputError, match="an image by digest names no version"):
        container_of(uri.split(":")[0] + "@sha256:" + "0" * 64, "ImageUri")


@pytest.mark.slow
def test_an_imported_profile_synthesizes_with_the_cdk_app(tmp_path: Path) -> None:
    from sagellm.aws.node import use_bundled_node

    use_bundled_node()  # before aws_cdk starts jsii
    from aws_cdk import App
    from aws_cdk.assertions import Match, Template

    from sagellm.cdk_app import endpoint_stack
    from sagellm.engines import ENGINES

    write_imported(described(), 1, "aws-rec", tmp_path)
    stack = endpoint_stack(App(context={"profile": "aws-rec", "model": "meta-llama/Llama-2-7b-hf",
                                        "profiles_dir": str(tmp_path)}))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::SageMaker::InferenceComponent", 1)
    template.has_resource_properties("AWS::SageMaker::InferenceComponent", {"RuntimeConfig": {"CopyCount": 4}})
    template.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({
        "Image": ENGINES["vllm"].image_uri("0.30.0", "us-east-1"),
        "Environment": Match.object_like({"SM_VLLM_ENABLE_PREFIX_CACHING": "true", "SM_VLLM_MAX_MODEL_LEN": "4096",
                                          "SM_VLLM_TENSOR_PARALLEL_SIZE": "1"})})})

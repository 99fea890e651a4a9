"""The real pinned CDK CLI deploys the real app.py into moto and destroys it, leaving nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import SageMakerModelBackend

from sagellm.aws import cdk_cli
from sagellm.aws.local import LocalAws
from sagellm.errors import TargetError

REPO = Path(__file__).resolve().parents[2]
# `cdk bootstrap` templates an S3 bucket policy, which moto skips (harmless for sagellm's stacks).
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.+S3.+BucketPolicy")


def test_finds_the_app_from_a_subfolder_and_from_elsewhere(tmp_path: Path) -> None:
    assert cdk_cli.find_app_dir(REPO / "src" / "sagellm") == REPO
    assert cdk_cli.find_app_dir(tmp_path) == REPO  # falls back to where the package lives


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalAws]:
    with LocalAws() as local:
        cdk_cli.bootstrap(local.env())
        yield local


@pytest.mark.integration
@pytest.mark.parametrize(
    ("profile", "model", "instance", "extra"),
    [
        ("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", {"inference_components"}),
        ("autoscale", "meta-llama/Llama-2-7b-hf", None, {"scalable_targets", "scaling_policies"}),
    ],
)
def test_deploys_into_moto_and_destroy_leaves_nothing(
    aws: LocalAws, tmp_path: Path, profile: str, model: str, instance: str | None, extra: set[str]
) -> None:
    # The Llama models are gated: synth needs the token's secret (moto does not resolve the reference).
    context = {"profile": profile, "model": model, "instance": instance, "hf_token_secret": "prod/huggingface/token"}

    outputs = cdk_cli.deploy(f"sagellm-it-{profile}", context, aws.env(), tmp_path)

    sm = aws.client("sagemaker")
    assert sm.describe_endpoint(EndpointName=outputs["EndpointName"])["EndpointStatus"] == "InService"
    for key, name in outputs.items():
        if key.startswith("ComponentName"):
            assert (
                sm.describe_inference_component(InferenceComponentName=name)["EndpointName"]
                == outputs["EndpointName"]
            )
    assert set(aws.leftovers()) == {"stacks", "endpoints", "endpoint_configs", "models"} | extra

    cdk_cli.destroy(f"sagellm-it-{profile}", context, aws.env(), outdir=tmp_path)

    assert aws.leftovers() == {}


@pytest.mark.integration
def test_failed_deploy_names_the_resource_and_leaves_nothing(
    aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_capacity(self: SageMakerModelBackend, **kwargs: object) -> None:
        raise ValidationError(message="Injected: insufficient capacity for ml.g5.2xlarge")

    monkeypatch.setattr(SageMakerModelBackend, "create_endpoint", no_capacity)
    context = {"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf", "instance": "ml.g5.2xlarge",
               "hf_token_secret": "prod/huggingface/token"}

    with pytest.raises(TargetError) as failure:
        cdk_cli.deploy("sagellm-it-broken", context, aws.env(), tmp_path)

    message = str(failure.value)
    assert "\n" not in message
    assert "(AWS::SageMaker::Endpoint) CREATE_FAILED: Injected: insufficient capacity" in message
    assert "nothing left" in message
    assert aws.leftovers() == {}
    cdk_cli.destroy("sagellm-it-broken", context, aws.env(), outdir=tmp_path)  # the bench's teardown: a no-op

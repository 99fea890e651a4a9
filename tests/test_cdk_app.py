"""The CDK app: a plan handed over as `-c plan=<plan.json>` (as the bench does) builds the very stack, with the
very tags, that resolving its profile from context builds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sagellm.aws.node import use_bundled_node
from sagellm.bench.targets.stack import cdk_context
from sagellm.planner import Payload
from sagellm.profiles import resolve

HF_SECRET = "prod/huggingface/token"  # the catalog's Llama 2 models are gated


@pytest.mark.parametrize(("profile", "model", "instance"), [
    ("autoscale", "meta-llama/Llama-2-7b-hf", None),
    ("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge"),
])
def test_a_handed_over_plan_builds_the_stack_and_tags_its_profile_context_builds(
        tmp_path: Path, profile: str, model: str, instance: str | None) -> None:
    use_bundled_node()  # before aws_cdk starts jsii
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from sagellm.cdk_app import endpoint_stack

    team = tmp_path / "profiles"  # none: the standard profiles as shipped
    team.mkdir()
    plan = resolve(profile, model, instance, payload=Payload(512, 64), profiles_dir=team, hf_token_secret=HF_SECRET)
    run = {"stack_name": "sagellm-bench-run-1", "bench_run": "run-1", "bench_process": "host:1"}
    resolved = endpoint_stack(App(context={
        "profile": profile, "model": model, "instance": instance, "input_tokens": "512", "output_tokens": "64",
        "profiles_dir": str(team), "hf_token_secret": HF_SECRET, **run}))
    handed = endpoint_stack(App(context={**cdk_context(plan, tmp_path / "cdk", "run-1", "host:1"), **run}))

    assert Template.from_stack(handed).to_json() == Template.from_stack(resolved).to_json()
    assert handed.tags.tag_values() == resolved.tags.tag_values()
    assert handed.tags.tag_values()["sagellm:bench-run"] == "run-1"
    assert (tmp_path / "cdk" / "plan.json").is_file()


def test_engine_context_deploys_the_profile_on_that_engine_with_its_image_and_host_ami() -> None:
    use_bundled_node()  # before aws_cdk starts jsii
    from aws_cdk import App
    from aws_cdk.assertions import Match, Template

    from sagellm.cdk_app import endpoint_stack
    from sagellm.engines import ENGINES

    stack = endpoint_stack(App(context={"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf",
                                        "instance": "ml.g5.12xlarge", "engine": "lmi",
                                        "hf_token_secret": HF_SECRET}))
    template = Template.from_stack(stack)
    lmi = ENGINES["lmi"]
    template.has_resource_properties("AWS::SageMaker::Model", {"PrimaryContainer": Match.object_like({
        "Image": lmi.image_uri(lmi.pinned, "us-east-1")})})
    template.has_resource_properties("AWS::SageMaker::EndpointConfig", {"ProductionVariants": [Match.object_like({
        "InferenceAmiVersion": lmi.inference_ami(lmi.pinned)})]})


TINY = Path(__file__).resolve().parent / "fixtures" / "tiny-model"


def test_a_local_folder_as_context_is_refused_with_the_upload_and_the_context_key_that_deploy_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_bundled_node()  # before aws_cdk starts jsii
    from aws_cdk import App

    from sagellm.cdk_app import endpoint_stack
    from sagellm.errors import InputError

    shutil.copytree(TINY, tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as caught:
        endpoint_stack(App(context={"profile": "max-throughput", "model": "./snap", "instance": "ml.g5.2xlarge"}))
    assert caught.value.messages == [
        ("model: snap is a local folder, which SageMaker cannot read: upload it with `sagellm weights upload snap "
        "s3://<bucket>/<prefix>/`, then add -c model_s3_uri=s3://<bucket>/<prefix>/")]


def test_a_local_folder_with_its_weights_in_s3_deploys_from_the_prefix_never_the_hub(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_bundled_node()  # before aws_cdk starts jsii
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from sagellm.cdk_app import endpoint_stack

    shutil.copytree(TINY, tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))  # the folder's facts, not S3's
    stack = endpoint_stack(App(context={"profile": "max-throughput", "model": "./snap", "instance": "ml.g5.2xlarge",
                                        "model_s3_uri": "s3://team-models/snap/"}))
    (model,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Model").values()
    container = model["Properties"]["PrimaryContainer"]
    assert container["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": "s3://team-models/snap/", "S3DataType": "S3Prefix", "CompressionType": "None"}}
    assert container["Environment"]["HF_MODEL_ID"] == "/opt/ml/model"
    assert "snap" not in container["Environment"].values()
    # Sized from the folder's config.json: its 2048-token context.
    assert container["Environment"]["MAX_TOTAL_TOKENS"] == "2048"

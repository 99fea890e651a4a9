"""Weights from S3 (ModelDataSource, the role's read of that prefix only, network isolation) and safe, fast
components (DataCacheConfig, a rolling DeploymentConfig behind the component's alarms, ScaleInPolicy)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Annotations, Match, Template
from cfnlint.api import lint
from construct_plans import HF_SECRET, cdk_app, instance_plan, scaled, two_model_plan

from sagellm.constructs import LlmEndpoint
from sagellm.constructs.inference_component import LATENCY_ALARM_US
from sagellm.errors import InputError
from sagellm.profiles import DeploymentPlan
from sagellm.profiles.plan import InstanceScaling, ModelDeployment

URI = "s3://team-models/llama-2-13b/"
TOKEN_REF = f"{{{{resolve:secretsmanager:{HF_SECRET}:SecretString:::}}}}"


def from_s3(model: ModelDeployment, uri: str = URI) -> ModelDeployment:
    """`model` with its weights staged in S3, as `resolve(..., model_s3_uri=uri)` writes it."""
    return model.model_copy(update={"model_data_s3_uri": uri,
                                    "environment": {**model.environment, "HF_MODEL_ID": "/opt/ml/model"}})


def template_of(plan: DeploymentPlan, **kwargs: object) -> tuple[Template, Stack]:
    stack = Stack(cdk_app(), "Stack", stack_name="sagellm-test")
    LlmEndpoint(stack, "Llm", plan=plan, **kwargs)  # type: ignore[arg-type]
    return Template.from_stack(stack), stack


@pytest.fixture(scope="module")
def components() -> tuple[Template, Stack]:
    """Llama 2 13B from S3 beside Mistral 7B from the Hub, scaled 1..8 copies over up to 2 instances."""
    plan = two_model_plan()
    plan = plan.model_copy(update={"models": (from_s3(plan.models[0]), plan.models[1])})
    plan = scaled(plan, max_capacity=8).model_copy(
        update={"instance_scaling": InstanceScaling(min_instance_count=1, max_instance_count=2)})
    return template_of(plan)


def models_by_id(template: Template) -> dict[str, dict]:
    return {model["Properties"]["PrimaryContainer"]["Environment"]["HF_MODEL_ID"]: model["Properties"]
            for model in template.find_resources("AWS::SageMaker::Model").values()}


def test_weights_from_s3_are_an_uncompressed_prefix_read_without_a_token(components) -> None:
    template, _ = components
    models = models_by_id(template)
    s3, hub = models["/opt/ml/model"], models["mistralai/Mistral-7B-v0.1"]
    assert s3["PrimaryContainer"]["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": URI, "S3DataType": "S3Prefix", "CompressionType": "None"}}
    assert "HF_TOKEN" not in s3["PrimaryContainer"]["Environment"]
    # The Hub model beside it keeps its token reference and reads no model data.
    assert hub["PrimaryContainer"]["Environment"]["HF_TOKEN"] == TOKEN_REF
    assert "ModelDataSource" not in hub["PrimaryContainer"]


def test_the_role_reads_only_the_weights_prefix(components) -> None:
    template, _ = components
    statements = [s for policy in template.find_resources("AWS::IAM::Policy").values()
                  for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    s3 = [s for s in statements if any(a.startswith("s3:") for a in [s["Action"]] if isinstance(a, str))]
    def arn(resource: str) -> dict:  # the stack names no region: its partition is a reference
        return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{resource}"]]}

    assert s3 == [
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": arn("team-models/llama-2-13b/*")},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": arn("team-models"),
         "Condition": {"StringLike": {"s3:prefix": ["llama-2-13b/*"]}}},
    ]


def test_network_isolation_stays_off_while_a_model_reads_the_hub(components) -> None:
    template, _ = components
    config = next(iter(template.find_resources("AWS::SageMaker::EndpointConfig").values()))
    assert "EnableNetworkIsolation" not in config["Properties"]


def test_every_component_caches_its_data_and_rolls_updates_out_behind_its_own_alarms(components) -> None:
    template, _ = components
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    found = template.find_resources("AWS::SageMaker::InferenceComponent")
    assert len(found) == 2 and len(alarms) == 4
    for component in found.values():
        props = component["Properties"]
        name = props["InferenceComponentName"]
        assert props["Specification"]["DataCacheConfig"] == {"EnableCaching": True}
        rolling = props["DeploymentConfig"]["RollingUpdatePolicy"]
        assert rolling == {
            "MaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 25},
            "RollbackMaximumBatchSize": {"Type": "CAPACITY_PERCENT", "Value": 100},
            "WaitIntervalInSeconds": 300,
            # Four batches, each downloading (1200 s), starting (1200 s) and baking (300 s).
            "MaximumExecutionTimeoutInSeconds": 4 * (1200 + 1200 + 300),
        }
        refs = [a["AlarmName"]["Ref"] for a in props["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]]
        watched = {alarms[r]["Properties"]["MetricName"]: alarms[r]["Properties"] for r in refs}
        assert set(watched) == {"Invocation5XXErrors", "ModelLatency"}
        for alarm in watched.values():
            assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": name}]
            assert (alarm["Namespace"], alarm["Period"], alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (
                "AWS/SageMaker", 60, 2, "notBreaching")
        assert (watched["Invocation5XXErrors"]["Statistic"], watched["Invocation5XXErrors"]["Threshold"]) == ("Sum", 1)
        assert watched["ModelLatency"]["ExtendedStatistic"] == "p90"
        assert watched["ModelLatency"]["Threshold"] == LATENCY_ALARM_US == 54_000_000  # µs: 90 % of 60 s


def test_managed_instance_scaling_consolidates_copies_on_scale_in(components) -> None:
    template, _ = components
    template.has_resource_properties("AWS::SageMaker::EndpointConfig", {"ProductionVariants": [Match.object_like({
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 2,
                                   "ScaleInPolicy": {"Strategy": "CONSOLIDATION"}}})]})


def test_the_template_passes_cfn_lint(components) -> None:
    template, _ = components
    assert [f"{m.rule.id} {m.message}" for m in lint(json.dumps(template.to_json()), regions=["us-east-1"])] == []


def test_an_endpoint_whose_weights_all_come_from_s3_is_network_isolated_by_default() -> None:
    plan = instance_plan(models=(from_s3(instance_plan().primary),), hf_token_secret=None)
    template, stack = template_of(plan)
    template.has_resource_properties("AWS::SageMaker::Model", {"EnableNetworkIsolation": True,
                                                               "PrimaryContainer": Match.object_like({
                                                                   "ModelDataSource": Match.any_value()})})
    # No Hub to warn about: the container needs no network.
    assert Annotations.from_stack(stack).find_warning("/Stack/Llm", Match.string_like_regexp("Hugging Face Hub")) == []


def test_a_gated_model_from_s3_needs_no_token_secret_and_isolation_can_be_turned_off() -> None:
    plan = instance_plan(models=(from_s3(instance_plan().primary),), hf_token_secret=None)
    template, _ = template_of(plan, network_isolation=False)
    model = next(iter(template.find_resources("AWS::SageMaker::Model").values()))["Properties"]
    assert "EnableNetworkIsolation" not in model and "HF_TOKEN" not in model["PrimaryContainer"]["Environment"]


def test_rejects_weights_that_are_not_an_s3_prefix() -> None:
    plan = instance_plan(models=(from_s3(instance_plan().primary, "s3://team-models/llama.tar.gz"),))
    with pytest.raises(InputError) as caught:
        template_of(plan)
    assert caught.value.messages == [
        ("Stack/Llm: plan.models[0].model_data_s3_uri: 's3://team-models/llama.tar.gz' is not an S3 prefix; give "
        "s3://<bucket>/<prefix>/ (ending in '/')")]


def test_weights_from_s3_in_a_vpc_warn_that_the_subnets_must_reach_s3() -> None:
    from aws_cdk import aws_ec2 as ec2

    plan = instance_plan(models=(from_s3(instance_plan().primary),), hf_token_secret=None)
    stack = Stack(cdk_app(), "Stack", stack_name="sagellm-test")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=["us-east-1a"],
                                      private_subnet_ids=["subnet-0123456789abcdef0"])
    LlmEndpoint(stack, "Llm", plan=plan, vpc=vpc)
    annotations = Annotations.from_stack(stack)
    annotations.has_warning("/Stack/Llm", Match.string_like_regexp("S3 gateway endpoint"))
    # No Hub to reach: no warning about a route to it.
    assert annotations.find_warning("/Stack/Llm", Match.string_like_regexp("Hugging Face Hub")) == []


@pytest.mark.slow
def test_an_inferentia_plan_with_weights_from_s3_reads_them_from_disk_and_keeps_the_hub_for_its_compiled_model() -> None:
    from sagellm.profiles import resolve

    uri = "s3://team-models/llama-3.1-8b/"
    plan = resolve("max-throughput", "meta-llama/Llama-3.1-8B", "ml.inf2.xlarge", model_s3_uri=uri)
    assert plan.hf_token_secret is None and plan.gated_models == []  # gated on the Hub, not from S3
    template, stack = template_of(plan)
    [model] = template.find_resources("AWS::SageMaker::Model").values()
    container = model["Properties"]["PrimaryContainer"]
    assert container["ModelDataSource"] == {
        "S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix", "CompressionType": "None"}}
    # The neuron entry point reads MODEL_ID, TGI's launcher HF_MODEL_ID: both name the folder SageMaker fills.
    env = container["Environment"]
    assert env["MODEL_ID"] == env["HF_MODEL_ID"] == "/opt/ml/model"
    assert "HF_TOKEN" not in env and TOKEN_REF not in json.dumps(template.to_json())
    assert container["Image"].endswith("/huggingface-pytorch-tgi-inference:2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04")
    # A plain snapshot is exported from the Hub's neuron cache as the server starts: no network isolation.
    assert model["Properties"].get("EnableNetworkIsolation") in (None, False)
    template.has_resource_properties("AWS::SageMaker::EndpointConfig", {"ProductionVariants": [Match.object_like({
        "InstanceType": "ml.inf2.xlarge", "InferenceAmiVersion": "al2-ami-sagemaker-inference-neuron-2",
        "ContainerStartupHealthCheckTimeoutInSeconds": 1800, "ModelDataDownloadTimeoutInSeconds": 1800})]})
    statements = [s for p in template.find_resources("AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    reads = sorted(str(s["Resource"]) for s in statements if str(s["Action"]).startswith("s3:"))
    assert len(reads) == 2 and all("team-models" in r for r in reads)
    assert "llama-3.1-8b/*" in reads[0] + reads[1]
    # Isolation asked for anyway: said at synth, with what it would take.
    isolated, _ = template_of(plan, network_isolation=True)
    [model] = isolated.find_resources("AWS::SageMaker::Model").values()
    assert model["Properties"]["EnableNetworkIsolation"] is True
    stack = Stack(cdk_app(), "Isolated", stack_name="sagellm-isolated")
    LlmEndpoint(stack, "Llm", plan=plan, network_isolation=True)
    Annotations.from_stack(stack).has_warning("/Isolated/Llm", Match.string_like_regexp("aws-neuron/optimum-neuron-cache"))
    assert not lint(json.dumps(Template.from_stack(stack).to_json()), regions=["us-east-1"])


@pytest.mark.slow
def test_a_vllm_neuronx_plan_with_weights_from_s3_keeps_the_network_for_the_hub_cache_its_serve_lists() -> None:
    from sagellm.profiles import resolve

    uri = "s3://team-models/qwen3-8b/"
    plan = resolve("max-throughput", "Qwen/Qwen3-8B", "ml.inf2.24xlarge", model_s3_uri=uri, engine="vllm-neuronx")
    template, _ = template_of(plan)
    [model] = template.find_resources("AWS::SageMaker::Model").values()
    container = model["Properties"]["PrimaryContainer"]
    assert container["Environment"]["SM_ON_MODEL"] == "/opt/ml/model" and "HF_TOKEN" not in container["Environment"]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == uri
    # optimum-neuron's serve lists aws-neuron/optimum-neuron-cache for a plain snapshot, with or without
    # HF_HUB_OFFLINE: isolated, the container would stop before it serves.
    assert model["Properties"].get("EnableNetworkIsolation") in (None, False)
    assert "HF_HUB_OFFLINE" not in container["Environment"]
    stack = Stack(cdk_app(), "Isolated", stack_name="sagellm-isolated")
    LlmEndpoint(stack, "Llm", plan=plan, network_isolation=True)
    Annotations.from_stack(stack).has_warning("/Isolated/Llm", Match.string_like_regexp(
        "looks up its compiled model in the Hub's aws-neuron/optimum-neuron-cache as it starts, unless the weights "
        "in S3 are a neuron export"))

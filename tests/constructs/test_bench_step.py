"""examples/pipeline_app.py synthesizes: the stage's post step benches its endpoint with a least-privilege role
and publishes JUnit to a report group; a failing bench fails the step before the next stage."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, Stage
from aws_cdk.assertions import Template

from sagellm import __version__
from sagellm.constructs.bench_step import BENCH_TAG, DESCRIBE_ACTIONS
from sagellm.constructs.role import INVOKE_ACTIONS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline_app.py"
TAG = "LlmPipeline.Bench"


# A pipeline synthesized per module (tens of seconds on a busy machine): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app() -> App:
    spec = importlib.util.spec_from_file_location("pipeline_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = App()
    module.build(app)
    return app


@pytest.fixture(scope="module")
def pipeline(app: App) -> dict[str, Any]:
    return Template.from_stack(app.node.find_child("LlmPipeline")).to_json()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stage_stack(app: App, pipeline: dict[str, Any]) -> dict[str, Any]:
    stack = app.node.find_child("LlmPipeline").node.find_child("Staging").node.find_child("Llm")
    assert isinstance(stack, Stack)
    return Template.from_stack(stack).to_json()


def of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def bench_project(pipeline: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(key, project)] = [(k, p) for k, p in of_type(pipeline, "AWS::CodeBuild::Project").items()
                        if "sagellm bench" in json.dumps(p)]
    return key, project


def build_spec(project: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The project's build spec with the tokens in it replaced by "<TOKEN>", and the tokens in order."""
    parts = project["Properties"]["Source"]["BuildSpec"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<TOKEN>" for p in parts)
    return json.loads(text), [p for p in parts if not isinstance(p, str)]


def test_the_step_runs_after_the_stage_deploys_and_before_the_next_stage(pipeline: dict[str, Any]) -> None:
    [codepipeline] = of_type(pipeline, "AWS::CodePipeline::Pipeline").values()
    stages = codepipeline["Properties"]["Stages"]
    names = [s["Name"] for s in stages]
    assert names.index("Staging") < names.index("Production")
    staging = next(s for s in stages if s["Name"] == "Staging")
    run_order = {a["Name"]: a["RunOrder"] for a in staging["Actions"]}
    assert run_order["Bench"] > run_order["Llm.Deploy"]
    bench = next(a for a in staging["Actions"] if a["Name"] == "Bench")
    assert bench["ActionTypeId"]["Provider"] == "CodeBuild"
    [variable] = json.loads(bench["Configuration"]["EnvironmentVariables"])
    assert variable["name"] == "SAGELLM_ENDPOINT_NAME"
    assert variable["value"].startswith("#{LlmPipelineStagingLlm") and "BenchEndpointName" in variable["value"]


def test_the_step_installs_the_synthesizing_sagellm_and_benches_the_existing_endpoint_with_the_thresholds(
        pipeline: dict[str, Any]) -> None:
    spec, _ = build_spec(bench_project(pipeline)[1])

    assert spec["phases"]["install"]["commands"] == [f"pip install sagellm=={__version__}"]
    [command] = spec["phases"]["build"]["commands"]
    assert shlex.split(command) == [
        "sagellm", "bench", "--target", "sagemaker", "--endpoint-name", "$SAGELLM_ENDPOINT_NAME",
        "--region", "us-east-1", "--thresholds", "examples/gates.yaml", "--out", "sagellm-results",
        "--concurrency", "1,2,4,8,16"]
    assert "--profile" not in command and "--keep" not in command  # nothing is deployed: it reads the endpoint


def test_pips_cache_is_kept_between_runs_on_the_build_host(pipeline: dict[str, Any]) -> None:
    project = bench_project(pipeline)[1]
    spec, _ = build_spec(project)

    assert project["Properties"]["Cache"] == {"Type": "LOCAL", "Modes": ["LOCAL_CUSTOM_CACHE"]}
    assert spec["cache"] == {"paths": ["/root/.cache/pip/**/*"]}


def test_a_pipeline_may_share_pips_cache_across_hosts_in_a_bucket() -> None:
    from aws_cdk import aws_codebuild as codebuild
    from aws_cdk import aws_s3 as s3
    from aws_cdk import pipelines

    from sagellm import BenchStep, LlmEndpoint
    from sagellm.profiles import resolve

    app = App()
    pipeline_stack = Stack(app, "Pipeline")
    bucket = s3.Bucket(pipeline_stack, "PipCache")
    source = pipelines.CodePipelineSource.git_hub("o/r", "main")
    pipeline = pipelines.CodePipeline(pipeline_stack, "P", synth=pipelines.ShellStep(
        "Synth", input=source, commands=["true"]))
    stage = Stage(pipeline_stack, "S")
    endpoint = LlmEndpoint(Stack(stage, "L"), "Llm", plan=resolve("max-throughput", "tiiuae/falcon-7b"))
    step = BenchStep(pipeline_stack, "Bench", endpoint=endpoint, thresholds="gates.yaml",
                     cache=codebuild.Cache.bucket(bucket, prefix="pip"), install="sagellm==9.9.9")
    pipeline.add_stage(stage, post=[step])

    [project] = [p for p in of_type(Template.from_stack(pipeline_stack).to_json(), "AWS::CodeBuild::Project").values()
                 if "sagellm bench" in json.dumps(p)]
    assert project["Properties"]["Cache"]["Type"] == "S3"
    assert build_spec(project)[0]["phases"]["install"]["commands"] == ["pip install sagellm==9.9.9"]


def test_junit_goes_to_the_steps_report_group(pipeline: dict[str, Any]) -> None:
    [(group_id, group)] = of_type(pipeline, "AWS::CodeBuild::ReportGroup").items()
    assert group["Properties"]["Type"] == "TEST"
    spec, tokens = build_spec(bench_project(pipeline)[1])

    assert spec["reports"] == {"<TOKEN>": {"files": ["junit.xml"], "base-directory": "sagellm-results",
                                           "file-format": "JUNITXML"}}
    assert tokens == [{"Fn::GetAtt": [group_id, "Arn"]}]


def test_the_role_may_only_describe_and_invoke_the_tagged_endpoint_and_write_its_reports(
        pipeline: dict[str, Any]) -> None:
    _key, project = bench_project(pipeline)
    role = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    [policy] = [p for p in of_type(pipeline, "AWS::IAM::Policy").values()
                if p["Properties"]["Roles"] == [{"Ref": role}]]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    [group_id] = of_type(pipeline, "AWS::CodeBuild::ReportGroup")

    sagemaker = [s for s in statements if any(a.startswith("sagemaker:") for a in s["Action"])]
    assert len(sagemaker) == 1
    [endpoint] = sagemaker
    assert endpoint["Action"] == [*DESCRIBE_ACTIONS, *INVOKE_ACTIONS]
    assert endpoint["Condition"] == {"StringEquals": {f"aws:ResourceTag/{BENCH_TAG}": TAG}}
    arns = ["".join(p if isinstance(p, str) else "" for p in r["Fn::Join"][1]) for r in endpoint["Resource"]]
    assert arns == [f"arn::sagemaker:us-east-1:111111111111:{kind}/*"
                    for kind in ("endpoint", "endpoint-config", "model", "inference-component")]
    reports = next(s for s in statements if s.get("Sid") == "WriteBenchReports")
    assert reports["Resource"] == {"Fn::GetAtt": [group_id, "Arn"]}
    # Everything else is what CDK Pipelines gives every step: its logs, its own report groups, the artifacts.
    others = {a for s in statements if s not in (endpoint, reports) for a in s["Action"]}
    assert {a.split(":")[0] for a in others} == {"logs", "codebuild", "s3"}
    assert not [a for a in others if a.startswith(("s3:Put", "s3:Delete"))]


def test_the_stage_tags_every_endpoint_resource_and_outputs_the_endpoint_name(stage_stack: dict[str, Any]) -> None:
    for kind in ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint"):
        [resource] = of_type(stage_stack, kind).values()
        assert {"Key": BENCH_TAG, "Value": TAG} in resource["Properties"]["Tags"], kind
    [endpoint_id] = of_type(stage_stack, "AWS::SageMaker::Endpoint")
    [output] = [o for k, o in stage_stack["Outputs"].items() if "BenchEndpointName" in k]
    assert output["Value"] == {"Fn::GetAtt": [endpoint_id, "EndpointName"]}


def test_on_an_inference_component_endpoint_the_step_names_the_component_it_benches() -> None:
    from sagellm import BenchStep, LlmEndpoint
    from sagellm.profiles import resolve

    app = App()
    stage_stack, pipeline_stack = Stack(app, "Stage"), Stack(app, "Pipeline")
    plan = resolve("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", hf_token_secret="prod/huggingface/token")
    endpoint = LlmEndpoint(stage_stack, "Llm", plan=plan)

    step = BenchStep(pipeline_stack, "Bench", endpoint=endpoint, thresholds="gates.yaml")

    [command] = step.commands
    assert shlex.split(command)[6:8] == ["--inference-component", "$SAGELLM_INFERENCE_COMPONENT"]
    assert set(step.env_from_cfn_outputs) == {"SAGELLM_ENDPOINT_NAME", "SAGELLM_INFERENCE_COMPONENT"}
    [component] = of_type(Template.from_stack(stage_stack).to_json(), "AWS::SageMaker::InferenceComponent").values()
    assert {"Key": BENCH_TAG, "Value": "Pipeline.Bench"} in component["Properties"]["Tags"]

"""The real pinned CDK CLI synthesizes app.py for every standard profile and rejects bad context in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from construct_plans import HF_SECRET, STANDARD

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def cdk_synth(tmp_path: Path, *context: str) -> subprocess.CompletedProcess[str]:
    """`npx --no-install cdk synth -c …` from the repo root, writing only under tmp_path."""
    env = {
        **os.environ,
        # cdk.json runs `python3 app.py`: the interpreter running the tests (with aws_cdk) comes first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "CDK_HOME": str(tmp_path / "cdk-home"),
        "CDK_DISABLE_CLI_TELEMETRY": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    args = [a for pair in context for a in ("-c", pair)]
    return subprocess.run(
        ["npx", "--no-install", "cdk", "synth", "--quiet", "--output", str(tmp_path / "cdk.out"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def repo_outputs() -> set[Path]:
    """What a synth could leave in the repository: a cloud assembly or a context cache."""
    return {*ROOT.glob("cdk.out/**/*"), *ROOT.glob("cdk.context.json")}


@pytest.mark.parametrize("profile", list(STANDARD))
def test_cdk_synth_builds_the_profile_stack(profile, tmp_path):
    model, instance = STANDARD[profile]
    context = [f"profile={profile}", f"model={model}", f"hf_token_secret={HF_SECRET}"]
    context += [f"instance={instance}"] if instance else []
    before = repo_outputs()
    result = cdk_synth(tmp_path, *context)
    assert result.returncode == 0, result.stderr
    assert repo_outputs() == before, "synth wrote into the repository"
    stack_name = f"sagellm-{profile}-{model.split('/')[-1].lower()}"
    manifest = json.loads((tmp_path / "cdk.out" / "manifest.json").read_text())
    ((artifact_id, artifact),) = [(k, a) for k, a in manifest["artifacts"].items()
                                  if a["type"] == "aws:cloudformation:stack"]
    # The construct id is the stack name (so the CLI selects the stack by name); then CDK omits stackName.
    assert artifact["properties"].get("stackName", artifact_id) == stack_name
    template = json.loads((tmp_path / "cdk.out" / artifact["properties"]["templateFile"]).read_text())
    types = {r["Type"] for r in template["Resources"].values()}
    assert {"AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint"} <= types
    assert ("AWS::SageMaker::InferenceComponent" in types) == (profile in ("replicas", "scale-to-zero"))
    assert ("AWS::ApplicationAutoScaling::ScalableTarget" in types) == (profile in ("autoscale", "scale-to-zero"))
    # Components carry their rollout's alarms; only scale-to-zero adds one on no-capacity failures.
    alarms = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert bool(alarms) == (profile in ("replicas", "scale-to-zero"))
    assert any(a.get("MetricName") == "NoCapacityInvocationFailures" for a in alarms) == (profile == "scale-to-zero")
    # The context key's secret reaches the container as a dynamic reference, nothing else.
    models = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    assert all(m["Properties"]["PrimaryContainer"]["Environment"]["HF_TOKEN"]
               == f"{{{{resolve:secretsmanager:{HF_SECRET}:SecretString:::}}}}" for m in models)
    # jsii runs on the bundled Node: no end-of-life banner.
    assert "end-of-life" not in result.stderr


def test_cdk_synth_of_an_inf2_plan_on_vllm_neuronx_runs_its_image_on_every_neuroncore(tmp_path):
    result = cdk_synth(tmp_path, "profile=max-throughput", "model=Qwen/Qwen3-8B", "instance=ml.inf2.24xlarge",
                       "engine=vllm-neuronx", f"hf_token_secret={HF_SECRET}")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "cdk.out" / "manifest.json").read_text())
    (artifact,) = [a for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"]
    template = json.loads((tmp_path / "cdk.out" / artifact["properties"]["templateFile"]).read_text())
    (model,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    (config,) = [r["Properties"] for r in template["Resources"].values()
                 if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    container, (variant,) = model["PrimaryContainer"], config["ProductionVariants"]
    assert container["Image"].endswith("/huggingface-vllm-inference-neuronx:"
                                       "0.11.0-optimum0.4.4-neuronx-py310-sdk2.26.1-ubuntu22.04")
    assert {k: v for k, v in container["Environment"].items() if k != "SM_ON_BATCH_SIZE"} == {
        "SM_ON_MODEL": "Qwen/Qwen3-8B", "SM_ON_TENSOR_PARALLEL_SIZE": "12", "SM_ON_SEQUENCE_LENGTH": "4096",
        "SM_ON_ALLOW_NON_CACHED_MODEL": "", "HF_TOKEN": f"{{{{resolve:secretsmanager:{HF_SECRET}:SecretString:::}}}}"}
    assert (variant["InferenceAmiVersion"], variant["ContainerStartupHealthCheckTimeoutInSeconds"]) == (
        "al2-ami-sagemaker-inference-neuron-2", 3600)


def sagellm_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("sagellm:")]


def test_cdk_synth_of_a_gated_model_without_a_secret_fails_with_the_fix(tmp_path):
    assert sagellm_lines(cdk_synth(tmp_path, "profile=max-throughput", "model=llama2-7b")) == [
        # The stack's construct id is its name: `sagellm-<profile>-<model>`.
        ("sagellm: bad cdk context: sagellm-max-throughput-llama2-7b/Llm: meta-llama/Llama-2-7b-hf is gated on the "
        "Hugging Face Hub and no hf_token_secret is set: the endpoint would never start; store a token that has access in Secrets Manager "
        "and pass -c hf_token_secret=<secret name or ARN> (or hf_token_secret: in the profile)")
    ]


def test_cdk_synth_refuses_a_token_as_context_without_echoing_it(tmp_path):
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
    result = cdk_synth(tmp_path, "profile=max-throughput", "model=llama2-7b", f"hf_token_secret={token}",
                       f"hf_token={token}")
    assert sagellm_lines(result) == [
        ("sagellm: bad cdk context: hf_token: a token is never passed as context (it would be written to cdk.out): "
        "store it in Secrets Manager and set hf_token_secret: <secret name or ARN>"),
        ("sagellm: bad cdk context: hf_token_secret: looks like a Hugging Face access token itself; give the name or "
        "ARN of the Secrets Manager secret that holds the token (e.g. prod/huggingface/token)"),
    ]
    assert token not in result.stderr + result.stdout


def test_a_token_in_a_profile_gets_the_same_words_from_validate_and_synth(tmp_path):
    token = "api_org_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBaZyXwVuTs"
    team = tmp_path / "team"
    team.mkdir()
    (team / "t.yaml").write_text(f"name: t\nextends: max-throughput\ntags:\n  owner: {token}\n")
    words = (f"{team / 't.yaml'}:4: tags.owner: looks like a Hugging Face access token; a token never goes here: "
             "store it in Secrets Manager and set hf_token_secret: <secret name or ARN>")
    synth = cdk_synth(tmp_path, "profile=t", "model=llama2-7b", f"profiles_dir={team}", f"hf_token_secret={HF_SECRET}")
    assert sagellm_lines(synth) == [f"sagellm: bad cdk context: {words}"]
    validate = subprocess.run([str(Path(sys.executable).parent / "sagellm"), "profiles", "validate", str(team / "t.yaml")],
                              capture_output=True, text=True, check=False, cwd=tmp_path)
    assert validate.returncode == 2
    assert validate.stderr.splitlines() == [f"sagellm: error: {words}"]
    assert token not in synth.stderr + validate.stderr


def test_cdk_synth_with_an_unknown_profile_fails_with_one_line_naming_key_value_and_choices(tmp_path):
    result = cdk_synth(tmp_path, "profile=fastest", "model=meta-llama/Llama-2-7b-hf")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("sagellm:")]
    assert len(lines) == 1, result.stderr
    assert "profile" in lines[0] and "'fastest'" in lines[0] and "max-throughput" in lines[0]
    assert "Traceback" not in result.stderr


def test_cdk_synth_with_a_profile_name_no_stack_name_can_hold_fails_with_one_line(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "cafe.yaml").write_text("name: café\nextends: max-throughput\n")
    result = cdk_synth(tmp_path, "profile=café", "model=meta-llama/Llama-2-7b-hf", f"profiles_dir={profiles}")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("sagellm:")]
    assert lines == [(f"sagellm: bad cdk context: {profiles / 'cafe.yaml'}:1: name: 'café' cannot be part of a "
                     "CloudFormation stack name: use ASCII letters, digits and hyphens, at most 64 characters "
                     "(e.g. 'cafe')")], result.stderr
    assert "Traceback" not in result.stderr and "    at " not in result.stderr  # no Python or JS stack


def test_app_with_bad_context_values_exits_2_with_one_line_per_key(tmp_path):
    context = {"profile": "max-throughput", "model": "meta-llama/Llama-2-7b-hf", "input_tokens": "many",
               "stack_name": "my stack", "bootstrapless": "yes", "instnace": "ml.g5.2xlarge"}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out"),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=240, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        "sagellm: bad cdk context: instnace: unknown context key; did you mean instance?",
        "sagellm: bad cdk context: input_tokens: 'many' must be a whole number of tokens from 1 to 4294967295",
        ("sagellm: bad cdk context: stack_name: 'my stack' is not a CloudFormation stack name: ASCII letters, digits "
         "and hyphens, starting with a letter, at most 128 characters"),
        "sagellm: bad cdk context: bootstrapless: 'yes' must be true or false",
    ]


@pytest.mark.parametrize(
    ("profile", "model", "instance", "region", "missing"),
    [
        ("replicas", "meta-llama/Llama-2-13b-hf", "ml.p4d.24xlarge", "eu-west-3", "AWS::SageMaker::InferenceComponent"),
        ("max-throughput", "meta-llama/Llama-2-7b-hf", None, "me-central-1", "AWS::SageMaker::Model"),
    ],
)
def test_cdk_synth_where_cloudformation_lacks_a_resource_is_sagellms_one_line(
        profile, model, instance, region, missing, tmp_path):
    context = [f"profile={profile}", f"model={model}", f"hf_token_secret={HF_SECRET}", f"region={region}"]
    result = cdk_synth(tmp_path, *context, *([f"instance={instance}"] if instance else []))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("sagellm:")]
    assert len(lines) == 1 and missing in lines[0] and region in lines[0], result.stderr
    # Before CDK's own check of resource types per region could speak.
    assert "ValidationError" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("model", "line"), [
    ("./snap", ("model: snap is a local folder, which SageMaker cannot read: upload it with `sagellm weights upload "
                "snap s3://<bucket>/<prefix>/`, then add -c model_s3_uri=s3://<bucket>/<prefix>/")),
    ("./snapp", ("model: snapp: no such folder (looked for {cwd}/snapp); give the folder holding the model's "
                "config.json, or a Hugging Face id")),
])
def test_sagellm_cdk_synth_of_a_local_folder_says_in_one_line_how_to_deploy_it(tmp_path, model, line):
    shutil.copytree(ROOT / "tests" / "fixtures" / "tiny-model", tmp_path / "snap")
    # The user's command, from the folder that holds ./snap.
    result = subprocess.run(
        [str(Path(sys.executable).parent / "sagellm"), "cdk", "synth", "--quiet", "--output", str(tmp_path / "out"),
         "--app", f"{sys.executable} -m sagellm.cdk_app", "-c", "profile=max-throughput", "-c", f"model={model}",
         "-c", "instance=ml.g5.2xlarge"],
        cwd=tmp_path, env={**os.environ, "CDK_HOME": str(tmp_path / "cdk-home"), "CDK_DISABLE_CLI_TELEMETRY": "1"},
        capture_output=True, text=True, timeout=240, check=False)
    assert sagellm_lines(result) == [f"sagellm: bad cdk context: {line.format(cwd=tmp_path)}"]
    assert not list((tmp_path / "out").glob("*.template.json"))

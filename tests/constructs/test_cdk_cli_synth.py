"""The real pinned CDK CLI synthesizes app.py for every standard profile and rejects bad context in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from construct_plans import STANDARD

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
    context = [f"profile={profile}", f"model={model}"] + ([f"instance={instance}"] if instance else [])
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
    assert ("AWS::SageMaker::InferenceComponent" in types) == (profile == "replicas")
    assert ("AWS::ApplicationAutoScaling::ScalableTarget" in types) == (profile == "autoscale")


def test_cdk_synth_with_an_unknown_profile_fails_with_one_line_naming_key_value_and_choices(tmp_path):
    result = cdk_synth(tmp_path, "profile=fastest", "model=meta-llama/Llama-2-7b-hf")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("sagellm:")]
    assert len(lines) == 1, result.stderr
    assert "profile" in lines[0] and "'fastest'" in lines[0] and "max-throughput" in lines[0]
    assert "Traceback" not in result.stderr

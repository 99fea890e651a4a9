"""The recommended profile synthesizes through the pinned CDK CLI as it is written (`cdk synth -c profile=…`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAGELLM = Path(sys.executable).parent / "sagellm"
HF_SECRET = "hf-token"  # a Secrets Manager name; synth only writes a dynamic reference to it
pytestmark = pytest.mark.integration


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.parametrize(("load", "kind"), [
    # copies win here without headroom (test_recommend)
    (["--concurrency", "32", "--headroom", "0"], "AWS::SageMaker::InferenceComponent"),
    (["--request-rate", "2", "--peak-rate", "8"], "AWS::ApplicationAutoScaling::ScalableTarget"),
])
def test_cdk_synth_accepts_the_recommended_profile(tmp_path, load, kind):
    slo = tmp_path / "slo.yaml"
    slo.write_text("rules:\n  - {metric: itl_ms.p50, max: 30}\n" if "--concurrency" in load
                   else "rules:\n  - {metric: itl_ms.p50, max: 40}\n")
    families = "g5" if "--concurrency" in load else "g5,g6e"
    rec = run([str(SAGELLM), "recommend", "--model", "llama2-7b", *load, "--thresholds", str(slo), "--families",
               families, "--engines", "tgi", "--out", str(tmp_path / "rec")], cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    data = json.loads((tmp_path / "rec" / "recommendation.json").read_text())
    profile = Path(data["profile"])
    env = {
        **os.environ,
        # cdk.json runs `python3 app.py`: the interpreter running the tests (with aws_cdk) comes first.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "CDK_HOME": str(tmp_path / "cdk-home"),
        "CDK_DISABLE_CLI_TELEMETRY": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    synth = run(["npx", "--no-install", "cdk", "synth", "--quiet", "--output", str(tmp_path / "cdk.out"),
                 "-c", f"profile={profile.stem}", "-c", f"profiles_dir={profile.parent}", "-c", "model=llama2-7b",
                 "-c", f"hf_token_secret={HF_SECRET}"], cwd=ROOT, env=env)
    assert synth.returncode == 0, synth.stderr
    manifest = json.loads((tmp_path / "cdk.out" / "manifest.json").read_text())
    (stack,) = [a for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"]
    template = json.loads((tmp_path / "cdk.out" / stack["properties"]["templateFile"]).read_text())
    resources = list(template["Resources"].values())
    assert kind in {r["Type"] for r in resources}
    (config,) = [r for r in resources if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == data["pick"]["instance_type"]
    assert variant["InitialInstanceCount"] == data["pick"]["instance_count"]
    if kind == "AWS::SageMaker::InferenceComponent":
        (ic,) = [r for r in resources if r["Type"] == kind]
        assert ic["Properties"]["RuntimeConfig"]["CopyCount"] == data["pick"]["copies"]
    else:
        (target,) = [r for r in resources if r["Type"] == kind]
        assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (
            data["peak"]["min_capacity"], data["peak"]["max_capacity"])

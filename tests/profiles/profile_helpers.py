"""Shared constants and planner helpers for profile tests (imported by name: tests have no packages)."""

from __future__ import annotations

import sys

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.cli import main
from sagellm.engines import generation_of
from sagellm.planner import Shape
from sagellm.profiles import DeploymentPlan

LLAMA2_7B = "meta-llama/Llama-2-7b-hf"
LLAMA2_13B = "meta-llama/Llama-2-13b-hf"
LLAMA2_70B = "meta-llama/Llama-2-70b-hf"


def shape_of(plan: DeploymentPlan) -> Shape:
    """The planner shape of one copy of the plan's main model (no admission or batch limits)."""
    m = plan.primary
    return Shape(find_model(m.model_id), find_instance(plan.instance_type), m.tensor_parallel,
                 quantization=m.quantization, generation=generation_of(plan.container))


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    """Run the `sagellm` entry point in-process (its own error handling included): exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["sagellm", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err

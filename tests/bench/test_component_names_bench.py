"""A bench of inference components whose model id has a dot (Llama 3.x, Qwen2.5, Mistral v0.3) deploys and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagellm import bench
from sagellm.errors import ExitStatus
from sagellm.planner import Payload


def quiet(text: str) -> None:
    """The bench's `say`, silenced."""


@pytest.mark.integration
def test_replicas_of_a_dotted_model_id_bench_on_the_local_target(tmp_path: Path) -> None:
    # Once refused by the construct ("… must be letters, digits and single hyphens"): now sagellm names the component.
    outcome = bench.run(bench.Bench(
        serving=bench.ServingSpec(profile="replicas", model="mistralai/Mistral-7B-Instruct-v0.3",
                                  payload=Payload(256, 32)),
        target=bench.Local(time_scale=0.05), load=bench.Closed((1, 2), requests_per_level=4, warmup=0),
        sweep=bench.Sweep("doubling"), output=bench.Output(tmp_path / "out")), say=quiet)

    assert outcome.exit_status == ExitStatus.OK, outcome.error
    results = outcome.results
    assert [(lv.concurrency, lv.ok, lv.requests) for lv in results.levels] == [(1, 4, 4), (2, 4, 4)]
    assert results.teardown.status == "destroyed"
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["endpoint_kind"] == "inference-component"
    assert [m["name"] for m in plan["models"]] == ["mistral-7b-instruct-v0.3"]

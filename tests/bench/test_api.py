"""The bench as a Python API: specs that check themselves when built, a plan made before anything is
deployed, and a whole run without the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagellm import bench
from sagellm.bench.planning import plan_bench
from sagellm.bench.specs import ramp_of
from sagellm.cli.options import spec_flags
from sagellm.errors import ExitStatus, InputError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload

MODEL, INSTANCE = "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge"


def served(profile: str = "max-throughput") -> bench.ServingSpec:
    return bench.ServingSpec(profile=profile, model=MODEL, instance=INSTANCE, payload=Payload(256, 32))


def quiet(text: str) -> None:
    """The bench's `say`, silenced."""


@pytest.mark.parametrize(("build", "message"), [
    (lambda: bench.Http(url=""), "Http.url: required (e.g. http://localhost:8080 for TGI)"),
    (lambda: bench.Local(api="openai"), "Local.api: 'openai' is an http server's API"),
    (lambda: bench.Local(time_scale=2.0), "Local.time_scale: 2.0 must be in (0, 1]"),
    (lambda: bench.Local(instance_startup_s=0.0), "Local.instance_startup_s: 0 must be > 0 seconds"),
    (lambda: bench.Open((1.0,), arrivals="bursty"), "Open.arrivals: 'bursty' must be constant or poisson"),
    (lambda: bench.Closed(requests_per_level=4, duration_per_level_s=1.0),
     "Closed.requests_per_level/Closed.duration_per_level_s: give one, not both"),
    (lambda: bench.Closed(requests_per_level=0), "Closed.requests_per_level: 0 must be at least 1"),
    (lambda: bench.Ramp(step_s=-1.0), "Ramp.step_s: -1 must be a positive number of seconds"),
    (lambda: bench.Sweep(budget_minutes=0.0), "Sweep.budget_minutes: 0 must be a positive number"),
    (lambda: bench.Bench(target=bench.SageMaker()), "ServingSpec.profile/ServingSpec.model: required"),
    (lambda: bench.Bench(serving=bench.ServingSpec(profile="max-throughput"), target=bench.Http("http://127.0.0.1:9")),
     "ServingSpec.profile/ServingSpec.model: give both"),
])
def test_a_spec_refuses_bad_values_when_built_naming_the_field(build: object, message: str) -> None:
    with pytest.raises(InputError) as caught:
        build()  # type: ignore[operator]
    assert caught.value.messages[0].startswith(message)


@pytest.mark.parametrize(("build", "message"), [
    (lambda: bench.Sweep("fast"), "Sweep.method: 'fast' must be adaptive or doubling"),
    (lambda: bench.Workers(count=0), "Workers.count: 0 must be auto or at least 1"),
    (lambda: bench.Output(mlflow="localhost:5000"), "Output.mlflow: "),  # not a URI, or no mlflow installed
    # The workload is read (lengths, dataset, tokenizer) when the bench is planned.
    (lambda: plan_bench(bench.Bench(serving=served(), workload=bench.WorkloadOptions(input_tokens="12-4"))),
     "WorkloadOptions.input_tokens: '12-4' is an empty range"),
    (lambda: plan_bench(bench.Bench(serving=served(), sweep=bench.Sweep("adaptive"), load=bench.Open((1.0,)))),
     ("Sweep.method adaptive: closed loop only (the planner predicts concurrency levels); drop Open.request_rate "
      "or use Sweep.method doubling")),
])
def test_sweep_workers_mlflow_and_workload_problems_name_the_field_not_a_flag(build: object, message: str) -> None:
    with pytest.raises(InputError) as caught:
        build()  # type: ignore[operator]
    [line] = caught.value.messages
    assert line.startswith(message) and not any(flag in line for flag in spec_flags().values())


def test_an_option_of_another_target_cannot_be_given() -> None:
    with pytest.raises(TypeError):
        bench.Local(url="http://localhost:8080")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        bench.Endpoint("prod-chat", keep=True)  # type: ignore[call-arg]


def test_repeated_levels_cannot_become_a_ramp(tmp_path: Path) -> None:
    assert ramp_of(bench.Open((1.0, 2.0), "poisson", duration_per_level_s=30.0)) == \
        bench.Ramp((1.0, 2.0), "poisson", step_s=30.0)
    with pytest.raises(InputError) as caught:
        plan_bench(bench.Bench(serving=served("autoscale"), load=bench.RampIfAutoscaled(bench.Closed(repeats=2)),
                               output=bench.Output(tmp_path / "out")))
    assert caught.value.messages == ["Closed.repeats: a ramp runs once; only levels without a ramp repeat"]


def test_a_plan_decides_the_load_before_anything_is_deployed(tmp_path: Path) -> None:
    doubling = plan_bench(bench.Bench(serving=served(), sweep=bench.Sweep("doubling"),
                                      output=bench.Output(tmp_path / "out")))
    assert (doubling.method, doubling.levels, doubling.run.concurrency) == (
        "doubling", DEFAULT_CONCURRENCY, list(DEFAULT_CONCURRENCY))

    autoscaled = plan_bench(bench.Bench(serving=served("autoscale"), output=bench.Output(tmp_path / "out")))
    assert isinstance(autoscaled.load, bench.Ramp) and len(autoscaled.levels) == 8  # predicted steps
    assert autoscaled.run.request_rate == list(autoscaled.levels) and autoscaled.run.repeats == 1

    asked = plan_bench(bench.Bench(serving=served("autoscale"), load=bench.Closed((1, 2)),
                                   output=bench.Output(tmp_path / "out")))
    assert isinstance(asked.load, bench.Closed) and asked.method == "adaptive"
    assert not (tmp_path / "out").exists()  # planning writes nothing


@pytest.mark.integration
def test_a_local_bench_runs_through_the_api_without_the_cli(tmp_path: Path) -> None:
    outcome = bench.run(bench.Bench(
        serving=served(), target=bench.Local(time_scale=0.05),
        load=bench.Closed((1, 2), requests_per_level=4, warmup=0), sweep=bench.Sweep("doubling"),
        output=bench.Output(tmp_path / "out")), say=quiet)

    assert outcome.exit_status == ExitStatus.OK, outcome.error
    results = outcome.results
    assert (results.run.target, results.run.emulated, results.run.concurrency) == ("local", True, [1, 2])
    assert [lv.concurrency for lv in results.levels] == [1, 2]
    assert all(lv.ok == lv.requests == 4 and lv.predicted is not None for lv in results.levels)
    assert results.teardown.status == "destroyed"
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["run"]["bench_run"] == results.run.bench_run

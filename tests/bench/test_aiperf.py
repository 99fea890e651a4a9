"""A bench workload as an AIPerf workload spec (SageMaker AI's AIWorkloadConfig) and back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sagellm.aws import ai_jobs
from sagellm.bench.aiperf import read_spec, spec_of, workload_of
from sagellm.bench.specs import Closed, Open, WorkloadOptions
from sagellm.errors import InputError

SAGELLM = Path(sys.executable).parent / "sagellm"


def sagellm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                          env=env)


def test_a_closed_loop_becomes_aiperfs_parameters_with_the_prefix_outside_the_unique_part() -> None:
    spec = spec_of(WorkloadOptions("512:64", "128", shared_prefix=100, seed=7), Closed((8,), warmup=2))
    assert spec == {"benchmark": {"type": "aiperf"}, "parameters": {
        "prompt_input_tokens_mean": 412, "prompt_input_tokens_stddev": 64, "output_tokens_mean": 128,
        "output_tokens_stddev": 0, "num_prefix_prompts": 1, "prefix_prompt_length": 100, "concurrency": 8,
        "request_count": 24, "warmup_request_count": 16, "random_seed": 7}}


@pytest.mark.parametrize(("workload", "load"), [
    (WorkloadOptions("512:64", "128", shared_prefix=100, seed=7), Closed((8,), 40, None, 2)),
    (WorkloadOptions("300", "50:5", seed=3), Open((2.5,), "poisson", 64, None, 120.0, 4)),
    (WorkloadOptions("1000", "200"), Open((0.5,), "constant", 1024, 30, None, 0)),
])
def test_an_exported_workload_reads_back_as_the_same_bench(workload: WorkloadOptions, load: Closed | Open,
                                                          tmp_path: Path) -> None:
    params = ai_jobs.workload_config_request("chat", spec_of(workload, load))
    path = ai_jobs.write_request(tmp_path, "CreateAIWorkloadConfig", params)
    read = read_spec(path)
    assert read.workload == workload and read.load == load


@pytest.mark.parametrize(("workload", "load", "message"), [
    (WorkloadOptions("256-1024"), Closed((4,)), ("WorkloadOptions.input_tokens: '256-1024': AIPerf draws lengths "
                                                  "from a normal distribution; give a fixed length (512) or "
                                                  "mean:stddev (512:64)")),
    (WorkloadOptions(), Closed((1, 2)), "Closed.concurrency: 2 levels; an AIPerf run is one level (give one)"),
    (WorkloadOptions(dataset=Path("chat.jsonl")), Closed((1,)), ("WorkloadOptions.dataset: a local file; AIPerf "
                                                                  "reads a dataset from S3 (upload it in AIPerf's "
                                                                  "format and give its S3 URI)")),
])
def test_what_aiperf_cannot_express_is_refused(workload: WorkloadOptions, load: Closed, message: str) -> None:
    with pytest.raises(InputError) as caught:
        spec_of(workload, load)
    assert caught.value.messages == [message]


def test_a_spec_with_parameters_the_bench_lacks_is_refused_naming_each() -> None:
    spec = {"benchmark": {"type": "aiperf"}, "parameters": {"concurrency": 4, "session_turns_mean": 3,
                                                            "arrival_pattern": "gamma", "request_rate": 2}}
    with pytest.raises(InputError) as caught:
        workload_of(spec, "w.yaml")
    assert caught.value.messages[0].startswith("w.yaml: parameters.session_turns_mean: sagellm's bench has no such "
                                               "setting")
    assert caught.value.messages[1] == ("w.yaml: parameters.arrival_pattern: 'gamma'; the bench sends constant or "
                                        "poisson")


def test_a_bare_yaml_spec_takes_aiperfs_defaults_for_what_it_leaves_out(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("benchmark: {type: aiperf}\nparameters: {concurrency: 4, request_count: 20}\n")
    read = read_spec(path)
    # AIPerf's 550-token prompts; no output length: the bench sends the profile's
    assert read.workload == WorkloadOptions("550", None)
    assert read.load == Closed((4,), 20, None, 0)


@pytest.mark.slow
def test_workload_export_writes_the_request_and_bench_refuses_flags_beside_it(tmp_path: Path) -> None:
    done = sagellm("workload", "export", "--input-tokens", "512:64", "--output-tokens", "128", "--request-rate", "2",
                   "--name", "chat-2rps", "--out", "aws", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "aws" / "CreateAIWorkloadConfig.request.json"
    params = json.loads(path.read_text())
    assert ai_jobs.request_problems("CreateAIWorkloadConfig", params) == []
    assert json.loads(params["AIWorkloadConfigs"]["WorkloadSpec"]["Inline"])["parameters"]["request_rate"] == 2
    bad = sagellm("workload", "export", "--input-tokens", "1-9", "--concurrency", "2", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("sagellm: error: --input-tokens: '1-9': AIPerf draws")
    both = sagellm("bench", "--workload-config", str(path), "--concurrency", "4", "--target", "http", "--url",
                   "http://127.0.0.1:9", cwd=tmp_path)
    assert both.returncode == 2
    assert both.stderr.strip() == ("sagellm: error: --concurrency: not with --workload-config, which sets the "
                                   "workload and the load")

"""`--load-by aws-benchmark-job`: each level one SageMaker AI benchmark job, every call through botocore's Stubber
(it checks each request against botocore 1.44.8's input shape and each canned reply against the output shape; no
account is called). The jobs' results are AIPerf's real export (tests/fixtures/aiperf/run1, see test_aiperf_records)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Self

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from bench_helpers import sagellm
from sagellm.aws.account import Account
from sagellm.aws.endpoints import DeployedEndpoint
from sagellm.bench import aws_job, specs
from sagellm.bench.aws_job import AwsJobSweep, JobClients
from sagellm.bench.client.transports import TGI
from sagellm.bench.client.workload import WorkloadOptions
from sagellm.bench.sweep.choosers import Chooser
from sagellm.clock import REAL
from sagellm.errors import ExitStatus, InputError, TargetError
from sagellm.planner import Payload
from sagellm.results.schema import Teardown, load_results

ROLE = "arn:aws:iam::111122223333:role/Bench"
OUTPUT = "s3://team-results/bench"
ARN = "arn:aws:sagemaker:us-east-1:111122223333:"
RUN = Path(__file__).parents[1] / "fixtures" / "aiperf" / "run1"
# The fixture's completed requests: a level the gate can pass (its 11 cancelled ones fail a level on their own).
COMPLETED = "".join(line + "\n" for line in (RUN / "profile_export.jsonl").read_text().splitlines()
                    if json.loads(line)["error"] is None)


def client(service: str) -> Any:
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")  # never sent: the Stubber answers


class Stubs:
    """A stubbed SageMaker and S3, and what the jobs sent."""

    def __init__(self) -> None:
        self.sagemaker, self.s3 = client("sagemaker"), client("s3")
        self.sm, self.bucket = Stubber(self.sagemaker), Stubber(self.s3)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.sagemaker.meta.events.register("before-parameter-build.sagemaker.*", self._sent)
        self.slept: list[float] = []
        self.said: list[str] = []

    def _sent(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.sent.append((model.name, dict(params)))

    def clients(self) -> JobClients:
        times = iter(range(0, 10**6, 30))
        return JobClients(self.sagemaker, self.s3, sleep=self.slept.append, clock=lambda: float(next(times)))

    def job(self, name: str, statuses: tuple[str, ...], export: str | None = COMPLETED, reason: str = "",
            exports: int = 1) -> None:
        """The calls one level makes: create both, describe until an end, then (completed) read the export."""
        self.sm.add_response("create_ai_workload_config", {"AIWorkloadConfigArn": f"{ARN}ai-workload-config/{name}"})
        self.sm.add_response("create_ai_benchmark_job", {"AIBenchmarkJobArn": f"{ARN}ai-benchmark-job/{name}"})
        for status in statuses:
            reply = {"AIBenchmarkJobName": name, "AIBenchmarkJobArn": f"{ARN}ai-benchmark-job/{name}",
                     "AIBenchmarkJobStatus": status, "BenchmarkTarget": {"Endpoint": {"Identifier": "prod-chat"}},
                     "OutputConfig": {"S3OutputLocation": f"{OUTPUT}/{name}/"}, "AIWorkloadConfigIdentifier": name,
                     "RoleArn": ROLE, "CreationTime": datetime(2026, 11, 29, tzinfo=UTC)}
            if reason:
                reply["FailureReason"] = reason
            self.sm.add_response("describe_ai_benchmark_job", reply, {"AIBenchmarkJobName": name})
        if statuses[-1] != "Completed":
            return
        # Where AWS puts AIPerf's files under the job's prefix is not documented: some folder below it.
        keys = [f"bench/{name}/output/profile_export_aiperf.json"]
        keys += [f"bench/{name}/output/run{i}/profile_export.jsonl" for i in range(exports if export else 0)]
        self.bucket.add_response("list_objects_v2", {"Contents": [{"Key": k} for k in keys], "IsTruncated": False},
                                 {"Bucket": "team-results", "Prefix": f"bench/{name}/"})
        if export is not None and exports == 1:
            data = export.encode()
            self.bucket.add_response("get_object", {"Body": StreamingBody(io.BytesIO(data), len(data))},
                                     {"Bucket": "team-results", "Key": keys[-1]})

    def __enter__(self) -> Self:
        self.sm.activate()
        self.bucket.activate()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sm.deactivate()
        self.bucket.deactivate()


class Reached:
    """The endpoint a sagemaker target reached (only its name and component matter to the jobs)."""

    endpoint = "prod-chat"
    inference_component = "chat-ic"


def sweep(stubs: Stubs, tmp_path: Path, levels: tuple[int, ...] = (4,), max_wait_s: float = 4 * 3600,
          load: specs.Closed | specs.Open | None = None) -> AwsJobSweep:
    load = load or specs.Closed(levels, 40)
    rates = load.request_rate if isinstance(load, specs.Open) else levels
    chooser = Chooser(method="doubling", levels=rates, clock=REAL, emulated=False, instances=1)
    return AwsJobSweep(chooser, specs.AwsBenchmarkJob(ROLE, OUTPUT + "/", max_wait_s=max_wait_s), load,
                       WorkloadOptions(input_tokens="550", output_tokens="250"), Payload(550, 250), requests=40,
                       run_id="r1", out=tmp_path, clients=stubs.clients(), target=Reached(), say=stubs.said.append)


def run(shape: AwsJobSweep) -> list[Any]:
    levels: list[Any] = []
    shape.run(Reached(), None, lambda c: None, on_record=lambda r: None, on_progress=lambda p: None,  # type: ignore[arg-type]
              on_level=levels.append)
    return levels


def test_each_level_is_one_job_whose_requests_are_written_as_sent(tmp_path: Path) -> None:
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("InProgress", "InProgress", "Completed"))
        levels = run(sweep(stubs, tmp_path))
        stubs.sm.assert_no_pending_responses()
        stubs.bucket.assert_no_pending_responses()

    folder = tmp_path / "aws-benchmark-job" / "sagellm-r1-4"
    written = {op: json.loads((folder / f"{op}.request.json").read_text())
               for op in ("CreateAIWorkloadConfig", "CreateAIBenchmarkJob")}
    assert {op: params for op, params in stubs.sent if op.startswith("Create")} == written
    job = written["CreateAIBenchmarkJob"]
    assert job["BenchmarkTarget"] == {"Endpoint": {"Identifier": "prod-chat",
                                                   "InferenceComponents": [{"Identifier": "chat-ic"}]}}
    assert (job["AIWorkloadConfigIdentifier"], job["RoleArn"], job["OutputConfig"]) == \
        ("sagellm-r1-4", ROLE, {"S3OutputLocation": f"{OUTPUT}/sagellm-r1-4/"})
    spec = json.loads(written["CreateAIWorkloadConfig"]["AIWorkloadConfigs"]["WorkloadSpec"]["Inline"])
    assert spec["parameters"]["concurrency"] == 4 and spec["parameters"]["request_count"] == 40
    assert {"Key": "sagellm:bench-run", "Value": "r1"} in job["Tags"]
    [level] = levels
    assert (level.concurrency, len(level.records), level.stopped_reason) == (4, COMPLETED.count("\n"), None)
    assert (folder / "profile_export.jsonl").read_text() == COMPLETED
    assert [line.strip() for line in stubs.said[1:]] == ["job sagellm-r1-4: InProgress", "job sagellm-r1-4: Completed"]
    assert stubs.slept == [30.0, 30.0]


def test_a_failed_job_is_one_line_and_nothing_more_is_asked_of_it(tmp_path: Path) -> None:
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("InProgress", "Failed"), reason="ClientError: endpoint not found")
        with pytest.raises(TargetError) as failed:
            run(sweep(stubs, tmp_path))
        stubs.sm.assert_no_pending_responses()  # no stop of a job that has ended, no S3 read
    assert str(failed.value).startswith("SageMaker AI benchmark job sagellm-r1-4 at concurrency 4: Failed: "
                                        "ClientError: endpoint not found")
    assert "\n" not in str(failed.value)


def test_a_job_still_running_when_the_bench_is_interrupted_is_stopped(tmp_path: Path) -> None:
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("InProgress",))
        stubs.sm.add_response("stop_ai_benchmark_job", {"AIBenchmarkJobArn": f"{ARN}ai-benchmark-job/sagellm-r1-4"},
                              {"AIBenchmarkJobName": "sagellm-r1-4"})
        shape = sweep(stubs, tmp_path)

        def interrupted(seconds: float) -> None:
            raise KeyboardInterrupt

        shape.clients.sleep = interrupted
        with pytest.raises(KeyboardInterrupt):
            run(shape)
        stubs.sm.assert_no_pending_responses()
    assert stubs.said[-1].strip() == "job sagellm-r1-4: stop requested"


def test_a_long_job_says_it_is_alive_and_one_past_its_limit_is_stopped(tmp_path: Path) -> None:
    # The stand-in clock moves 30 s per reading: the job starts at 0 s, its status first seen at 30 s, and the check
    # at 330 s (5.5 min in) is 5 min after that: a heartbeat; the one at 360 s is past the 330 s limit.
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("InProgress",) * 12)
        stubs.sm.add_response("stop_ai_benchmark_job", {"AIBenchmarkJobArn": f"{ARN}ai-benchmark-job/sagellm-r1-4"},
                              {"AIBenchmarkJobName": "sagellm-r1-4"})
        with pytest.raises(TargetError, match=r"sagellm-r1-4 at concurrency 4: still InProgress after 330 s "
                                              r"\(AwsBenchmarkJob.max_wait_s\); stopped it$"):
            run(sweep(stubs, tmp_path, max_wait_s=330))
        stubs.sm.assert_no_pending_responses()
    assert [line.strip() for line in stubs.said[1:]] == [
        "job sagellm-r1-4: InProgress", "job sagellm-r1-4: still InProgress after 6 min",
        "job sagellm-r1-4: stop requested"]


def test_a_request_rate_level_is_one_job_at_that_rate(tmp_path: Path) -> None:
    with Stubs() as stubs:
        stubs.job("sagellm-r1-0-5-per-s", ("Completed",))
        [level] = run(sweep(stubs, tmp_path, load=specs.Open((0.5,), "poisson", 64, 40)))
    written = json.loads((tmp_path / "aws-benchmark-job" / "sagellm-r1-0-5-per-s" /
                          "CreateAIWorkloadConfig.request.json").read_text())
    parameters = json.loads(written["AIWorkloadConfigs"]["WorkloadSpec"]["Inline"])["parameters"]
    assert (parameters["request_rate"], parameters["arrival_pattern"], parameters["concurrency"]) == \
        (0.5, "poisson", 64)
    assert (level.request_rate, level.concurrency, level.load) == (0.5, None, "0.5/s")
    assert {r.request_rate for r in level.records} == {0.5}


def test_an_output_without_aiperfs_per_request_export_or_with_two_is_one_line_naming_what_is_there(
        tmp_path: Path) -> None:
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("Completed",), export=None)
        with pytest.raises(TargetError, match=r"^SageMaker AI benchmark job sagellm-r1-4: no profile_export.jsonl "
                                              r"under s3://team-results/bench/sagellm-r1-4/ \(found: bench/sagellm-r1-4/"
                                              r"output/profile_export_aiperf.json\)"):
            run(sweep(stubs, tmp_path))
    with Stubs() as stubs:
        stubs.job("sagellm-r1-4", ("Completed",), exports=2)
        with pytest.raises(TargetError, match=r"sagellm-r1-4: 2 files named profile_export.jsonl under"):
            run(sweep(stubs, tmp_path))


def test_the_local_target_and_a_missing_role_or_output_are_refused_before_anything_is_made() -> None:
    with pytest.raises(InputError, match="Bench.load_by: SageMaker AI's benchmark job loads a SageMaker endpoint"):
        specs.Bench(serving=specs.ServingSpec("max-throughput", "llama2-7b"), target=specs.Local(),
                    load_by=specs.AwsBenchmarkJob(ROLE, OUTPUT))
    with pytest.raises(InputError) as bad:
        specs.AwsBenchmarkJob("Bench", "bucket/bench")
    assert [m.split(":")[0] for m in bad.value.messages] == ["AwsBenchmarkJob.role_arn", "AwsBenchmarkJob.output_s3_uri"]


# ------------------------------------------------------------------------------------------ end to end

class ExistingEndpointStandIn:
    """An existing endpoint as the runner sees it: reached, never deleted (nothing else of it is called)."""

    kind, emulated, deploys, api = "sagemaker", False, False, TGI
    endpoint = "prod-chat"

    def deploy(self) -> Reached:
        return Reached()

    def teardown(self) -> Teardown:
        return Teardown(status="not-applicable", detail="existing endpoint prod-chat: nothing deleted")

    def may_be_left(self) -> list[str]:
        return []


@pytest.fixture
def stubbed_account(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubs]:
    """An account, an existing endpoint and its reached target, and the AI-job calls through the Stubber."""
    from sagellm.bench import planning, runner

    stubs = Stubs()

    class StubbedAccount(Account):
        def client(self, service: str, config: Any = None) -> Any:
            return {"sagemaker": stubs.sagemaker, "s3": stubs.s3}[service]

    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}
    account = StubbedAccount("111122223333", "us-east-1", env)
    deployed = DeployedEndpoint("prod-chat", "ml.g5.2xlarge", 1, {"HF_MODEL_ID": "meta-llama/Llama-2-7b-hf"},
                                {"sagellm:profile": "max-throughput", "sagellm:model": "meta-llama/Llama-2-7b-hf"},
                                "chat-ic")
    monkeypatch.setattr(planning, "resolve_account", lambda region, bootstrap: account)
    monkeypatch.setattr(planning, "read_endpoint", lambda name, component, account: deployed)
    monkeypatch.setattr(runner, "choose_target", lambda *a, **k: ExistingEndpointStandIn())
    monkeypatch.delenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", raising=False)
    monkeypatch.setattr(planning.uuid, "uuid4", lambda: SimpleNamespace(hex="r1"))  # the run id names the jobs
    with stubs:
        monkeypatch.setattr(aws_job, "JobClients", lambda sagemaker, s3: stubs.clients())  # no waiting between polls
        yield stubs


def readable(stubs: Stubs) -> None:
    """The check before deploying that the caller can list the output location."""
    stubs.bucket.add_response("list_objects_v2", {"IsTruncated": False},
                              {"Bucket": "team-results", "Prefix": "bench", "MaxKeys": 1})


def bench(out: Path, thresholds: Path | None) -> specs.Bench:
    """A bench of the existing endpoint at concurrency 1 and 2, each level one AWS benchmark job."""
    return specs.Bench(target=specs.Endpoint("prod-chat", "chat-ic"), load=specs.Closed((1, 2), 40),
                       sweep=specs.Sweep("doubling"), workload=WorkloadOptions(input_tokens="550", output_tokens="250"),
                       gate=specs.Gate(thresholds), output=specs.Output(out),
                       load_by=specs.AwsBenchmarkJob(ROLE, OUTPUT))


@pytest.mark.slow
def test_a_stubbed_run_writes_results_that_gate_and_report_take(stubbed_account: Stubs, tmp_path: Path) -> None:
    from sagellm.bench.aiperf_records import read_export
    from sagellm.bench.runner import run as run_bench
    from sagellm.results.summary import percentile

    stubs = stubbed_account
    readable(stubs)
    stubs.job("sagellm-r1-1", ("Completed",))
    stubs.job("sagellm-r1-2", ("InProgress", "Completed"))
    ttft_ms = [r.ttft_s * 1000 for r in read_export(COMPLETED.splitlines(), "x") if r.ttft_s is not None]
    median = percentile(ttft_ms, 50)
    assert median is not None
    thresholds = tmp_path / "gates.yaml"
    thresholds.write_text(f"rules:\n  - {{metric: ttft_ms.p50, where: 2, max: {median * 1.01}}}\n")

    outcome = run_bench(bench(tmp_path / "out", thresholds))

    assert outcome.exit_status == ExitStatus.OK, outcome.error
    results = load_results(tmp_path / "out" / "results.json")
    assert results.run.load_by == "aws-benchmark-job" and results.teardown.status == "not-applicable"
    assert [lv.load for lv in results.levels] == ["1", "2"]
    assert results.levels[1].ttft_ms.p50 == pytest.approx(median)
    assert results.gate is not None and results.gate.passed
    assert (tmp_path / "out" / "aws-benchmark-job" / "sagellm-r1-2" / "CreateAIBenchmarkJob.request.json").exists()

    results_json = str(tmp_path / "out" / "results.json")
    assert sagellm("gate", results_json, "--thresholds", str(thresholds)).returncode == 0
    thresholds.write_text(f"rules:\n  - {{metric: ttft_ms.p50, where: 2, max: {median * 0.99}}}\n")
    gated = sagellm("gate", results_json, "--thresholds", str(thresholds))
    assert gated.returncode == 1, gated.stderr
    reported = sagellm("report", str(tmp_path / "out"))
    assert reported.returncode == 0, reported.stderr
    assert "sent by SageMaker AI's benchmark job" in (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "results.csv").exists()


@pytest.mark.slow
def test_a_failed_job_fails_the_run_in_one_line_keeping_the_levels_before_it(stubbed_account: Stubs,
                                                                            tmp_path: Path) -> None:
    from sagellm.bench.runner import run as run_bench

    stubs = stubbed_account
    readable(stubs)
    stubs.job("sagellm-r1-1", ("Completed",))
    stubs.job("sagellm-r1-2", ("InProgress", "Failed"), reason="endpoint throttled the job")
    thresholds = tmp_path / "gates.yaml"
    thresholds.write_text("rules:\n  - {metric: error_rate, where: 1, max: 0}\n")

    outcome = run_bench(bench(tmp_path / "out", thresholds))

    assert outcome.exit_status == ExitStatus.TARGET_FAILED
    assert outcome.error == ("SageMaker AI benchmark job sagellm-r1-2 at concurrency 2: Failed: endpoint throttled "
                             "the job (its logs: DescribeAIBenchmarkJob's OutputConfig.CloudWatchLogs)")
    results = load_results(tmp_path / "out" / "results.json")
    assert [lv.load for lv in results.levels] == ["1"]
    assert results.failure is not None and results.failure.message == outcome.error
    assert results.teardown.status == "not-applicable"  # teardown ran (an existing endpoint: nothing to delete)


def test_what_aiperf_cannot_run_is_refused_before_anything_is_reached(stubbed_account: Stubs, tmp_path: Path) -> None:
    from sagellm.bench.runner import run as run_bench

    uniform = replace(bench(tmp_path / "out", None), workload=WorkloadOptions(input_tokens="256-1024"))
    with pytest.raises(InputError, match="AIPerf draws lengths from a normal distribution"):
        run_bench(uniform)
    ramp = replace(bench(tmp_path / "out", None), load=specs.Ramp((1.0, 2.0)))
    with pytest.raises(InputError, match="Bench.load_by: a SageMaker AI benchmark job runs one level at a time"):
        run_bench(ramp)
    assert not (tmp_path / "out" / "aws-benchmark-job").exists()  # nothing written, no job created


@pytest.mark.slow
def test_the_cli_says_what_the_aws_benchmark_job_lacks_in_one_line_each(tmp_path: Path) -> None:
    ran = sagellm("bench", "--profile", "max-throughput", "--model", "llama2-7b", "--load-by", "aws-benchmark-job",
                  "--concurrency", "1", "--out", str(tmp_path / "out"))
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        ("sagellm: error: --aws-role-arn: required with --load-by aws-benchmark-job (the IAM role SageMaker AI runs "
         "the job as)"),
        ("sagellm: error: --aws-output-s3-uri: required with --load-by aws-benchmark-job (the S3 prefix the jobs "
         "write results to)")]
    ran = sagellm("bench", "--profile", "max-throughput", "--model", "llama2-7b", "--load-by", "aws-benchmark-job",
                  "--aws-role-arn", ROLE, "--aws-output-s3-uri", OUTPUT, "--concurrency", "1",
                  "--out", str(tmp_path / "out"))
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        ("sagellm: error: --load-by: SageMaker AI's benchmark job loads a SageMaker endpoint; the local target has "
         "none SageMaker AI can reach (use --target sagemaker, deploying or with --endpoint-name)")]
    assert not (tmp_path / "out").exists()  # nothing made


def test_an_output_location_the_caller_cannot_read_is_refused_before_anything_is_reached(
        stubbed_account: Stubs, tmp_path: Path) -> None:
    from sagellm.bench.runner import run as run_bench

    stubbed_account.bucket.add_client_error("list_objects_v2", "AccessDenied", "Access Denied", 403)
    with pytest.raises(InputError) as refused:
        run_bench(bench(tmp_path / "out", None))
    assert refused.value.messages == [
        ("AwsBenchmarkJob.output_s3_uri: cannot list s3://team-results/bench with your credentials (AccessDenied: "
         "Access Denied); sagellm reads the jobs' results there: fix the URI or the permission (s3:ListBucket, "
         "s3:GetObject); nothing was deployed")]
    assert not (tmp_path / "out").exists()

"""The load sent by SageMaker AI's benchmark job (`--load-by aws-benchmark-job`): each level of the sweep is one
AIPerf run that AWS runs against the endpoint the bench deployed (or named), read back as the level's records.

Per level, in order: CreateAIWorkloadConfig (the level's AIPerf spec, bench/aiperf.py), CreateAIBenchmarkJob
(against the endpoint and its inference component), DescribeAIBenchmarkJob every `poll_s` until the job ends (a line
when its status changes, a heartbeat every few minutes), then AIPerf's per-request export read from the job's S3
output (bench/aiperf_records.py). Each request is also written to the output folder as
`aws-benchmark-job/<job>/<OperationName>.request.json`, with the job's last description and the export beside it.
A job that fails or is stopped fails the run in one line (the levels before it are kept; teardown runs as always);
a job still running when the bench is interrupted or past `max_wait_s` is stopped first.

Where in the output location AWS puts AIPerf's files is not documented: the export is found by its name,
`profile_export.jsonl`, under the job's S3 output location (docs/aws-ai-jobs.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sagellm.aws import ai_jobs
from sagellm.bench.aiperf import spec_of
from sagellm.bench.aiperf_records import EXPORT, read_export
from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.level import LevelProgress, LevelResult, StopRule, error_stop_reason
from sagellm.bench.specs import AwsBenchmarkJob, Closed, Open
from sagellm.bench.sweep.choosers import Chooser
from sagellm.bench.sweep.shapes import LoadShape, Requests, RunAsync
from sagellm.errors import TargetError
from sagellm.planner import Payload
from sagellm.results import picks
from sagellm.results.records import RequestRecord
from sagellm.results.schema import load_name
from sagellm.results.summary import errors_by_kind, tokens_in_window

FOLDER = "aws-benchmark-job"  # in the run's output folder: one folder per job
HEARTBEAT_S = 300.0  # a line while a job's status stays the same, so a CI log shows the bench is alive
ENDED = ("Completed", "Failed", "Stopped")  # AIBenchmarkJobStatus values after which the status no longer changes


@dataclass
class JobClients:
    """The SageMaker and S3 clients the jobs go through (the run's account and region)."""

    sagemaker: Any
    s3: Any
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


class AwsJobSweep(LoadShape):
    """The sweep's levels, each run by one SageMaker AI benchmark job instead of the bench's own client."""

    workers = None  # AWS's AIPerf runs the load: no worker pool here

    def __init__(self, chooser: Chooser, job: AwsBenchmarkJob, load: Closed | Open, options: WorkloadOptions,
                 payload: Payload, *, requests: Requests, run_id: str, out: Path, clients: JobClients,
                 target: object, say: Callable[[str], None]):
        super().__init__(chooser, requests=requests, duration_s=load.duration_per_level_s, warmup=load.warmup)
        self.job, self.load, self.options, self.payload = job, load, options, payload
        self.run_id, self.out, self.clients, self.say = run_id, out, clients, say
        self.target = target  # its endpoint is known once it is deployed (or reached)

    def describe(self) -> str:
        return f"{self.chooser.describe()}, each level one SageMaker AI benchmark job (AIPerf run by AWS)"

    def run(self, transport: Transport, workload: Workload, run_async: RunAsync, *,
            on_record: Callable[[RequestRecord], None], on_progress: Callable[[LevelProgress], None],
            on_level: Callable[[LevelResult], None]) -> None:
        """Run one job per level the chooser asks for; each level's records go to `on_record`, then the level."""
        endpoint = str(getattr(self.target, "endpoint", None) or "")
        component = getattr(transport, "inference_component", None)
        results: list[LevelResult] = []
        while (level := self.chooser(results)) is not None:
            result = self.run_level(level, endpoint, component, offset_s=results[-1].ended_s if results else 0.0)
            for record in result.records:
                on_record(record)
            results.append(result)
            on_level(result)

    def one_level(self, level: float) -> Closed | Open:
        """The load spec of one level (what the level's AIPerf spec is made from)."""
        if isinstance(self.load, Closed):
            return replace(self.load, concurrency=(int(level),))
        return replace(self.load, request_rate=(level,))

    def run_level(self, level: float, endpoint: str, component: str | None, offset_s: float) -> LevelResult:
        """Create the level's workload config and job, wait for the job, read its export as the level."""
        closed = isinstance(self.load, Closed)
        load = load_name(int(level), None) if closed else load_name(None, level)
        name = ai_jobs.job_name(f"sagellm-{self.run_id}-{load.replace('/s', '-per-s')}")
        folder = self.out / FOLDER / name
        tags = {"sagellm:bench-run": self.run_id}
        config = ai_jobs.workload_config_request(name, spec_of(self.options, self.one_level(level), self.payload),
                                                 tag_values=tags)
        # Each job its own prefix: its export is then the one under it, whatever layout AWS writes there.
        job = ai_jobs.benchmark_job_request(name, endpoint=endpoint, workload_config=name,
                                            output_s3_uri=f"{self.job.output_s3_uri.rstrip('/')}/{name}/",
                                            role_arn=self.job.role_arn,
                                            inference_components=(component,) if component else (), tag_values=tags)
        for operation, params in (("CreateAIWorkloadConfig", config), ("CreateAIBenchmarkJob", job)):
            ai_jobs.write_request(folder, operation, params)
        at = f"concurrency {load}" if closed else f"request rate {load}"
        self.say(f"{at}: SageMaker AI benchmark job {name} against {endpoint}"
                 + (f" (component {component})" if component else ""))
        ai_jobs.submit("CreateAIWorkloadConfig", config, self.clients.sagemaker)
        ai_jobs.submit("CreateAIBenchmarkJob", job, self.clients.sagemaker)
        described = self._wait(name, at)
        (folder / "DescribeAIBenchmarkJob.response.json").write_text(json.dumps(described, indent=2, default=str)
                                                                     + "\n", encoding="utf-8")
        where, text = self._export(name, described["OutputConfig"]["S3OutputLocation"])
        (folder / EXPORT).write_text(text, encoding="utf-8")
        records = read_export(text.splitlines(), where)
        return level_of(records, concurrency=int(level) if closed else None,
                        request_rate=None if closed else level, offset_s=offset_s, at=at)

    def _describe(self, name: str) -> dict[str, Any]:
        try:
            return dict(self.clients.sagemaker.describe_ai_benchmark_job(AIBenchmarkJobName=name))
        except Exception as exc:  # noqa: BLE001 - botocore's errors, said in one line
            raise TargetError(f"DescribeAIBenchmarkJob {name}: {exc}") from None

    def _wait(self, name: str, at: str) -> dict[str, Any]:
        """The job's description once it ended; a job that failed or was stopped is a TargetError line; one still
        running when the wait is cut short (an interrupt, `max_wait_s`) is stopped first."""
        clients = self.clients
        started = said = clients.clock()
        status = None
        try:
            while True:
                described = self._describe(name)
                now = clients.clock()
                if described["AIBenchmarkJobStatus"] != status:
                    status, said = described["AIBenchmarkJobStatus"], now
                    self.say(f"  job {name}: {status}")
                elif now - said >= HEARTBEAT_S:
                    said = now
                    self.say(f"  job {name}: still {status} after {(now - started) / 60:.0f} min")
                if status == "Completed":
                    return described
                if status in ("Failed", "Stopped"):
                    reason = described.get("FailureReason") or "no reason given"
                    raise TargetError(f"SageMaker AI benchmark job {name} at {at}: {status}: {reason} (its logs: "
                                      "DescribeAIBenchmarkJob's OutputConfig.CloudWatchLogs)")
                if now - started > self.job.max_wait_s:
                    raise TargetError(f"SageMaker AI benchmark job {name} at {at}: still {status} after "
                                      f"{self.job.max_wait_s:g} s (AwsBenchmarkJob.max_wait_s); stopped it")
                clients.sleep(self.job.poll_s)
        except BaseException:
            if status not in ENDED:
                self._stop(name)
            raise

    def _stop(self, name: str) -> None:
        """Stop a job the bench no longer waits for (it would go on loading the endpoint, and cost)."""
        try:
            self.clients.sagemaker.stop_ai_benchmark_job(AIBenchmarkJobName=name)
            self.say(f"  job {name}: stop requested")
        except Exception as exc:  # noqa: BLE001 - say it and go on to teardown
            self.say(f"  job {name}: could not be stopped ({exc}); stop it with `aws sagemaker "
                     f"stop-ai-benchmark-job --ai-benchmark-job-name {name}`")

    def _export(self, name: str, uri: str) -> tuple[str, str]:
        """AIPerf's per-request export of job `name` under its S3 output location: (its URI, its text)."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        keys: list[str] = []
        token: dict[str, str] = {}
        try:
            while True:
                page = self.clients.s3.list_objects_v2(Bucket=bucket, Prefix=prefix, **token)
                keys += [item["Key"] for item in page.get("Contents", [])]
                if not page.get("IsTruncated"):
                    break
                token = {"ContinuationToken": page["NextContinuationToken"]}
            exports = [k for k in keys if k.rsplit("/", 1)[-1] == EXPORT]
            if len(exports) != 1:
                found = ", ".join(keys[:5]) + (f", … ({len(keys)} in all)" if len(keys) > 5 else "") or "nothing"
                what = f"{len(exports)} files named {EXPORT}" if exports else f"no {EXPORT}"
                raise TargetError(f"SageMaker AI benchmark job {name}: {what} under {uri} (found: {found}); sagellm "
                                  "reads AIPerf's per-request export, by name (AWS does not document the layout)")
            body = self.clients.s3.get_object(Bucket=bucket, Key=exports[0])["Body"].read()
        except TargetError:
            raise
        except Exception as exc:  # noqa: BLE001 - botocore's errors, said in one line
            raise TargetError(f"reading SageMaker AI benchmark job {name}'s results under {uri}: {exc}") from None
        return f"s3://{bucket}/{exports[0]}", body.decode("utf-8")


def level_of(records: list[RequestRecord], *, concurrency: int | None, request_rate: float | None, offset_s: float,
             at: str) -> LevelResult:
    """AIPerf's records of one level as the sweep's level: placed after `offset_s`, measured over AIPerf's own
    window (its first measured request's start to its last one's end: the ramp is not excluded, as AIPerf does)."""
    placed = [replace(r, concurrency=concurrency, request_rate=request_rate, start_s=r.start_s + offset_s, request=i)
              for i, r in enumerate(records)]
    measured = [r for r in placed if not r.warmup] or placed
    start, end = min(r.start_s for r in measured), max(r.end_s for r in measured)
    errors = errors_by_kind(measured)
    return LevelResult(
        concurrency=concurrency, request_rate=request_rate, records=placed,
        started_s=min(r.start_s for r in placed), ended_s=max(r.end_s for r in placed), window_start_s=start,
        window_end_s=end, ramp_excluded=False, window_output_tokens=tokens_in_window(measured, start, end),
        stopped_reason=error_stop_reason(errors, len(measured), at, StopRule(max_error_rate=picks.MAX_ERROR_RATE)),
        errors_by_kind=errors)

"""A bench as typed specs: where it runs, what is served, how hard it is loaded, which levels it measures,
what it gates on and where it writes.

Each spec checks its own fields when it is built and raises one InputError listing every problem, each naming
the field as `Spec.field: what` (`sagellm bench` shows its flag instead), and each target holds only its own
options, so a bench that mixes them cannot be expressed. `sagellm bench` builds these specs from its flags; a
notebook builds them directly; both call `sagellm.bench.run`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from sagellm.bench.client.trace import TraceOptions, load_trace
from sagellm.bench.client.transports import APIS
from sagellm.bench.client.workload import WorkloadOptions
from sagellm.bench.load.closed_loop import SPAWN_RATE
from sagellm.bench.load.open_loop import ARRIVALS, Arrivals
from sagellm.bench.load.saturation import SAGEMAKER_INVOCATION_TIMEOUT_S
from sagellm.bench.load.workers import worker_problems
from sagellm.bench.sweep.choosers import Sweep
from sagellm.bench.sweep.run import MAX_IN_FLIGHT
from sagellm.catalog.s3_weights import split_s3_prefix
from sagellm.clock import Clock
from sagellm.engines import engine_option
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.profiles.tokens import token_errors
from sagellm.results.report import writable_folder_errors
from sagellm.results.schema import RequestSlo
from sagellm.results.tracking import mlflow_problems

__all__ = ["AwsBenchmarkJob", "Bench", "Closed", "Endpoint", "Gate", "Http", "LoadSpec", "Local", "Open", "Output",
           "Ramp", "RampIfAutoscaled", "SageMaker", "ServingSpec", "Sweep", "TargetSpec", "TraceOptions", "Workers",
           "WorkloadOptions", "trace_level"]

DEFAULT_PAYLOAD = Payload(256, 256)  # the standard profiles' payload, for an http run without a profile
TargetKind = Literal["local", "sagemaker", "http"]  # what results.json's run.target says


def _raise(errors: list[str]) -> None:
    if errors:
        raise InputError(errors)


def _api_problems(spec: str, api: str, *, http: bool) -> list[str]:
    if api not in (*APIS, "auto"):
        return [f"{spec}.api: {api!r} must be tgi, openai, chat or auto"]
    if api == "openai" and not http:
        return [f"{spec}.api: 'openai' is an http server's API (SageMaker endpoints take tgi or chat)"]
    return []


# ------------------------------------------------------------------------------------------ targets

@dataclass(frozen=True)
class Local:
    """The local target: the profile deployed to an embedded AWS (moto) whose endpoint is the emulator."""

    time_scale: float = 1.0  # run simulated time this much faster (0.1 = 10×); results are in simulated time
    instance_startup_s: float | None = None  # autoscaling: simulated seconds from a scale-out to InService
    api: str = "auto"  # tgi | chat | auto (the engine's: generate for TGI/LMI, completions for vLLM, chat for SGLang)
    kind: ClassVar[TargetKind] = "local"

    @property
    def clock(self) -> Clock:
        """The emulator's clock."""
        return Clock(self.time_scale)

    def __post_init__(self) -> None:
        errors = _api_problems("Local", self.api, http=False)
        if problem := Clock.scale_problem(self.time_scale, "Local.time_scale"):
            errors.append(problem)
        if self.instance_startup_s is not None and not self.instance_startup_s > 0:
            errors.append(f"Local.instance_startup_s: {self.instance_startup_s:g} must be > 0 seconds")
        _raise(errors)


@dataclass(frozen=True)
class SageMaker:
    """The sagemaker target: the profile deployed in your AWS account (its own stack), deleted afterwards."""

    keep: bool = False  # leave the stack up
    api: str = "auto"  # tgi | chat | auto (the engine's: generate for TGI/LMI, completions for vLLM, chat for SGLang)
    kind: ClassVar[TargetKind] = "sagemaker"

    def __post_init__(self) -> None:
        _raise(_api_problems("SageMaker", self.api, http=False))


@dataclass(frozen=True)
class Endpoint:
    """An existing SageMaker endpoint: benched as it runs; nothing is deployed or deleted."""

    name: str
    inference_component: str | None = None  # the component to invoke (default: its only one)
    api: str = "auto"  # tgi | chat | auto (the engine's: generate for TGI/LMI, completions for vLLM, chat for SGLang)
    kind: ClassVar[TargetKind] = "sagemaker"

    def __post_init__(self) -> None:
        _raise(_api_problems("Endpoint", self.api, http=False))


@dataclass(frozen=True)
class Http:
    """An existing TGI or OpenAI-compatible server at a URL."""

    url: str
    api: str = "auto"  # tgi | openai | chat | auto (openai when the URL has /v1, else tgi)
    served_model: str | None = None  # the OpenAI `model` field (default: the one /v1/models lists)
    kind: ClassVar[TargetKind] = "http"

    def __post_init__(self) -> None:
        errors = [] if self.url else ["Http.url: required (e.g. http://localhost:8080 for TGI)"]
        _raise(errors + _api_problems("Http", self.api, http=True))


# The spec of where a bench runs; `Target` is the live one it becomes (bench/targets/target.py).
TargetSpec = Local | SageMaker | Endpoint | Http


# ------------------------------------------------------------------------------------------ what is served

@dataclass(frozen=True)
class ServingSpec:  # `Serving` is a profile's container settings (profiles/schema.py)
    """What is served: a profile and a catalog model on an instance type. Optional for an http target (then
    the run is not predicted) and an existing endpoint (read from its tags)."""

    profile: str | None = None
    model: str | None = None  # a catalog model: labels the run and predicts it
    instance: str | None = None  # default: the profile's
    payload: Payload | None = None  # the lengths the plan is sized for; the workload's own lengths win
    # None: with a sagemaker target, the AWS configuration's region (AWS_REGION, AWS_DEFAULT_REGION, the profile's),
    # else us-east-1; the bench resolves it once and every call of the run uses it.
    region: str | None = None
    profiles_dir: Path | None = None
    hf_token_secret: str | None = None  # Secrets Manager name or ARN (overrides the profile's)
    engine: str | None = None  # a container kind in place of the profile's (sagellm.engines.ENGINES)
    model_s3_uri: str | None = None  # the model's weights staged in S3 (no token, no Hub), else the profile's source

    def __post_init__(self) -> None:
        engine_option(self.engine, "ServingSpec.engine")
        if self.model_s3_uri is not None:
            split_s3_prefix(self.model_s3_uri, "ServingSpec.model_s3_uri")
        if self.hf_token_secret is not None:
            _raise(token_errors({"hf_token_secret": self.hf_token_secret}, lambda loc: "ServingSpec.hf_token_secret"))


# ------------------------------------------------------------------------------------------ load

def _level_problems(load: Closed | Open) -> list[str]:
    """What is wrong with how each level of `load` is measured."""
    spec, requests, duration_s = type(load).__name__, load.requests_per_level, load.duration_per_level_s
    out = []
    if requests is not None and duration_s is not None:
        out.append(f"{spec}.requests_per_level/{spec}.duration_per_level_s: give one, not both")
    if requests is not None and requests < 1:
        out.append(f"{spec}.requests_per_level: {requests} must be at least 1")
    out += _seconds_problems(f"{spec}.duration_per_level_s", duration_s)
    if load.warmup < 0:
        out.append(f"{spec}.warmup: {load.warmup} must be 0 or more")
    if load.repeats < 1:
        out.append(f"{spec}.repeats: must be at least 1")
    return out


def _seconds_problems(where: str, seconds: float | None) -> list[str]:
    if seconds is not None and not 0 < seconds < math.inf:
        return [f"{where}: {seconds:g} must be a positive number of seconds"]
    return []


def _rate_problems(load: Open | Ramp) -> list[str]:
    spec, rates = type(load).__name__, load.request_rate
    out = []
    if any(rate <= 0 for rate in rates):
        out.append(f"{spec}.request_rate: {', '.join(f'{r:g}' for r in rates)}: each must be > 0 requests/s")
    if load.arrivals not in ARRIVALS:
        out.append(f"{spec}.arrivals: {load.arrivals!r} must be constant or poisson")
    if load.max_in_flight < 1:
        out.append(f"{spec}.max_in_flight: must be at least 1")
    return out


@dataclass(frozen=True)
class Closed:
    """A closed loop: each level keeps `concurrency` requests in flight."""

    concurrency: tuple[int, ...] = ()  # the levels, in order; empty: the sweep's (1, 2, 4, … 512, or adaptive)
    requests_per_level: int | None = None  # None: 3 × concurrency (at least 8), unless a duration is given
    duration_per_level_s: float | None = None  # simulated seconds per level instead of a request count
    warmup: int = 1  # warm-up requests per worker, excluded from the statistics
    repeats: int = 1
    # Workers started a second at each level's start (load.closed_loop: a closed loop started at once stays in
    # phase); None: every worker at once.
    spawn_rate: float | None = SPAWN_RATE

    def __post_init__(self) -> None:
        spawn = [] if self.spawn_rate is None or 0 < self.spawn_rate < math.inf else [
            (f"Closed.spawn_rate: {self.spawn_rate:g} must be a number of workers started a second, above 0 (or off: "
             "every worker at once)")]
        _raise(_level_problems(self) + spawn)


@dataclass(frozen=True)
class Open:
    """An open loop: requests arrive at `request_rate` per second, whether earlier ones finished or not."""

    request_rate: tuple[float, ...]  # the levels, requests/s
    arrivals: Arrivals = "constant"  # constant | poisson
    max_in_flight: int = MAX_IN_FLIGHT  # later arrivals wait and are recorded late
    requests_per_level: int | None = None  # None: 60 s of arrivals (at least 8), unless a duration is given
    duration_per_level_s: float | None = None
    warmup: int = 1  # warm-up requests per level
    repeats: int = 1
    # A level stops early, over-saturated, when a first token waits longer (simulated seconds; default SageMaker's
    # 60 s invocation timeout) or its requests in flight keep growing (load.saturation).
    max_ttft_s: float = SAGEMAKER_INVOCATION_TIMEOUT_S

    def __post_init__(self) -> None:
        _raise(_rate_problems(self) + _level_problems(self) + _seconds_problems("Open.max_ttft_s", self.max_ttft_s))


@dataclass(frozen=True)
class Ramp:
    """Open-loop load rising in steps over time, recording instances and latency per interval (once)."""

    request_rate: tuple[float, ...] = ()  # the steps, requests/s; empty: from the planner's prediction
    arrivals: Arrivals = "constant"
    max_in_flight: int = MAX_IN_FLIGHT
    step_s: float | None = None  # simulated seconds per step (None: bench/ramp.py's default)

    def __post_init__(self) -> None:
        _raise(_rate_problems(self) + _seconds_problems("Ramp.step_s", self.step_s))


@dataclass(frozen=True)
class RampIfAutoscaled:
    """A ramp when the plan has autoscaling (its steps: the rates given, or predicted), else `otherwise`."""

    otherwise: Closed | Open = Closed()


def ramp_of(given: Closed | Open) -> Ramp:
    """Levels of load run as a ramp (asked for, or a RampIfAutoscaled whose plan autoscales): the given rates
    are its steps (none: predicted), each lasting the given duration per level. A ramp runs once, so repeats
    are refused."""
    if given.repeats > 1:
        raise InputError(f"{type(given).__name__}.repeats: a ramp runs once; only levels without a ramp repeat")
    if isinstance(given, Open):
        return Ramp(given.request_rate, given.arrivals, given.max_in_flight, given.duration_per_level_s)
    return Ramp(step_s=given.duration_per_level_s)


def trace_level(trace: TraceOptions, *, speeds: tuple[float, ...] = (), warmup: int = 0,
                max_in_flight: int = MAX_IN_FLIGHT, repeats: int = 1,
                max_ttft_s: float = SAGEMAKER_INVOCATION_TIMEOUT_S) -> Open:
    """The open-loop levels that replay a trace (with `WorkloadOptions.trace` the same): one per speed (default:
    the trace's own), each named by its mean rate; the first `warmup` requests warm up, every other is measured."""
    replay = load_trace(trace)
    rows = len(replay.rows)
    if warmup >= rows:
        raise InputError(f"Open.warmup: {warmup} warm-up requests leave none of the trace's {rows} to measure")
    rates = tuple(replay.rate * speed / trace.speed for speed in speeds or (trace.speed,))
    return Open(rates, max_in_flight=max_in_flight, requests_per_level=rows - warmup,
                warmup=warmup, repeats=repeats, max_ttft_s=max_ttft_s)


# How hard a bench loads; `recommend.slo.Load` is the one load a recommendation is made for.
LoadSpec = Closed | Open | Ramp | RampIfAutoscaled


# ------------------------------------------------------------------------------------------ gate, output, workers

@dataclass(frozen=True)
class Gate:
    """What the run is judged by (the files are read before anything is deployed)."""

    thresholds: Path | None = None  # YAML rules
    baseline: Path | None = None  # results.json of an earlier run to compare against
    allow_incomparable: bool = False  # compare with a baseline of another model, instance, container or workload
    slo_ms_per_token: float | None = None  # also report the highest throughput with p50 ms/token under this
    # Per-request SLOs each level's attainment and goodput are taken against (else the thresholds file's slo:).
    slo: RequestSlo | None = None


@dataclass(frozen=True)
class Output:
    """Where the results go and how the run is labelled."""

    out: Path = Path("sagellm-results")
    command: str = ""  # the command line that asked for the run, recorded in results.json
    mlflow: str | None = None  # an MLflow tracking URI: the run is logged there once its results are written

    def __post_init__(self) -> None:
        _raise(writable_folder_errors(self.out, "Output.out") + mlflow_problems(self.mlflow, "Output.mlflow"))


@dataclass(frozen=True)
class Workers:
    """Who generates the load: worker processes (or Ray actors) sharing each level."""

    count: int | None = 1  # None: auto (one per 256 streams, at most one per core)
    ray: str | None = None  # a Ray cluster's address, or auto (a local one)

    def __post_init__(self) -> None:
        _raise(worker_problems(self.count, self.ray))


@dataclass(frozen=True)
class AwsBenchmarkJob:
    """Who sends the load: SageMaker AI's benchmark job (AIPerf, run by AWS) in place of the bench's own client, one
    job per level, against the endpoint the sagemaker target deployed or named (bench/aws_job.py)."""

    role_arn: str  # the IAM role SageMaker AI runs each job as
    output_s3_uri: str  # where each job writes its results (sagellm reads AIPerf's per-request export back)
    poll_s: float = 30.0  # how often the job's status is asked for
    max_wait_s: float = 4 * 3600.0  # a job still running after this is stopped and the run fails

    def __post_init__(self) -> None:
        from sagellm.aws.ai_jobs import request_problems

        # The model's own patterns for the two members, checked through a request that carries them.
        probe = {"AIBenchmarkJobName": "probe", "BenchmarkTarget": {"Endpoint": {"Identifier": "probe"}},
                 "AIWorkloadConfigIdentifier": "probe", "RoleArn": self.role_arn,
                 "OutputConfig": {"S3OutputLocation": self.output_s3_uri}}
        problems = " ".join(request_problems("CreateAIBenchmarkJob", probe))
        errors = [(f"AwsBenchmarkJob.role_arn: {self.role_arn!r} is not an IAM role ARN (arn:aws:iam::<account>:role/"
                   "<name>)")] if "RoleArn" in problems else []
        if not self.output_s3_uri.startswith("s3://") or "S3OutputLocation" in problems:
            errors.append(f"AwsBenchmarkJob.output_s3_uri: {self.output_s3_uri!r} must be an S3 URI (s3://bucket/"
                          "prefix/)")
        errors += [f"AwsBenchmarkJob.{name}: {value:g} must be a positive number of seconds"
                   for name, value in (("poll_s", self.poll_s), ("max_wait_s", self.max_wait_s))
                   if not 0 < value < math.inf]
        _raise(errors)


def load_by_problems(load_by: AwsBenchmarkJob | None, target: TargetSpec) -> list[str]:
    """What an AWS benchmark job needs of the target: a SageMaker endpoint (moto, the local AWS, has no AI jobs)."""
    if load_by is None or isinstance(target, SageMaker | Endpoint):
        return []
    return [(f"Bench.load_by: SageMaker AI's benchmark job loads a SageMaker endpoint; the {target.kind} target has "
             "none SageMaker AI can reach (use --target sagemaker, deploying or with --endpoint-name)")]


def pairing_problems(serving: ServingSpec, target: TargetSpec) -> list[str]:
    """What the target needs of the serving spec: a deploying target deploys a profile and a model."""
    if isinstance(target, Http):
        if bool(serving.profile) != bool(serving.model):
            return [("ServingSpec.profile/ServingSpec.model: give both to label and predict the run, or neither "
                     "(no prediction)")]
        return []
    if isinstance(target, Endpoint) and serving.model_s3_uri is not None:
        return [("ServingSpec.model_s3_uri: an existing endpoint serves the weights it was deployed with; leave it "
                 "out (it applies to what a bench deploys)")]
    if not isinstance(target, Endpoint) and not (serving.profile and serving.model):
        return [("ServingSpec.profile/ServingSpec.model: required: the profile and the catalog model to deploy (or "
                 "name a deployed endpoint to bench: Endpoint.name)")]
    return []


@dataclass(frozen=True)
class Bench:
    """One bench: where it runs, what is served and sent, how hard, which levels, what it gates on, where it
    writes. Every part checks itself when built; the bench checks that the target and what is served fit."""

    serving: ServingSpec = field(default_factory=ServingSpec)
    target: TargetSpec = field(default_factory=Local)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    load: LoadSpec = field(default_factory=RampIfAutoscaled)
    sweep: Sweep = field(default_factory=Sweep)
    gate: Gate = field(default_factory=Gate)
    output: Output = field(default_factory=Output)
    workers: Workers = field(default_factory=Workers)
    load_by: AwsBenchmarkJob | None = None  # None: the bench's own client sends the load

    def __post_init__(self) -> None:
        _raise(pairing_problems(self.serving, self.target) + load_by_problems(self.load_by, self.target)
               + conversation_problems(self))


def conversation_problems(bench: Bench) -> list[str]:
    """What conversations (WorkloadOptions.turns) cannot run with: a ramp, or a level split across workers."""
    if bench.workload.turns is None:
        return []
    out = []
    if isinstance(bench.load, Ramp):
        out.append("WorkloadOptions.turns: not with a ramp: conversations run as levels of concurrency or request rate")
    if bench.workers.count != 1 or bench.workers.ray is not None:
        out.append("WorkloadOptions.turns: conversations run in one process (each holds its history); leave "
                   "Workers.count and Workers.ray out")
    return out

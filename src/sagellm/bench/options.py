"""The flags of `sagellm bench` as given, and how they map onto the bench's specs (bench/specs.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sagellm.bench.client.workload import WorkloadOptions
from sagellm.bench.load.open_loop import Arrivals
from sagellm.bench.specs import (
    Bench,
    Closed,
    Endpoint,
    Gate,
    Http,
    LoadSpec,
    Local,
    Open,
    Output,
    Ramp,
    RampIfAutoscaled,
    SageMaker,
    ServingSpec,
    Sweep,
    TargetSpec,
    Workers,
    level_problems,
    pairing_problems,
)
from sagellm.bench.sweep.run import MAX_IN_FLIGHT
from sagellm.errors import ExitStatus, InputError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload
from sagellm.results.schema import Results


@dataclass(frozen=True)
class BenchOptions:
    """The flags of `sagellm bench`, one field each (`to_bench` turns them into the specs it runs)."""

    profile: str | None = None  # optional for http (no prediction) and --endpoint-name (read from its tags)
    model: str | None = None  # a catalog model: labels the run and predicts it
    instance: str | None = None
    target: str = "local"  # local | sagemaker | http
    endpoint_name: str | None = None  # sagemaker target: bench this existing endpoint, deploy nothing
    inference_component: str | None = None  # … and this component of it
    url: str | None = None
    api: str = "auto"  # tgi | openai (http target) | chat | auto (http: openai when the URL has /v1; else tgi)
    served_model: str | None = None  # http target: the OpenAI `model` field (default: from /v1/models)
    payload: Payload | None = None  # fixed lengths; the workload's own lengths win where given
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY  # closed-loop levels ...
    request_rate: tuple[float, ...] = ()  # ... or open-loop levels, requests/s (then concurrency is ())
    arrivals: str | None = None  # open loop: constant (default) | poisson
    max_in_flight: int | None = None  # open loop: default 1024
    repeats: int = 1
    requests_per_level: int | None = None  # None: REQUESTS_PER_WORKER × concurrency (unless a duration)
    duration_per_level_s: float | None = None
    warmup: int = 1
    thresholds: Path | None = None
    baseline: Path | None = None
    allow_incomparable: bool = False  # compare with a baseline of another model, instance, container or workload
    out: Path = Path("sagellm-results")
    keep: bool = False
    region: str = "us-east-1"
    profiles_dir: Path | None = None
    hf_token_secret: str | None = None  # Secrets Manager name or ARN (overrides the profile's)
    time_scale: float = 1.0
    slo_ms_per_token: float | None = None
    command: str = ""
    mlflow: str | None = None  # an MLflow tracking URI to log the run to
    sweep: str = "doubling"  # doubling | adaptive | auto (adaptive where predicted: bench/sweeps.py)
    budget_minutes: float | None = None  # endpoint-minutes the sweep may spend
    workers: int | None = 1  # worker processes (Ray actors with `ray`) per level; None: auto (see workers)
    ray: str | None = None  # a Ray cluster's address, or auto (start a local one)
    ramp: bool | None = None  # open-loop steps over time (None: when the plan has autoscaling)
    instance_startup_s: float | None = None  # local autoscaling: scale-out → InService (None: the default)


@dataclass(frozen=True)
class BenchOutcome:
    """The finished run and the exit status it earns."""

    results: Results
    exit_status: ExitStatus
    error: str | None = None


def to_bench(opts: BenchOptions) -> Bench:
    """The bench the flags ask for; every problem of every flag in one InputError, before anything runs."""
    errors = _misplaced(opts)
    parts: dict[str, Any] = {}

    def build(name: str, make: Callable[[], Any]) -> None:
        try:
            parts[name] = make()
        except InputError as exc:
            errors.extend(exc.messages)

    build("target", lambda: _target(opts))
    build("serving", lambda: ServingSpec(profile=opts.profile, model=opts.model, instance=opts.instance,
                                     payload=opts.payload, region=opts.region, profiles_dir=opts.profiles_dir,
                                     hf_token_secret=opts.hf_token_secret))
    if "target" in parts and "serving" in parts:
        errors.extend(pairing_problems(parts["serving"], parts["target"]))
    build("load", lambda: _load(opts))
    build("sweep", lambda: Sweep(opts.sweep, opts.budget_minutes))
    build("workers", lambda: Workers(opts.workers, opts.ray))
    build("output", lambda: Output(opts.out, opts.command, opts.mlflow))
    if errors:
        raise InputError(errors)
    return Bench(workload=opts.workload, gate=Gate(opts.thresholds, opts.baseline, opts.allow_incomparable,
                                                   opts.slo_ms_per_token), **parts)


def _misplaced(opts: BenchOptions) -> list[str]:
    """Flags given to a target (or a load) they do not belong to."""
    target, endpoint = opts.target, opts.endpoint_name is not None
    wrong = [
        (bool(opts.url) and target != "http", "--url: only used with --target http"),
        (opts.time_scale != 1.0 and target != "local", "--time-scale: only the local emulator can compress time"),
        (opts.keep and target == "local", ("--keep: the local AWS lives only as long as the bench; use `sagellm "
                                          "emulate` for a lasting local endpoint")),
        (bool(opts.served_model) and target != "http",
         "--served-model: only used with --target http (the name an existing server serves)"),
        (endpoint and target != "sagemaker", "--endpoint-name: only with --target sagemaker"),
        (opts.inference_component is not None and not endpoint, "--inference-component: only with --endpoint-name"),
        (endpoint and opts.keep, "--keep: an existing endpoint is never deleted; leave --keep out"),
        (opts.instance_startup_s is not None and target != "local",
         f"--instance-startup: {opts.instance_startup_s or 0:g} must be > 0 seconds, with --target local"),
        (bool(opts.request_rate and opts.concurrency),
         "--concurrency/--request-rate: give one, not both (closed loop or open loop)"),
        (not opts.request_rate and (opts.arrivals is not None or opts.max_in_flight is not None),
         "--arrivals/--max-in-flight: only with --request-rate"),
        (bool(opts.ramp) and opts.requests_per_level is not None,
         "--requests-per-level: a ramp's steps last --duration-per-level seconds each"),
    ]
    return [message for misplaced, message in wrong if misplaced]


def _target(opts: BenchOptions) -> TargetSpec:
    if opts.target == "http":
        return Http(opts.url or "", opts.api, opts.served_model)
    if opts.target == "sagemaker" and opts.endpoint_name is not None:
        return Endpoint(opts.endpoint_name, opts.inference_component, opts.api)
    if opts.target == "sagemaker":
        return SageMaker(keep=opts.keep, api=opts.api)
    if opts.target == "local":
        return Local(opts.time_scale, opts.instance_startup_s, opts.api)
    raise InputError(f"--target: {opts.target!r} must be local, sagemaker or http")


def _load(opts: BenchOptions) -> LoadSpec:
    """--ramp: a ramp; --no-ramp: the levels; neither: a ramp when the plan autoscales, else the levels."""
    arrivals = cast(Arrivals, opts.arrivals or "constant")  # flag text: the spec refuses anything else
    max_in_flight = MAX_IN_FLIGHT if opts.max_in_flight is None else opts.max_in_flight
    if opts.ramp:
        problems = level_problems(None, None, opts.warmup, opts.repeats)
        if opts.repeats > 1:
            problems.append("--repeats: a ramp runs once; --no-ramp repeats the levels of a sweep")
        if problems:
            raise InputError(problems)
        return Ramp(opts.request_rate, arrivals, max_in_flight, step_s=opts.duration_per_level_s)
    given: Closed | Open
    if opts.request_rate:
        given = Open(opts.request_rate, arrivals, max_in_flight, opts.requests_per_level, opts.duration_per_level_s,
                     opts.warmup, opts.repeats)
    else:
        given = Closed(opts.concurrency, opts.requests_per_level, opts.duration_per_level_s, opts.warmup,
                       opts.repeats)
    return given if opts.ramp is False else RampIfAutoscaled(given)

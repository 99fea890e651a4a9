"""What `sagellm bench` was asked to do, checked before anything is deployed or written."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from sagellm.bench.client.transports import APIS
from sagellm.bench.client.workload import WorkloadOptions
from sagellm.bench.load.workers import worker_problems
from sagellm.bench.sweep.run import sweep_problems
from sagellm.errors import ExitStatus, InputError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload
from sagellm.profiles.tokens import token_errors
from sagellm.results.report import writable_folder_errors
from sagellm.results.schema import Results

DEFAULT_PAYLOAD = Payload(256, 256)  # the standard profiles' payload, for an http run without a profile


@dataclass(frozen=True)
class BenchOptions:
    """Everything `sagellm bench` was asked to do."""

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


def check_options(opts: BenchOptions) -> None:
    """Reject contradictory options before anything is deployed."""
    errors = []
    if opts.target not in ("local", "sagemaker", "http"):
        errors.append(f"--target: {opts.target!r} must be local, sagemaker or http")
    if opts.target == "http" and not opts.url:
        errors.append("--url: required with --target http (e.g. http://localhost:8080 for TGI)")
    if opts.url and opts.target != "http":
        errors.append("--url: only used with --target http")
    if opts.time_scale != 1.0 and opts.target != "local":
        errors.append("--time-scale: only the local emulator can compress time")
    if not 0 < opts.time_scale <= 1:
        errors.append(f"--time-scale: {opts.time_scale} must be in (0, 1]")
    if opts.keep and opts.target == "local":
        errors.append("--keep: the local AWS lives only as long as the bench; use `sagellm emulate` for a "
                      "lasting local endpoint")
    if opts.requests_per_level is not None and opts.duration_per_level_s is not None:
        errors.append("--requests-per-level/--duration-per-level: give one, not both")
    if opts.requests_per_level is not None and opts.requests_per_level < 1:
        errors.append(f"--requests-per-level: {opts.requests_per_level} must be at least 1")
    if opts.duration_per_level_s is not None and not 0 < opts.duration_per_level_s < math.inf:
        errors.append(f"--duration-per-level: {opts.duration_per_level_s:g} must be a positive number of seconds")
    if opts.budget_minutes is not None and not 0 < opts.budget_minutes < math.inf:
        errors.append(f"--budget-minutes: {opts.budget_minutes:g} must be a positive number of endpoint-minutes")
    if opts.warmup < 0:
        errors.append(f"--warmup: {opts.warmup} must be 0 or more")
    if opts.api not in (*APIS, "auto"):
        errors.append(f"--api: {opts.api!r} must be tgi, openai, chat or auto")
    elif opts.api == "openai" and opts.target != "http":
        errors.append("--api openai: only with --target http (SageMaker endpoints take tgi or chat)")
    if opts.served_model and opts.target != "http":
        errors.append("--served-model: only used with --target http (the name an existing server serves)")
    if opts.target != "http" and opts.endpoint_name is None and not (opts.profile and opts.model):
        errors.append("--profile/--model: required: the profile and the catalog model to deploy (or bench a "
                      "deployed endpoint: --target sagemaker --endpoint-name NAME)")
    if opts.endpoint_name is not None and opts.target != "sagemaker":
        errors.append("--endpoint-name: only with --target sagemaker")
    if opts.inference_component is not None and opts.endpoint_name is None:
        errors.append("--inference-component: only with --endpoint-name")
    if opts.endpoint_name is not None and opts.keep:
        errors.append("--keep: an existing endpoint is never deleted; leave --keep out")
    if opts.target == "http" and bool(opts.profile) != bool(opts.model):
        errors.append("--profile/--model: give both to label and predict the run, or neither (no prediction)")
    errors += sweep_problems(concurrency=opts.concurrency, request_rate=opts.request_rate,
                             arrivals=opts.arrivals, max_in_flight=opts.max_in_flight, repeats=opts.repeats)
    if opts.hf_token_secret is not None:
        errors.extend(token_errors({"hf_token_secret": opts.hf_token_secret}, lambda loc: "--hf-token-secret"))
    if opts.ramp and opts.requests_per_level is not None:
        errors.append("--requests-per-level: a ramp's steps last --duration-per-level seconds each")
    if opts.instance_startup_s is not None and (opts.target != "local" or not opts.instance_startup_s > 0):
        errors.append(f"--instance-startup: {opts.instance_startup_s:g} must be > 0 seconds, with --target local")
    errors.extend(worker_problems(opts.workers, opts.ray))
    errors.extend(writable_folder_errors(opts.out, "--out"))
    if errors:
        raise InputError(errors)

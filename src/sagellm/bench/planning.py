"""Plan a bench: everything decided and every input checked before anything is deployed or written."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sagellm import __version__
from sagellm.aws.account import DEFAULT_REGION, Account, choose_region, configured_region, resolve_account
from sagellm.aws.endpoints import DeployedEndpoint
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.specs import (
    DEFAULT_PAYLOAD,
    Bench,
    Closed,
    Endpoint,
    Http,
    LoadSpec,
    Local,
    Open,
    Ramp,
    RampIfAutoscaled,
    SageMaker,
    ServingSpec,
    ramp_of,
)
from sagellm.bench.sweep.choosers import sweep_method, threshold_levels
from sagellm.bench.sweep.ramp import ramp_steps
from sagellm.bench.sweep.run import default_budget
from sagellm.bench.targets.existing import read_endpoint, reconcile
from sagellm.bench.targets.http import api_for, check_reachable, emulator_clock, runtime_clock
from sagellm.catalog.regions import check_region
from sagellm.clock import REAL, Clock
from sagellm.errors import InputError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload, Shape
from sagellm.profiles import DeploymentPlan, Design, design_for, profile_payload
from sagellm.profiles.tokens import gated_without_secret
from sagellm.results.gate import Thresholds, read_gate, sweep_levels
from sagellm.results.schema import Results, Run

__all__ = ["BenchPlan", "plan_bench", "url_of"]


@dataclass(frozen=True)
class BenchPlan:
    """What a bench will do, decided and checked before anything is deployed or written."""

    bench: Bench
    run_id: str  # tags what the run deploys (sagellm:bench-run)
    deployed: DeployedEndpoint | None  # the existing endpoint an Endpoint target names
    design: Design | None  # None without a catalog model (an http target only): no prediction
    plan: DeploymentPlan | None
    workload: Workload
    load: Closed | Open | Ramp  # the load as it runs (a ramp decided, its steps predicted)
    levels: tuple[float, ...]  # the levels it measures: concurrencies, request rates or the ramp's steps
    method: str  # adaptive | doubling
    run: Run  # what is measured, where and how (before the target tells the rest)
    thresholds: Thresholds | None
    baseline: Results | None
    notes: tuple[str, ...] = ()  # said once before deploying (e.g. why nothing is predicted)
    account: Account | None = None  # a sagemaker target's account and region, checked before anything is made

    @property
    def clock(self) -> Clock:
        """The clock of the emulator measured (REAL: real time, or no emulator): the local target's own, or the
        one an emulator behind the http or SageMaker-runtime URL says it runs at."""
        return self.run.simulated_clock

    @property
    def shape(self) -> Shape | None:
        """The planner's shape of the served model (None without a design)."""
        return self.design.shape() if self.design else None

    @property
    def open_loop(self) -> OpenLoop | None:
        """The open loop's schedule (a ramp's too); None for a closed loop."""
        if isinstance(self.load, Closed):
            return None
        return OpenLoop(self.levels, arrivals=self.load.arrivals,
                        max_in_flight=self.load.max_in_flight, seed=self.bench.workload.seed,
                        clock=self.clock)

    @property
    def requests(self) -> int | Callable[[float], int] | None:
        """Measured requests per level: as given, or the default for the level's load (None: a duration)."""
        load = self.load
        if isinstance(load, Ramp) or load.duration_per_level_s is not None:
            return None
        return load.requests_per_level or default_budget(open_loop=isinstance(load, Open))

    @property
    def duration_s(self) -> float | None:
        """Seconds of wall time per level: the asked simulated seconds, compressed like the emulator's clock."""
        simulated = None if isinstance(self.load, Ramp) else self.load.duration_per_level_s
        return None if simulated is None else self.clock.wall_s(simulated)


def plan_bench(bench: Bench) -> BenchPlan:
    """Plan a bench: every input is read and checked here, so a bad profile, workload or thresholds file costs
    nothing. Reads the profiles, the gate's files and an existing endpoint's description; deploys nothing."""
    target = bench.target
    region, notes = _region(bench)
    bench = replace(bench, serving=replace(bench.serving, region=region))
    # An existing endpoint is read from the account before anything else; a stack is checked for last (the
    # inputs first: they cost nothing).
    account = resolve_account(region, bootstrap=False) if isinstance(target, Endpoint) else None
    deployed = read_endpoint(target.name, target.inference_component, account) if account and isinstance(
        target, Endpoint) else None
    # An http server runs on hardware sagellm cannot see: predicting for the profile's default instance would
    # set a measurement beside a prediction for another machine, so only a named instance is predicted.
    unseen = isinstance(target, Http) and bool(bench.serving.profile) and bench.serving.instance is None
    design, workload = _design(bench.serving, bench.workload, deployed, predict=not unseen)
    plan = design.plan(bench.serving.hf_token_secret) if design else None
    if isinstance(target, SageMaker) and design is not None and plan is not None:
        _check_deployable(design, plan)
    # Conversations run as levels (`load.conversations`), never as an autoscaling ramp.
    load = _load_as_run(bench.load if bench.load_by is None else _job_load(bench.load),
                        design if workload.conversations is None else None)
    method = sweep_method(bench.sweep.method, predicted=design is not None, open_loop=not isinstance(load, Closed))
    levels = _levels(load, method, bench)
    if bench.load_by is not None:
        _check_job_levels(bench.workload, load, levels, workload)
    run_id = uuid.uuid4().hex[:10]
    clock = emulator_clock_of(bench)
    if workload.conversations is not None:  # think times are simulated seconds on an emulator
        workload.conversations.clock = clock or REAL
    run = _run(bench, plan, workload, load, levels, deployed, run_id, clock)
    thresholds, baseline = read_gate(bench.gate.thresholds, bench.gate.baseline, run, sweep_levels(run),
                                     allow_incomparable=bench.gate.allow_incomparable)
    account = _reach(bench, region, account)
    if account is not None:
        notes = (f"AWS account {account.id}, region {region}: deploy, load, metrics and teardown all use them",
                 *notes)
    notes = (*notes, NO_INSTANCE) if unseen else notes
    return BenchPlan(bench, run_id, deployed, design, plan, workload, load, levels, method, run, thresholds, baseline,
                     notes, account)


def _check_deployable(design: Design, plan: DeploymentPlan) -> None:
    """What a deploy into an account needs, checked before it costs anything: S3 weights for a local folder (it
    never reaches the account; the local target's moto and emulator need none), a token for a gated model (without
    one it would fail only after a paid start-up)."""
    if errors := design.folder_errors("ServingSpec.model", "ServingSpec.model_s3_uri="):
        raise InputError(errors)
    if missing := gated_without_secret(plan.gated_models, bool(plan.hf_token_secret)):
        raise InputError([m.replace("pass -c hf_token_secret=", "pass ServingSpec.hf_token_secret=") for m in missing])


def _reach(bench: Bench, region: str, account: Account | None) -> Account | None:
    """The target, checked last (the inputs cost nothing): an http URL's port, a sagemaker target's account and
    bootstrap, and a benchmark job's output location; the account the run uses (None off AWS)."""
    target = bench.target
    if isinstance(target, Http):
        check_reachable(target.url)  # a closed port is one line, before anything is written
    if isinstance(target, SageMaker):
        account = resolve_account(region, bootstrap=True)
    if account is not None and bench.load_by is not None:
        from sagellm.aws.ai_jobs import check_output_readable

        check_output_readable(account.client("s3"), bench.load_by.output_s3_uri, "AwsBenchmarkJob.output_s3_uri")
    return account


def _region(bench: Bench) -> tuple[str, tuple[str, ...]]:
    """The run's region, and what to say of it: a sagemaker target's is the AWS configuration's unless --region
    names one (said when they differ); the others' are us-east-1 unless named (prices and image URIs only)."""
    given = bench.serving.region
    if not isinstance(bench.target, SageMaker | Endpoint):
        return given or DEFAULT_REGION, ()
    region, source = choose_region(given)
    check_region(region, source)  # --region is checked as it is parsed; the configuration's is checked here
    configured, where = configured_region()
    if configured and configured != region:
        return region, (f"--region {region}: the run uses it throughout, not {where}'s {configured}",)
    return region, (() if given or configured else (f"region {region}: {source}",))


def emulator_clock_of(bench: Bench) -> Clock | None:
    """The clock of the emulator the bench measures, or None where it measures no emulator: the local
    target's, or what the emulator behind an http URL or the SageMaker runtime says (timings are converted
    to simulated time the same way on every target)."""
    target = bench.target
    if isinstance(target, Local):
        return target.clock
    if isinstance(target, Http):
        return emulator_clock(target.url)
    return runtime_clock()


NO_INSTANCE = ("--target http: no prediction without --instance (the instance type the server runs on); the run "
               "is measured and labelled, not predicted")


def _design(serving: ServingSpec, options: WorkloadOptions, deployed: DeployedEndpoint | None, *,
            predict: bool = True) -> tuple[Design | None, Workload]:
    """The plan's design and the workload. The longest request the workload can send sizes the plan (its
    token caps and admission limit must take every request); the mean request sizes the prediction. The
    workload is built first, from the given payload or the profile's, so the profile is designed once.

    An existing endpoint (`deployed`) is designed as it runs: its profile and model (given, or from its tags),
    instance type and count. Without a catalog model (http target only) there is no design."""
    profile, model = reconcile(deployed, serving.profile, serving.model, serving.instance) if deployed else \
        (serving.profile, serving.model)
    if not (profile and model):
        return None, Workload(options, serving.payload or DEFAULT_PAYLOAD)
    if not predict:
        return None, Workload(options, serving.payload or profile_payload(profile, serving.profiles_dir))
    default = serving.payload or profile_payload(profile, serving.profiles_dir)
    workload = Workload(options, default)
    longest = Payload(*workload.longest())
    # The given payload (or none: the profile's) where the workload sends nothing longer, so that errors name
    # the option or the profile line the lengths came from.
    design = design_for(profile, model, deployed.instance_type if deployed else serving.instance,
                        payload=serving.payload if longest == default else longest,
                        region=serving.region or DEFAULT_REGION,
                        profiles_dir=serving.profiles_dir,
                        instance_count=deployed.instance_count if deployed else None, engine=serving.engine,
                        model_s3_uri=serving.model_s3_uri)
    return design, workload


def _load_as_run(load: LoadSpec, design: Design | None) -> Closed | Open | Ramp:
    """The load as it will run: a ramp where the plan autoscales (unless the levels were asked for), its
    steps predicted where none are given."""
    if isinstance(load, RampIfAutoscaled):
        if not (design and design.scaling):
            return load.otherwise
        load = ramp_of(load.otherwise)
    if isinstance(load, Ramp) and not load.request_rate:
        return Ramp(ramp_steps(True, (), design), load.arrivals, load.max_in_flight, load.step_s)
    return load


def _job_load(load: LoadSpec) -> Closed | Open:
    """The levels an AWS benchmark job runs, one job each: a ramp's continuous schedule is not one AIPerf can run."""
    if isinstance(load, RampIfAutoscaled):
        return load.otherwise
    if isinstance(load, Ramp):
        raise InputError("Bench.load_by: a SageMaker AI benchmark job runs one level at a time; a ramp's steps share "
                         "one schedule (give levels: --no-ramp)")
    return load


def _check_job_levels(options: WorkloadOptions, load: Closed | Open | Ramp, levels: tuple[float, ...],
                      workload: Workload) -> None:
    """Each level as AIPerf's spec, before anything is deployed: what AIPerf cannot express is one line each."""
    from sagellm.bench.aiperf import spec_of

    assert not isinstance(load, Ramp)  # _job_load
    for level in levels or (1,):  # adaptive levels are chosen later; what AIPerf cannot take is the same at each
        one = replace(load, concurrency=(int(level),)) if isinstance(load, Closed) else \
            replace(load, request_rate=(level,))
        spec_of(options, one, workload.payload())


def _levels(load: Closed | Open | Ramp, method: str, bench: Bench) -> tuple[float, ...]:
    """The levels the run measures. An adaptive sweep also measures the levels the thresholds name."""
    if not isinstance(load, Closed):
        return load.request_rate
    if method == "adaptive":
        return tuple(sorted(set(load.concurrency) | set(threshold_levels(bench.gate.thresholds))))
    return load.concurrency or DEFAULT_CONCURRENCY


def _run(bench: Bench, plan: DeploymentPlan | None, workload: Workload, load: Closed | Open | Ramp,
         levels: tuple[float, ...], deployed: DeployedEndpoint | None, run_id: str, clock: Clock | None) -> Run:
    """What is measured, where and how (before deploying: `assemble` adds what the target told)."""
    target, mean = bench.target, workload.payload()
    emulated = clock is not None
    closed = isinstance(load, Closed)
    return Run(
        profile=plan.profile if plan else None,
        model=plan.primary.model_id if plan else getattr(target, "served_model", None) or bench.serving.model
        or "unknown",
        instance_type=plan.instance_type if plan else None,
        instance_count=plan.initial_instance_count if plan else None,
        target=target.kind,
        emulated=emulated, time_scale=(clock or REAL).scale, region=bench.serving.region or DEFAULT_REGION,
        bench_run=run_id,
        # An existing endpoint runs the environment it was deployed with, whatever the profile says today.
        environment=deployed.environment if deployed else plan.environment if plan else {},
        # The served image without its registry (the same image is served from every region's registry).
        container=None if isinstance(target, Http) or plan is None else plan.primary.image_uri.split("/", 1)[-1],
        input_tokens=mean.input_tokens, output_tokens=mean.output_tokens,
        concurrency=list(levels) if closed else [], request_rate=[] if closed else list(levels),
        arrivals=None if isinstance(load, Closed) else load.arrivals,
        max_in_flight=None if isinstance(load, Closed) else load.max_in_flight,
        repeats=1 if isinstance(load, Ramp) else load.repeats, clock="emulator" if emulated else "client",
        load_by="sagellm" if bench.load_by is None else "aws-benchmark-job",
        workload=workload.describe(api_for(target.api, url_of(bench))), tool_version=__version__,
        started_at=datetime.now(UTC), command=bench.output.command,
    )


def url_of(bench: Bench) -> str | None:
    """The URL of an http target (None for the others)."""
    return bench.target.url if isinstance(bench.target, Http) else None

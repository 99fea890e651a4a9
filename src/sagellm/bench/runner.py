"""`sagellm bench`: deploy → sweep → report → gate → teardown, with teardown on every way out."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagellm import __version__
from sagellm.bench.load import (
    MAX_IN_FLIGHT,
    LevelResult,
    OpenLoop,
    StopRule,
    default_budget,
    run_sweep,
    sweep_problems,
)
from sagellm.bench.measured import levels_of, on_simulated_clock
from sagellm.bench.progress import Say, Watch
from sagellm.bench.records import RecordLog, RequestRecord
from sagellm.bench.targets import HttpTarget, LocalTarget, SageMakerTarget, Target, check_reachable
from sagellm.bench.transports import APIS
from sagellm.bench.workers import pool_size, worker_pool, worker_problems
from sagellm.bench.workload import Workload, WorkloadOptions
from sagellm.errors import ExitStatus, InputError, SagellmError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload, predict_point
from sagellm.profiles.plan import DeploymentPlan
from sagellm.profiles.resolve import Design, design_for, to_plan
from sagellm.results import sweep
from sagellm.results.gate import gate, read_gate, sweep_levels
from sagellm.results.report import writable_folder_errors, write_report
from sagellm.results.schema import (
    Failure,
    Level,
    LevelSummary,
    Predicted,
    Results,
    Run,
    Teardown,
    predicted_from,
    write_results,
)
from sagellm.results.sweep import make_results

DEFAULT_PAYLOAD = Payload(256, 256)  # the standard profiles' payload, for an http run without a profile


@dataclass(frozen=True)
class BenchOptions:
    """Everything `sagellm bench` was asked to do."""

    profile: str | None  # optional for the http target (then no prediction)
    model: str | None  # a catalog model: labels the run and predicts it
    instance: str | None = None
    target: str = "local"  # local | sagemaker | http
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
    time_scale: float = 1.0
    slo_ms_per_token: float | None = None
    command: str = ""
    workers: int | None = 1  # worker processes (Ray actors with `ray`) per level; None: auto (see workers)
    ray: str | None = None  # a Ray cluster's address, or auto (start a local one)


@dataclass(frozen=True)
class BenchOutcome:
    """The finished run and the exit status it earns."""

    results: Results
    exit_status: ExitStatus
    error: str | None = None


def _check(opts: BenchOptions) -> None:
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
    if opts.warmup < 0:
        errors.append(f"--warmup: {opts.warmup} must be 0 or more")
    if opts.api not in (*APIS, "auto"):
        errors.append(f"--api: {opts.api!r} must be tgi, openai, chat or auto")
    elif opts.api == "openai" and opts.target != "http":
        errors.append("--api openai: only with --target http (SageMaker endpoints take tgi or chat)")
    if opts.served_model and opts.target != "http":
        errors.append("--served-model: only used with --target http (the name an existing server serves)")
    if opts.target != "http" and not (opts.profile and opts.model):
        errors.append("--profile/--model: required: the profile and the catalog model to deploy")
    if opts.target == "http" and bool(opts.profile) != bool(opts.model):
        errors.append("--profile/--model: give both to label and predict the run, or neither (no prediction)")
    errors += sweep_problems(concurrency=opts.concurrency, request_rate=opts.request_rate,
                             arrivals=opts.arrivals, max_in_flight=opts.max_in_flight, repeats=opts.repeats)
    errors.extend(writable_folder_errors(opts.out, "--out"))
    errors.extend(worker_problems(opts.workers, opts.ray))
    if errors:
        raise InputError(errors)


def _target(opts: BenchOptions, plan: DeploymentPlan | None, out: Path) -> Target:
    if opts.target == "http":
        return HttpTarget(opts.url or "", opts.api, opts.served_model, opts.model)
    assert plan is not None and opts.model is not None  # _check: deploying targets need both
    api = APIS["tgi" if opts.api == "auto" else opts.api]
    if opts.target == "sagemaker":
        return SageMakerTarget(plan, opts.model, opts.profiles_dir, out, api=api)
    return LocalTarget(plan, opts.model, opts.profiles_dir, out, time_scale=opts.time_scale, api=api)


def _design(opts: BenchOptions) -> tuple[Design | None, Workload]:
    """The plan's design and the workload. The longest request the workload can send sizes the plan (its
    token caps and admission limit must take every request); the mean request sizes the prediction.

    Without a catalog model (http target only) there is no design: nothing to deploy or predict."""
    profile, model = opts.profile, opts.model
    if not (profile and model):
        return None, Workload(opts.workload, opts.payload or DEFAULT_PAYLOAD)

    def design(payload: Payload | None) -> Design:
        return design_for(profile, model, opts.instance, payload=payload, region=opts.region,
                          profiles_dir=opts.profiles_dir)

    first = design(opts.payload)
    workload = Workload(opts.workload, first.payload)
    longest = Payload(*workload.longest())
    return (first if longest == first.payload else design(longest)), workload


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C while measuring (pipelines cancel jobs with SIGTERM)."""
    def on_term(signum: int, frame: Any) -> None:
        # Re-raise as SIGINT: asyncio then cancels the sweep task cleanly (an exception raised here
        # could land inside one of aiohttp's own tasks and surface as a stray traceback).
        signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _shielded(say: Any) -> Iterator[None]:
    """Teardown is not interruptible: a second Ctrl-C would leave a half-deleted stack behind."""
    def hold(signum: int, frame: Any) -> None:
        say("tearing down — please wait; interrupting now would leave resources behind")

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_bench(opts: BenchOptions, watch: Watch | None = None, say: Say | None = None) -> BenchOutcome:
    """Run one bench; results are written whatever happens (a crash loses nothing finished)."""
    watch = watch or Watch(say=say)
    say = watch.say
    _check(opts)
    if opts.target == "http":
        check_reachable(opts.url or "")  # a closed port is one line, before anything is planned or written
    # Every input is validated before anything is deployed: a bad profile or thresholds file costs nothing.
    design, workload = _design(opts)
    plan = to_plan(design) if design else None
    started = datetime.now(UTC)
    run = _run(opts, plan, workload, started)
    thresholds, baseline = read_gate(opts.thresholds, opts.baseline, run, sweep_levels(run),
                                     allow_incomparable=opts.allow_incomparable)
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "requests.jsonl").unlink(missing_ok=True)
    target = _target(opts, plan, out)
    if plan is not None:
        (out / "plan.json").write_text(plan.model_dump_json(indent=2) + "\n")

    levels: list[LevelResult] = []
    log = RecordLog(out / "requests.jsonl")
    error: str | None = None
    status = ExitStatus.OK
    teardown = Teardown(status="not-applicable")

    def on_record(record: RequestRecord) -> None:
        record = on_simulated_clock(record, opts.time_scale, target.emulated)
        log.append(record)
        watch.record(record)

    lags: dict[str, float] = {}
    loop_lag_ms = getattr(target, "loop_lag_ms", lambda: None)

    def on_level(level: LevelResult) -> None:
        levels.append(level)
        watch.end_level()
        lag = loop_lag_ms()
        if lag is not None:
            lags[level.load] = lag

    try:
        with _signals():
            try:
                if plan is not None:
                    watch.enter("deploying", f"{plan.profile} ({plan.instance_type} × {plan.initial_instance_count}) "
                                f"to the {target.kind} target")
                transport = target.deploy()
                levels_text = ", ".join([f"{r:g}/s" for r in opts.request_rate] or map(str, opts.concurrency))
                watch.enter("measuring", f"endpoint {target.endpoint}, levels {levels_text}")
                loop = _open_loop(opts)
                size = pool_size(opts.workers, opts.request_rate or opts.concurrency, open_loop=loop)
                with worker_pool(size, transport, workload, opts.ray) as pool:
                    asyncio.run(run_sweep(
                        transport, workload=workload, concurrency=opts.concurrency, open_loop=loop,
                        requests_per_level=_budget(opts), duration_per_level_s=_duration(opts),
                        warmup=opts.warmup, on_record=on_record, on_progress=watch.progress, on_level=on_level,
                        stop_rule=StopRule(max_error_rate=sweep.MAX_ERROR_RATE), repeats=opts.repeats,
                        pool=pool, workers=opts.workers))
            except SagellmError as exc:
                error, status = str(exc), exc.exit_status
            except KeyboardInterrupt:
                error, status = "interrupted: stopped measuring, tore down", ExitStatus.INTERRUPTED
            except Exception as exc:  # noqa: BLE001 - a bug or unforeseen failure: still tear down, keep results
                (out / "error.log").write_text(traceback.format_exc())
                error = f"unexpected {type(exc).__name__}: {exc} (traceback in {out / 'error.log'})"
                status = ExitStatus.TARGET_FAILED
            finally:
                with _shielded(say):
                    if opts.keep and target.kind != "http":
                        teardown = Teardown(status="kept", detail=f"--keep: endpoint {target.endpoint} is still "
                                            "running and billing; `sagellm cleanup` deletes it")
                    else:
                        watch.enter("tearing down")
                        teardown = target.teardown()
    finally:
        log.close()

    if status == ExitStatus.OK and levels and not any(r.ok for lv in levels for r in lv.records):
        first = next((r for lv in levels for r in lv.records if not r.ok), None)
        error = f"no request succeeded: {first.error_kind}: {first.error}" if first else "no request was sent"
        status = ExitStatus.TARGET_FAILED
    elif status == ExitStatus.OK and (broken := _broken(levels)):
        error, status = broken, ExitStatus.TARGET_FAILED
    stopped = error  # why the sweep ended early: the run's own failure (a failed teardown is not one)
    if teardown.status == "failed":
        status = ExitStatus.TARGET_FAILED
        error = f"TEARDOWN FAILED: {teardown.detail}"
    slo = opts.slo_ms_per_token or (thresholds.slo_ms_per_token if thresholds else None)
    watch.enter("writing results", str(out))
    with _shielded(say):  # a signal now would lose the results of a finished run
        run = _measured_run(run, target)
        results = _results(run, design, workload, levels, lags, teardown, status, stopped, slo)
        if error is not None and status in (ExitStatus.TARGET_FAILED, ExitStatus.INTERRUPTED):
            results = results.model_copy(update={"failure": Failure(exit_status=status, message=error)})
        if thresholds is not None:
            results = results.model_copy(update={"gate": gate(results, thresholds, baseline)})
        write_results(out / "results.json", results)
        write_report(out, results)

    if status == ExitStatus.OK and results.gate is not None and not results.gate.passed:
        status = ExitStatus.GATE_FAILED
    return BenchOutcome(results, status, error)


def _broken(levels: list[LevelResult]) -> str | None:
    """Why the target is broken: a level where more requests than the error limit failed as `other`.

    Overloaded, throttled and timed-out requests are the endpoint's limits, where a sweep ends normally;
    `other` errors (streams cut short, connections reset, 5xx) are a failing target, not a measurement.
    """
    for lv in levels:
        broken = [r for r in lv.records if not r.ok and r.error_kind == "other"]
        if len(broken) > sweep.MAX_ERROR_RATE * len(lv.records):
            return (f"the target failed {len(broken)} of {len(lv.records)} requests at level {lv.load}: "
                    f"{broken[0].error}")
    return None


def _budget(opts: BenchOptions) -> Any:
    """Measured requests per level: as given, or the default for the level's load."""
    if opts.duration_per_level_s is not None:
        return None
    return opts.requests_per_level or default_budget(open_loop=bool(opts.request_rate))


def _open_loop(opts: BenchOptions) -> OpenLoop | None:
    if not opts.request_rate:
        return None
    return OpenLoop(opts.request_rate, arrivals=opts.arrivals or "constant",  # type: ignore[arg-type]
                    max_in_flight=opts.max_in_flight or MAX_IN_FLIGHT, seed=opts.workload.seed,
                    time_scale=opts.time_scale)


def _duration(opts: BenchOptions) -> float | None:
    """Seconds of wall time per level: the asked simulated seconds, compressed like the emulator's clock."""
    return None if opts.duration_per_level_s is None else opts.duration_per_level_s * opts.time_scale


def _run(opts: BenchOptions, plan: DeploymentPlan | None, workload: Workload, started: datetime) -> Run:
    """What is measured, where and how (before deploying: `_measured_run` fills in what the target tells)."""
    mean, loop = workload.payload(), _open_loop(opts)
    emulated = opts.target == "local"
    api = opts.api if opts.api != "auto" else "openai" if opts.target == "http" and "/v1" in (opts.url or "") else "tgi"
    return Run(
        profile=plan.profile if plan else None, model=plan.primary.model_id if plan else opts.served_model or "unknown",
        instance_type=plan.instance_type if plan else None,
        instance_count=plan.initial_instance_count if plan else None,
        target=opts.target,  # type: ignore[arg-type]  # _check-ed
        emulated=emulated, time_scale=opts.time_scale, region=opts.region,
        environment=plan.environment if plan else {},
        # The served image without its registry (the same image is served from every region's registry).
        container=None if opts.target == "http" or plan is None else plan.primary.image_uri.split("/", 1)[-1],
        input_tokens=mean.input_tokens, output_tokens=mean.output_tokens,
        concurrency=list(opts.concurrency), request_rate=list(opts.request_rate),
        arrivals=loop.arrivals if loop else None, max_in_flight=loop.max_in_flight if loop else None,
        repeats=opts.repeats, clock="emulator" if emulated else "client", workload=workload.describe(api),
        tool_version=__version__, started_at=started, command=opts.command,
    )


def _measured_run(run: Run, target: Target) -> Run:
    """The run with what only the reached target tells: its endpoint, whether it is emulated, the API it
    spoke and the model it serves."""
    served = getattr(target, "served_model", None)  # an http server's model name, known once reached
    update: dict[str, Any] = {"ended_at": datetime.now(UTC), "endpoint": target.endpoint,
                              "emulated": target.emulated, "clock": "emulator" if target.emulated else "client",
                              "served_model": served}
    if run.workload is not None:
        update["workload"] = run.workload.model_copy(update={"api": target.api.name})
    if run.profile is None:
        update["model"] = served or run.model
    return run.model_copy(update=update)


def _results(run: Run, design: Design | None, workload: Workload, levels: list[LevelResult],
             lags: dict[str, float], teardown: Teardown, status: ExitStatus, error: str | None,
             slo: float | None) -> Results:
    mean = workload.payload()

    def predict(level: LevelSummary) -> Predicted | None:
        # The planner predicts closed loops; an open-loop level (or a run without a design) has no prediction.
        if design is None or level.concurrency is None:
            return None
        return predicted_from(predict_point(design.shape(), mean, level.concurrency))

    measured: list[Level] = levels_of(levels, time_scale=run.time_scale, emulated=run.emulated,
                                      predict=predict, lags=lags)
    stopped = next((lv.stopped_reason for lv in levels if lv.stopped_reason), None)
    if status == ExitStatus.INTERRUPTED:
        stopped = f"interrupted after {len(levels)} level(s)"
    elif error:
        stopped = error
    price = design.instance.price_per_h(run.region) if design else None
    return make_results(run, measured, usd_per_h=sweep.usd_per_h(price, run.instance_count or 1),
                        teardown=teardown, slo_ms_per_token=slo, stopped_reason=stopped)

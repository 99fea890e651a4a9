"""`sagellm bench`: deploy → sweep → report → gate → teardown, with teardown on every way out."""

from __future__ import annotations

import shutil
import traceback
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sagellm import __version__
from sagellm.aws.cleanup import this_process
from sagellm.aws.endpoints import DeployedEndpoint
from sagellm.bench.client.records import RecordLog, RequestRecord
from sagellm.bench.client.workload import Workload
from sagellm.bench.interrupts import Interrupted, Interrupts
from sagellm.bench.load.level import LevelResult, StopRule
from sagellm.bench.load.measured import levels_of, on_simulated_clock
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.load.pools import worker_pool
from sagellm.bench.load.workers import pool_size
from sagellm.bench.options import DEFAULT_PAYLOAD, BenchOptions, BenchOutcome, check_options
from sagellm.bench.progress import Say, Watch
from sagellm.bench.server_metrics import ServerWatch
from sagellm.bench.sweep.choosers import Chooser, make_chooser, sweep_method, threshold_levels, with_sweep
from sagellm.bench.sweep.ramp import DEFAULT_STEP_S, RampRun, ramp_steps
from sagellm.bench.sweep.run import MAX_IN_FLIGHT, default_budget, run_sweep
from sagellm.bench.targets.existing import read_endpoint, reconcile
from sagellm.bench.targets.http import api_for, check_reachable
from sagellm.bench.targets.target import Target, choose_target
from sagellm.bench.targets.teardown import tear_down
from sagellm.bench.verdict import target_failure
from sagellm.errors import ExitStatus, InputError, SagellmError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload, predict_point
from sagellm.profiles.plan import DeploymentPlan
from sagellm.profiles.resolve import Design, design_for, to_plan
from sagellm.profiles.tokens import gated_without_secret
from sagellm.results import sweep
from sagellm.results.gate import gate, read_gate, sweep_levels
from sagellm.results.report import write_report
from sagellm.results.schema import (
    Failure,
    Level,
    LevelSummary,
    Predicted,
    Results,
    Run,
    ServerMetrics,
    Teardown,
    predicted_from,
    write_results,
)
from sagellm.results.sweep import make_results

__all__ = ["BenchOptions", "BenchOutcome", "run_bench"]


def _design(opts: BenchOptions, deployed: DeployedEndpoint | None) -> tuple[Design | None, Workload]:
    """The plan's design and the workload. The longest request the workload can send sizes the plan (its
    token caps and admission limit must take every request); the mean request sizes the prediction.

    An existing endpoint (`deployed`) is designed as it runs: its profile and model (given, or from its tags),
    instance type and count. Without a catalog model (http target only) there is no design."""
    profile, model = reconcile(deployed, opts.profile, opts.model, opts.instance) if deployed else \
        (opts.profile, opts.model)
    if not (profile and model):
        return None, Workload(opts.workload, opts.payload or DEFAULT_PAYLOAD)

    def design(payload: Payload | None) -> Design:
        return design_for(profile, model, deployed.instance_type if deployed else opts.instance, payload=payload,
                          region=opts.region, profiles_dir=opts.profiles_dir,
                          instance_count=deployed.instance_count if deployed else None)

    first = design(opts.payload)
    workload = Workload(opts.workload, first.payload)
    longest = Payload(*workload.longest())
    return (first if longest == first.payload else design(longest)), workload


def run_bench(opts: BenchOptions, watch: Watch | None = None, say: Say | None = None) -> BenchOutcome:
    """Run one bench; results are written whatever happens (a crash loses nothing finished)."""
    watch = watch or Watch(say=say)
    say = watch.say
    check_options(opts)
    # Every input is validated before anything is deployed: a bad profile or thresholds file costs nothing.
    deployed = read_endpoint(opts.endpoint_name, opts.inference_component, opts.region) if opts.endpoint_name \
        else None
    design, workload = _design(opts, deployed)
    plan = to_plan(design, opts.hf_token_secret) if design else None
    if plan is not None and opts.target == "sagemaker" and deployed is None:
        # A gated model without a token would fail only after a paid start-up.
        missing = gated_without_secret(plan.gated_models, bool(plan.hf_token_secret))
        if missing:
            raise InputError([m.replace("pass -c hf_token_secret=", "pass --hf-token-secret ") for m in missing])
    steps = ramp_steps(opts.ramp, opts.request_rate, design)
    if steps and opts.repeats > 1:
        raise InputError("--repeats: a ramp runs once; --no-ramp repeats the levels of a sweep")
    if steps:
        opts = replace(opts, request_rate=steps, concurrency=(), warmup=0, repeats=1)
    method = sweep_method(opts.sweep, predicted=design is not None, open_loop=bool(opts.request_rate))
    if method == "adaptive":
        required = tuple(sorted(set(opts.concurrency) | set(threshold_levels(opts.thresholds))))
        opts = replace(opts, concurrency=required)
    elif not opts.request_rate and not opts.concurrency:
        opts = replace(opts, concurrency=DEFAULT_CONCURRENCY)
    run_id = uuid.uuid4().hex[:10]
    run = _run(opts, plan, workload, datetime.now(UTC), run_id, deployed)
    thresholds, baseline = read_gate(opts.thresholds, opts.baseline, run, sweep_levels(run),
                                     allow_incomparable=opts.allow_incomparable)
    if opts.target == "http":
        check_reachable(opts.url or "")  # a closed port is one line, before anything is written
    # Relative to where the bench was started, whatever folder the CDK CLI later runs in.
    out = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "requests.jsonl").unlink(missing_ok=True)
    shutil.rmtree(out / "cdk", ignore_errors=True)  # this run's CDK work folder: never an older run's assembly
    target = choose_target(opts.target, plan, model=run.model if plan else opts.model, url=opts.url, api=opts.api,
                           served_model=opts.served_model, profiles_dir=opts.profiles_dir, workdir=out / "cdk",
                           run=run_id, process=this_process(), time_scale=opts.time_scale, deployed=deployed,
                           say=say, instance_startup_s=opts.instance_startup_s)
    loop = _open_loop(opts)
    ramp = RampRun(steps, opts.duration_per_level_s or DEFAULT_STEP_S, loop, target) if steps and loop else None
    if plan is not None:
        (out / "plan.json").write_text(plan.model_dump_json(indent=2) + "\n")

    levels: list[LevelResult] = []
    log = RecordLog(out / "requests.jsonl")
    error: str | None = None
    status = ExitStatus.OK

    def on_record(record: RequestRecord) -> None:
        record = on_simulated_clock(record, opts.time_scale, target.emulated)
        log.append(record)
        watch.record(record)

    chooser = make_chooser(method, opts, design.shape() if design else None, workload.payload(),
                           plan.initial_instance_count if plan else 1, baseline)
    chooser = make_chooser(method, opts, design.shape() if design else None, workload.payload(),
                           plan.initial_instance_count if plan else 1, baseline)
    lags: dict[str, float] = {}
    loop_lag_ms = getattr(target, "loop_lag_ms", lambda: None)
    servers: ServerWatch | None = None
    server_blocks: dict[str, ServerMetrics] = {}

    def on_level(level: LevelResult) -> None:
        levels.append(level)
        watch.end_level()
        if servers is not None:
            ended = datetime.now(UTC)
            servers.level_done(level.load, ended - timedelta(seconds=level.ended_s - level.started_s), ended)
        lag = loop_lag_ms()
        if lag is not None:
            lags[level.load] = lag

    with Interrupts(say) as interrupts:
        try:
            with interrupts.armed():
                if plan is not None:
                    where = f"to the {target.kind} target" if target.deploys else f"on the {target.kind} target"
                    watch.enter("deploying" if target.deploys else "reaching",
                                f"{plan.profile} ({plan.instance_type} × {plan.initial_instance_count}) {where}")
                transport = target.deploy()
                servers = ServerWatch(target, transport, say)
                watch.enter("measuring", f"endpoint {target.endpoint}, "
                            + (ramp.describe() if ramp else chooser.describe()))
                if ramp is not None:
                    interrupts.run(ramp.run(transport, workload, on_record=on_record, on_progress=watch.progress,
                                            on_level=on_level))
                else:
                    size = pool_size(opts.workers, opts.request_rate or opts.concurrency, open_loop=loop)
                    run = run.model_copy(update={"workers": size, "ray": opts.ray})
                    with worker_pool(size, transport, workload, opts.ray) as pool:
                        interrupts.run(run_sweep(
                            transport, workload=workload, open_loop=loop,
                            requests_per_level=_budget(opts), duration_per_level_s=_duration(opts),
                            warmup=opts.warmup, on_record=on_record, on_progress=watch.progress, on_level=on_level,
                            stop_rule=StopRule(max_error_rate=sweep.MAX_ERROR_RATE), repeats=opts.repeats,
                            choose=chooser, pool=pool, workers=opts.workers))
                watch.enter("reading server metrics")
                server_blocks = servers.finish()
        except SagellmError as exc:
            error, status = str(exc), exc.exit_status
        except Interrupted:
            error, status = "interrupted: stopped measuring, tore down", ExitStatus.INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - a bug or unforeseen failure: still tear down, keep results
            (out / "error.log").write_text(traceback.format_exc())
            error = f"unexpected {type(exc).__name__}: {exc} (traceback in {out / 'error.log'})"
            status = ExitStatus.TARGET_FAILED
        # From here on a signal is held, not raised: teardown and the results always finish.
        log.close()
        if target.deploys and not opts.keep:
            watch.enter("tearing down")
        teardown = tear_down(target, opts.keep)
        if status == ExitStatus.OK and (failure := target_failure(levels)):
            error, status = failure, ExitStatus.TARGET_FAILED
        stopped = error  # why the sweep ended early: the run's own failure (a failed teardown is not one)
        if teardown.status == "failed":
            status = ExitStatus.TARGET_FAILED
            error = f"TEARDOWN FAILED: {teardown.detail}"
        slo = opts.slo_ms_per_token or (thresholds.slo_ms_per_token if thresholds else None)
        watch.enter("writing results", str(out))
        run = _measured_run(run, target)
        results = _results(run, design, workload, levels, lags, teardown, status, stopped, slo, chooser,
                           server_blocks)
        results = with_sweep(results, chooser, opts, design.shape() if design else None, workload.payload(),
                             _budget(opts))
        if ramp is not None:
            results = results.model_copy(update={"ramp": ramp.block(levels, run, design, slo)})
        if error is not None and status in (ExitStatus.TARGET_FAILED, ExitStatus.INTERRUPTED):
            results = results.model_copy(update={"failure": Failure(exit_status=status, message=error)})
        if thresholds is not None:
            results = results.model_copy(update={"gate": gate(results, thresholds, baseline)})
        write_results(out / "results.json", results)
        write_report(out, results)

    if interrupts.signum is not None and status not in (ExitStatus.INTERRUPTED, ExitStatus.TARGET_FAILED):
        # A signal held while tearing down or writing: both finished; the run still ends as interrupted.
        status = ExitStatus.INTERRUPTED
        error = f"interrupted by {interrupts.name} while tearing down or writing results; both finished"
    elif status == ExitStatus.OK and results.gate is not None and not results.gate.passed:
        status = ExitStatus.GATE_FAILED
    return BenchOutcome(results, status, error)


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


def _run(opts: BenchOptions, plan: DeploymentPlan | None, workload: Workload, started: datetime, run_id: str,
         deployed: DeployedEndpoint | None) -> Run:
    """What is measured, where and how (before deploying: `_measured_run` fills in what the target tells)."""
    mean, loop = workload.payload(), _open_loop(opts)
    emulated = opts.target == "local"
    api = api_for(opts.api, opts.url if opts.target == "http" else None)
    return Run(
        profile=plan.profile if plan else None, model=plan.primary.model_id if plan else opts.served_model or "unknown",
        instance_type=plan.instance_type if plan else None,
        instance_count=plan.initial_instance_count if plan else None,
        target=opts.target,  # type: ignore[arg-type]  # check_options-ed
        emulated=emulated, time_scale=opts.time_scale, region=opts.region, bench_run=run_id,
        # An existing endpoint runs the environment it was deployed with, whatever the profile says today.
        environment=deployed.environment if deployed else plan.environment if plan else {},
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
             slo: float | None, chooser: Chooser, server: dict[str, ServerMetrics] | None = None) -> Results:
    mean = workload.payload()

    def predict(level: LevelSummary) -> Predicted | None:
        # The planner predicts closed loops; an open-loop level (or a run without a design) has no prediction.
        if design is None or level.concurrency is None:
            return None
        return predicted_from(predict_point(design.shape(), mean, level.concurrency))

    measured: list[Level] = levels_of(levels, time_scale=run.time_scale, emulated=run.emulated,
                                      predict=predict, lags=lags)
    measured = [lv.model_copy(update={"server": (server or {}).get(lv.load)}) for lv in measured]
    stopped = chooser.stopped_reason(levels)
    if status == ExitStatus.INTERRUPTED:
        stopped = f"interrupted after {len(levels)} level(s)"
    elif error:
        stopped = error
    price = design.instance.price_per_h(run.region) if design else None
    return make_results(run, measured, usd_per_h=sweep.usd_per_h(price, run.instance_count or 1),
                        teardown=teardown, slo_ms_per_token=slo, stopped_reason=stopped)

"""`sagellm bench`: deploy → sweep → report → gate → teardown, with teardown on every way out."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import traceback
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagellm import __version__
from sagellm.aws.cleanup import this_process
from sagellm.bench import summary
from sagellm.bench.existing import read_endpoint, reconcile
from sagellm.bench.interrupts import Interrupted, Interrupts
from sagellm.bench.load import LevelResult, StopRule, run_sweep
from sagellm.bench.records import RecordLog, RequestRecord
from sagellm.bench.targets import Target, choose_target
from sagellm.bench.teardown import tear_down
from sagellm.bench.verdict import target_failure
from sagellm.errors import ExitStatus, InputError, SagellmError
from sagellm.planner import DEFAULT_CONCURRENCY, Payload, predict_point
from sagellm.profiles.plan import DeploymentPlan
from sagellm.profiles.resolve import Design, design_for, to_plan
from sagellm.results import sweep
from sagellm.results.gate import gate, load_thresholds
from sagellm.results.report import write_report
from sagellm.results.schema import (
    Level,
    Results,
    Run,
    Teardown,
    load_results,
    predicted_from,
    write_results,
)
from sagellm.results.sweep import make_results

# Published sweeps send a few × concurrency requests per level (method.md §5).
REQUESTS_PER_WORKER = 3
MIN_REQUESTS_PER_LEVEL = 8


@dataclass(frozen=True)
class BenchOptions:
    """Everything `sagellm bench` was asked to do."""

    profile: str | None = None  # optional with endpoint_name (read from what is deployed)
    model: str | None = None
    instance: str | None = None
    target: str = "local"  # local | sagemaker | http
    endpoint_name: str | None = None  # sagemaker target: bench this existing endpoint, deploy nothing
    inference_component: str | None = None
    url: str | None = None
    api: str = "auto"  # http target: tgi | openai | auto
    payload: Payload | None = None
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    requests_per_level: int | None = None  # None: REQUESTS_PER_WORKER × concurrency (unless a duration)
    duration_per_level_s: float | None = None
    warmup: int = 1
    thresholds: Path | None = None
    baseline: Path | None = None
    out: Path = Path("sagellm-results")
    keep: bool = False
    region: str = "us-east-1"
    profiles_dir: Path | None = None
    time_scale: float = 1.0
    slo_ms_per_token: float | None = None
    command: str = ""


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
    if opts.endpoint_name is None and not (opts.profile and opts.model):
        errors.append("--profile/--model: required (unless --target sagemaker --endpoint-name NAME)")
    if opts.endpoint_name is not None and opts.target != "sagemaker":
        errors.append("--endpoint-name: only with --target sagemaker")
    if opts.inference_component is not None and opts.endpoint_name is None:
        errors.append("--inference-component: only with --endpoint-name")
    if opts.endpoint_name is not None and opts.keep:
        errors.append("--keep: an existing endpoint is never deleted; leave --keep out")
    if opts.requests_per_level is not None and opts.duration_per_level_s is not None:
        errors.append("--requests-per-level/--duration-per-level: give one, not both")
    if opts.requests_per_level is not None and opts.requests_per_level < 1:
        errors.append("--requests-per-level: must be at least 1")
    if opts.duration_per_level_s is not None and opts.duration_per_level_s <= 0:
        errors.append("--duration-per-level: must be positive")
    if opts.warmup < 0:
        errors.append("--warmup: must be 0 or more")
    if errors:
        raise InputError(errors)


def _rescale(record: RequestRecord, factor: float) -> RequestRecord:
    """Times measured against a compressed emulator, back in simulated seconds."""
    if factor == 1.0:
        return record

    def scale(value: float | None) -> float | None:
        return None if value is None else value * factor

    return dataclasses.replace(
        record, start_s=record.start_s * factor, e2e_s=record.e2e_s * factor, ttft_s=scale(record.ttft_s),
        itl_s=[gap * factor for gap in record.itl_s], server_ttft_s=scale(record.server_ttft_s),
        server_e2e_s=scale(record.server_e2e_s))


def run_bench(opts: BenchOptions, progress: Any = None, say: Any = None) -> BenchOutcome:
    """Run one bench; results are written whatever happens (a crash loses nothing finished)."""
    say = say or (lambda text: print(text, file=sys.stderr))
    _check(opts)
    # Every input is validated before anything is deployed: a bad profile or thresholds file costs nothing.
    deployed = read_endpoint(opts.endpoint_name, opts.inference_component, opts.region) if opts.endpoint_name \
        else None
    profile, model = reconcile(deployed, opts.profile, opts.model, opts.instance) if deployed else \
        (str(opts.profile), str(opts.model))
    design = design_for(profile, model, deployed.instance_type if deployed else opts.instance,
                        payload=opts.payload, region=opts.region, profiles_dir=opts.profiles_dir,
                        instance_count=deployed.instance_count if deployed else None)
    thresholds = load_thresholds(opts.thresholds) if opts.thresholds else None
    baseline_path = opts.baseline or (thresholds.baseline.results if thresholds and thresholds.baseline else None)
    baseline = load_results(Path(baseline_path)) if baseline_path else None
    out = opts.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "requests.jsonl").unlink(missing_ok=True)
    shutil.rmtree(out / "cdk", ignore_errors=True)  # this run's CDK work folder: never an older run's assembly
    plan = to_plan(design)
    run = uuid.uuid4().hex[:10]
    target = choose_target(opts.target, plan, model=model, url=opts.url, api=opts.api,
                           profiles_dir=opts.profiles_dir, workdir=out / "cdk", run=run, process=this_process(),
                           time_scale=opts.time_scale, deployed=deployed, say=say)
    (out / "plan.json").write_text(plan.model_dump_json(indent=2) + "\n")

    started = datetime.now(UTC)
    levels: list[LevelResult] = []
    log = RecordLog(out / "requests.jsonl")
    error: str | None = None
    status = ExitStatus.OK
    factor = 1.0 / opts.time_scale

    def on_record(record: RequestRecord) -> None:
        log.append(_rescale(record, factor))

    lags: dict[int, float] = {}
    loop_lag_ms = getattr(target, "loop_lag_ms", lambda: None)

    def on_level(level: LevelResult) -> None:
        levels.append(level)
        lag = loop_lag_ms()
        if lag is not None:
            lags[level.concurrency] = lag

    with Interrupts(say) as interrupts:
        try:
            with interrupts.armed():
                say(f"{'deploying' if target.deploys else 'benching'} {plan.profile} ({plan.instance_type} × "
                    f"{plan.initial_instance_count}) on the {target.kind} target…")
                transport = target.deploy()
                say(f"endpoint {target.endpoint} is in service; sweeping {list(opts.concurrency)}")
                interrupts.run(run_sweep(
                    transport, concurrency=list(opts.concurrency),
                    requests_per_level=_budget(opts), duration_per_level_s=_duration(opts),
                    warmup=opts.warmup, input_tokens=design.payload.input_tokens,
                    output_tokens=design.payload.output_tokens, prompt_fn=_prompt, on_record=on_record,
                    on_progress=progress, on_level=on_level,
                    stop_rule=StopRule(max_error_rate=sweep.MAX_ERROR_RATE)))
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
        teardown = tear_down(target, opts.keep, say)
        if status == ExitStatus.OK and (failure := target_failure(levels)):
            error, status = failure, ExitStatus.TARGET_FAILED
        slo = opts.slo_ms_per_token or (thresholds.slo_ms_per_token if thresholds else None)
        environment = deployed.environment if deployed else plan.environment
        results = _results(opts, design, plan, target, levels, lags, teardown, started, status, error, factor,
                           slo, run, environment)
        if thresholds is not None:
            results = results.model_copy(update={"gate": gate(results, thresholds, baseline)})
        write_results(out / "results.json", results)
        write_report(out, results)

    if teardown.status == "failed":
        status = ExitStatus.TARGET_FAILED
        error = f"TEARDOWN FAILED: {teardown.detail}"
    elif interrupts.signum is not None and status != ExitStatus.INTERRUPTED:
        status = ExitStatus.INTERRUPTED
        error = f"interrupted by {interrupts.name} while tearing down or writing results; both finished"
    elif status == ExitStatus.OK and results.gate is not None and not results.gate.passed:
        status = ExitStatus.GATE_FAILED
    return BenchOutcome(results, status, error)


def _budget(opts: BenchOptions) -> Any:
    """Measured requests per level: as given, or a few per worker (a function of the level's concurrency)."""
    if opts.duration_per_level_s is not None:
        return None
    if opts.requests_per_level is not None:
        return opts.requests_per_level
    return lambda c: max(MIN_REQUESTS_PER_LEVEL, REQUESTS_PER_WORKER * c)


def _duration(opts: BenchOptions) -> float | None:
    """Seconds of wall time per level: the asked simulated seconds, compressed like the emulator's clock."""
    return None if opts.duration_per_level_s is None else opts.duration_per_level_s * opts.time_scale


def _prompt(tokens: int) -> str:
    from sagellm.emulator import make_prompt

    return make_prompt(tokens)


def _results(opts: BenchOptions, design: Design, plan: DeploymentPlan, target: Target, levels: list[LevelResult],
             lags: dict[int, float], teardown: Teardown, started: datetime, status: ExitStatus, error: str | None,
             factor: float, slo: float | None, run_id: str, environment: dict[str, str]) -> Results:
    shape = design.shape()
    measured = []
    for lv in levels:
        records = [_rescale(r, factor) for r in lv.records]
        if not any(not r.warmup for r in records):
            continue
        s = summary.summarize(records, window_start_s=lv.window_start_s * factor,
                              window_end_s=lv.window_end_s * factor)
        point = predict_point(shape, design.payload, lv.concurrency)
        measured.append(Level(**s.model_dump(), predicted=predicted_from(point),
                              server_loop_lag_ms=lags.get(lv.concurrency)))
    stopped = next((lv.stopped_reason for lv in levels if lv.stopped_reason), None)
    if status == ExitStatus.INTERRUPTED:
        stopped = f"interrupted after {len(levels)} level(s)"
    elif error:
        stopped = error
    run = Run(
        profile=plan.profile, model=plan.primary.model_id, instance_type=plan.instance_type,
        instance_count=plan.initial_instance_count, target=target.kind, emulated=target.emulated,  # type: ignore[arg-type]
        time_scale=opts.time_scale, region=plan.region, endpoint=target.endpoint, bench_run=run_id,
        environment=environment, input_tokens=design.payload.input_tokens,
        output_tokens=design.payload.output_tokens, concurrency=list(opts.concurrency), tool_version=__version__,
        started_at=started, ended_at=datetime.now(UTC), command=opts.command,
    )
    price = design.instance.price_per_h(plan.region)
    return make_results(run, measured, usd_per_h=sweep.usd_per_h(price, plan.initial_instance_count),
                        teardown=teardown, slo_ms_per_token=slo, stopped_reason=stopped)



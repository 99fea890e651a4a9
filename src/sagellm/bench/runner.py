"""`sagellm bench`: plan the bench → deploy the target and measure → assemble the results, with teardown on
every way out and the results written whatever happens."""

from __future__ import annotations

import math
import shutil
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sagellm.aws.cleanup import this_process
from sagellm.bench.interrupts import Interrupted, Interrupts
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.measured import levels_of, on_simulated_clock
from sagellm.bench.load.saturation import SaturationRule
from sagellm.bench.planning import BenchPlan, plan_bench, url_of
from sagellm.bench.predicted import offered, talks_of
from sagellm.bench.progress import Say, Watch
from sagellm.bench.server_metrics import ServerWatch
from sagellm.bench.specs import Bench, Closed, Http, Local, Open, Ramp, SageMaker
from sagellm.bench.sweep.choosers import make_chooser
from sagellm.bench.sweep.ramp import DEFAULT_STEP_S
from sagellm.bench.sweep.shapes import ClosedLoopSweep, Levels, LoadShape, OpenLoopSweep, RampRun
from sagellm.bench.targets.target import Target, choose_target
from sagellm.bench.targets.teardown import tear_down
from sagellm.bench.verdict import target_failure, went_silent
from sagellm.clock import Clock
from sagellm.errors import ExitStatus, SagellmError, TargetError
from sagellm.results import picks
from sagellm.results.gate import gate
from sagellm.results.picks import make_results
from sagellm.results.records import RecordLog, RequestRecord
from sagellm.results.report import write_report
from sagellm.results.schema import (
    Failure,
    Level,
    LevelSummary,
    Predicted,
    PredictedPoint,
    Results,
    Run,
    ServerMetrics,
    Teardown,
    predicted_from,
    write_results,
)
from sagellm.results.simulated import conversation_level, predicted_level, predicted_point
from sagellm.results.tracking import log_run

__all__ = ["BenchOutcome", "run"]

CURVE_REQUESTS = 200  # simulated requests per point of the drawn predicted curve


@dataclass(frozen=True)
class BenchOutcome:
    """The finished run and the exit status it earns."""

    results: Results
    exit_status: ExitStatus
    error: str | None = None


def run(bench: Bench, watch: Watch | None = None, say: Say | None = None) -> BenchOutcome:
    """Run one bench and write its results (results.json, requests.jsonl, report.md, …) to its output folder.

    A notebook or another tool runs a bench without the CLI by building the specs and calling this; the
    outcome carries the results and the exit status `sagellm bench` would end with. The target is torn down
    on every way out, Ctrl-C included, and the results are written whatever happens. For example, the
    emulated local target at 20× speed::

        from sagellm import bench
        outcome = bench.run(bench.Bench(
            serving=bench.ServingSpec(profile="max-throughput", model="llama2-7b", instance="ml.g5.2xlarge"),
            target=bench.Local(time_scale=0.05), load=bench.Closed(concurrency=(1, 4), requests_per_level=8)))
        print(outcome.exit_status, outcome.results.max_throughput)
    """
    watch = watch or Watch(say=say)
    planned = plan_bench(bench)
    for note in planned.notes:
        watch.say(note)
    out = _fresh_folder(bench.output.out)
    target = _target(planned, out, watch.say)
    if planned.plan is not None:
        (out / "plan.json").write_text(planned.plan.model_dump_json(indent=2) + "\n")
    with Interrupts(watch.say) as interrupts:
        measured = _measure(planned, target, out, watch, interrupts)
        # From here on a signal is held, not raised: the results always finish.
        watch.enter("writing results", str(out))
        results = assemble(planned, measured)
        write_results(out / "results.json", results)
        write_report(out, results)
    status, error = measured.status, measured.error
    if bench.output.mlflow:
        status, error = _log_to_mlflow(out, results, bench.output.mlflow, watch, status, error)
    if interrupts.signum is not None and status not in (ExitStatus.INTERRUPTED, ExitStatus.TARGET_FAILED):
        # A signal held while tearing down or writing: both finished; the run still ends as interrupted.
        status = ExitStatus.INTERRUPTED
        error = f"interrupted by {interrupts.name} while tearing down or writing results; both finished"
    elif status == ExitStatus.OK and results.gate is not None and not results.gate.passed:
        status = ExitStatus.GATE_FAILED
    return BenchOutcome(results, status, error)


def _log_to_mlflow(out: Path, results: Results, uri: str, watch: Watch, status: ExitStatus,
                   error: str | None) -> tuple[ExitStatus, str | None]:
    """Log the written run to MLflow; a server that cannot take it fails an otherwise clean run (exit 3), the
    results staying on disk for `sagellm report DIR --mlflow URI`."""
    watch.enter("logging to MLflow", uri)
    try:
        watch.say(f"MLflow run {log_run(out, results, uri)} at {uri}")
    except SagellmError as exc:
        if status == ExitStatus.OK:
            return exc.exit_status, f"{exc} (results in {out}; retry with sagellm report {out} --mlflow {uri})"
        watch.say(str(exc))
    return status, error


def _target(p: BenchPlan, out: Path, say: Say) -> Target:
    """The target the bench names, ready to deploy (or reach); its CDK work folder is in the output folder."""
    spec = p.bench.target
    return choose_target(spec.kind, p.plan, model=p.run.model if p.plan else p.bench.serving.model,
                         url=url_of(p.bench), api=spec.api,
                         served_model=spec.served_model if isinstance(spec, Http) else None, workdir=out / "cdk",
                         run=p.run_id, process=this_process(), clock=p.clock, deployed=p.deployed, say=say,
                         account=p.account,
                         instance_startup_s=spec.instance_startup_s if isinstance(spec, Local) else None)


def _fresh_folder(out: Path) -> Path:
    """The output folder, resolved where the bench was started (whatever folder the CDK CLI later runs in),
    without an earlier run's request log or CDK assembly."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "requests.jsonl").unlink(missing_ok=True)
    shutil.rmtree(out / "cdk", ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------ measure (deployed)

@dataclass
class Measurement:
    """What measuring left behind: the levels, how the run ended and what the target told."""

    shape: LoadShape
    levels: list[LevelResult] = field(default_factory=list)
    lags: dict[str, float] = field(default_factory=dict)  # the load generator's event-loop lag per level
    server: dict[str, ServerMetrics] = field(default_factory=dict)
    teardown: Teardown | None = None
    status: ExitStatus = ExitStatus.OK
    error: str | None = None
    stopped: str | None = None  # why the sweep ended early: the run's own failure (a failed teardown is not one)
    ended_at: datetime | None = None
    # What only the reached target tells: its endpoint, whether it is emulated, the API it spoke, the model
    # an http server serves.
    endpoint: str | None = None
    emulated: bool = False
    api: str = "tgi"
    served_model: str | None = None


class _Recorder:
    """Where a measurement's records and levels go: the request log, the progress display, the server's
    metrics per level and the load generator's loop lag."""

    def __init__(self, measurement: Measurement, out: Path, watch: Watch, target: Target, clock: Clock):
        self.measurement, self.watch, self.target, self.clock = measurement, watch, target, clock
        self.log = RecordLog(out / "requests.jsonl")
        self.servers: ServerWatch | None = None
        self._loop_lag_ms = getattr(target, "loop_lag_ms", lambda: None)
        self.heard = False  # whether the endpoint has answered any request of the run

    def record(self, record: RequestRecord) -> None:
        record = on_simulated_clock(record, self.clock, self.target.emulated)
        self.log.append(record)
        self.watch.record(record)
        if not self.heard and went_silent(record):
            # A hung endpoint, told by the first requests at the invocation limit (60 s), not after every
            # level's timeouts and a metrics flush: the level raises this, its other requests cancelled.
            raise TargetError(f"the endpoint answered none of the first requests: {record.error} (is it hung? "
                              "its logs say why)")
        self.heard = self.heard or record.ok or record.ttft_s is not None or record.status is not None

    def level(self, level: LevelResult) -> None:
        self.measurement.levels.append(level)
        self.watch.end_level()
        if self.servers is not None:
            ended = datetime.now(UTC)
            self.servers.level_done(level.load, ended - timedelta(seconds=level.ended_s - level.started_s), ended)
        lag = self._loop_lag_ms()
        if lag is not None:
            self.measurement.lags[level.load] = lag


def _measure(p: BenchPlan, target: Target, out: Path, watch: Watch, interrupts: Interrupts) -> Measurement:
    """Deploy (or reach) the target, measure, read its metrics, tear it down; every failure is kept in the
    measurement, none escapes (a bug's traceback goes to error.log)."""
    m = Measurement(_load_shape(p, target, out, watch.say))
    recorder = _Recorder(m, out, watch, target, p.clock)
    try:
        with interrupts.armed():
            _deploy_and_measure(p, target, recorder, watch, interrupts)
    except SagellmError as exc:
        m.error, m.status = str(exc), exc.exit_status
    except Interrupted:
        m.error, m.status = "interrupted: stopped measuring, tore down", ExitStatus.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug or unforeseen failure: still tear down, keep results
        (out / "error.log").write_text(traceback.format_exc())
        m.error = f"unexpected {type(exc).__name__}: {exc} (traceback in {out / 'error.log'})"
        m.status = ExitStatus.TARGET_FAILED
    # From here on a signal is held, not raised: teardown always finishes.
    recorder.log.close()
    keep = isinstance(p.bench.target, SageMaker) and p.bench.target.keep
    if target.deploys and not keep:
        watch.enter("tearing down")
    m.teardown = tear_down(target, keep)
    if m.status == ExitStatus.OK and (failure := target_failure(m.levels)):
        m.error, m.status = failure, ExitStatus.TARGET_FAILED
    m.stopped = m.error
    if m.teardown.status == "failed":
        m.status = ExitStatus.TARGET_FAILED
        m.error = f"TEARDOWN FAILED: {m.teardown.detail}"
    m.ended_at = datetime.now(UTC)
    m.endpoint, m.emulated, m.api = target.endpoint, target.emulated, target.api.name
    m.served_model = getattr(target, "served_model", None)  # an http server's model name, known once reached
    return m


def _load_shape(p: BenchPlan, target: Target, out: Path, say: Say) -> LoadShape:
    """The shape of load the bench's load spec asks for, with the chooser of its levels (and who sends it)."""
    chooser = make_chooser(p.method, p.bench.sweep, p.levels, p.shape, p.workload.payload(),
                           p.plan.initial_instance_count if p.plan else 1, clock=p.clock,
                           emulated=p.run.emulated, baseline=p.baseline)
    load, loop = p.load, p.open_loop
    if p.bench.load_by is not None:
        from sagellm.bench.aws_job import AwsJobSweep, JobClients

        assert p.account is not None and not isinstance(load, Ramp)  # plan_bench: a sagemaker target, its levels
        clients = JobClients(p.account.client("sagemaker"), p.account.client("s3"))
        return AwsJobSweep(chooser, p.bench.load_by, load, p.bench.workload, p.workload.payload(), requests=p.requests,
                           run_id=p.run_id, out=out, clients=clients, target=target, say=say)
    if isinstance(load, Ramp):
        assert loop is not None  # a ramp is open loop
        return RampRun(chooser, p.levels, load.step_s or DEFAULT_STEP_S, loop, target)
    levels = Levels(p.requests, load.duration_per_level_s, p.duration_s, load.warmup, load.repeats,
                    p.bench.workers.count, p.bench.workers.ray, load.spawn_rate if isinstance(load, Closed) else None)
    if loop is None:
        return ClosedLoopSweep(chooser, levels)
    assert isinstance(load, Open)  # a closed loop has no open loop's schedule
    return OpenLoopSweep(chooser, levels, loop, SaturationRule(max_ttft_s=load.max_ttft_s))


def _deploy_and_measure(p: BenchPlan, target: Target, recorder: _Recorder, watch: Watch,
                        interrupts: Interrupts) -> None:
    m = recorder.measurement
    if p.plan is not None:
        where = f"to the {target.kind} target" if target.deploys else f"on the {target.kind} target"
        watch.enter("deploying" if target.deploys else "reaching",
                    f"{p.plan.profile} ({p.plan.instance_type} × {p.plan.initial_instance_count}) {where}")
    transport = target.deploy()
    recorder.servers = ServerWatch(target, transport, watch.say)
    watch.enter("measuring", f"endpoint {target.endpoint}, {m.shape.describe()}")
    m.shape.run(transport, p.workload, interrupts.run, on_record=recorder.record, on_progress=watch.progress,
                on_level=recorder.level)
    watch.enter("reading server metrics")
    m.server = recorder.servers.finish()


# ------------------------------------------------------------------------------------------ assemble (pure)

def assemble(p: BenchPlan, m: Measurement) -> Results:
    """The results of a measured bench, built once from its plan and its measurement; the gate then judges
    them (it reads the results it is part of)."""
    run = _measured_run(p, m)
    slo = p.bench.gate.slo_ms_per_token or (p.thresholds.slo_ms_per_token if p.thresholds else None)
    failed = m.error is not None and m.status in (ExitStatus.TARGET_FAILED, ExitStatus.INTERRUPTED)
    assert m.teardown is not None  # _measure always tears down
    results = make_results(
        run, _levels_measured(p, m, run), usd_per_h=picks.usd_per_h(p.design.usd_per_instance_h if p.design else None,
                                                                     run.instance_count or 1),
        teardown=m.teardown, slo_ms_per_token=slo, stopped_reason=_stopped_reason(m),
        sweep=m.shape.sweep_block(p.shape, p.workload.payload()),
        ramp=m.shape.ramp_block(m.levels, run, p.design, slo),
        failure=Failure(exit_status=m.status, message=m.error or "") if failed else None)
    results = results.model_copy(update={"predicted_curve": _predicted_curve(p, results.levels)})
    if p.thresholds is None:
        return results
    return results.model_copy(update={"gate": gate(results, p.thresholds, p.baseline)})


def _predicted_curve(p: BenchPlan, levels: list[Level]) -> list[PredictedPoint]:
    """The prediction from concurrency 1 to twice the highest level measured (admitted loads only), on a grid
    fine enough to draw it as a line (closed loop with a design; empty otherwise)."""
    measured = [lv.concurrency for lv in levels if lv.concurrency is not None]
    if p.shape is None or not measured:
        return []
    assert p.plan is not None  # a design has its plan
    # The measured levels are points too, so the line reaches each one the server admits (a 15 % grid alone can
    # stop just short of an admission limit that a measured level sits on).
    grid = sorted({max(1, round(1.15 ** i)) for i in range(round(math.log(2 * max(measured), 1.15)) + 1)}
                  | set(measured))
    # A line to draw: fewer simulated requests per point than a measured level's prediction.
    talks = talks_of(p.workload)  # conversations: simulated as conversations
    points = [predicted_point(p.plan, p.shape, p.workload.payload(), c, sizes=p.workload.sizes,
                              requests=CURVE_REQUESTS, prefixes=p.workload.shared_prefixes()) if talks is None else
              conversation_level(p.plan, p.shape, p.workload.payload(), c, talks, requests=CURVE_REQUESTS)[0]
              for c in grid]
    return [PredictedPoint(concurrency=pt.concurrency, **predicted_from(pt).model_dump())
            for pt in points if not pt.rejected]


def _measured_run(p: BenchPlan, m: Measurement) -> Run:
    """The planned run with what measuring told: when it ended, the target's endpoint and API, the workers
    that sent the load and (adaptive) the levels it chose."""
    run = p.run
    update: dict[str, Any] = {"ended_at": m.ended_at, "endpoint": m.endpoint, "emulated": m.emulated,
                              "clock": "emulator" if m.emulated else "client", "served_model": m.served_model,
                              "request_slo": p.bench.gate.slo or (p.thresholds.slo if p.thresholds else None)}
    if run.workload is not None:
        update["workload"] = run.workload.model_copy(update={"api": m.api})
    if run.profile is None:
        update["model"] = m.served_model or run.model
    if m.shape.workers is not None:
        update |= {"workers": m.shape.workers, "ray": p.bench.workers.ray}
    if m.shape.chooser.measured_concurrency is not None:
        update["concurrency"] = m.shape.chooser.measured_concurrency
    return run.model_copy(update=update)


def _levels_measured(p: BenchPlan, m: Measurement, run: Run) -> list[Level]:
    """The results' levels: measured, predicted (closed loop with a design) and the server's own metrics."""
    shape, mean = p.shape, p.workload.payload()

    def predict(level: LevelSummary, records: list[RequestRecord]) -> Predicted | None:
        # Simulated requests of the same workload at the same load as the clients offered it (the emulator's
        # engine on a virtual clock); an open-loop level (or a run without a design) has no prediction.
        if shape is None or p.plan is None or level.concurrency is None:
            return None
        talks = talks_of(p.workload)  # conversations: their turns simulated as conversations at the level's users
        point, simulated = predicted_level(p.plan, shape, mean, level.concurrency, sizes=p.workload.sizes,
                                           offered=offered(records, run.simulated_clock), slo=run.request_slo,
                                           prefixes=p.workload.shared_prefixes()) \
            if talks is None else conversation_level(p.plan, shape, mean, level.concurrency, talks,
                                                     slo=run.request_slo)
        return predicted_from(point).model_copy(update={
            "same_engine": run.emulated, "slo_attainment": simulated.slo_attainment if simulated else None,
            "goodput": simulated.goodput if simulated else None})

    levels = levels_of(m.levels, clock=run.simulated_clock, emulated=run.emulated, predict=predict, lags=m.lags,
                       slo=run.request_slo)
    return [lv.model_copy(update={"server": m.server.get(lv.load)}) for lv in levels]


def _stopped_reason(m: Measurement) -> str | None:
    """Why the sweep ended before its plan was through: an interrupt, the run's failure, or the sweep's own
    reason (its budget, a failing level)."""
    if m.status == ExitStatus.INTERRUPTED:
        return f"interrupted after {len(m.levels)} level(s)"
    return m.stopped or m.shape.chooser.stopped_reason(m.levels)

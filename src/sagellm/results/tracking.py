"""A finished run logged to an MLflow tracking server: its parameters, per-level metrics (step = the level's
concurrency), the knee and max, and report, plot and results as artifacts (`--mlflow URI`)."""

from __future__ import annotations

import importlib.util
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from sagellm.errors import InputError, TargetError
from sagellm.results.schema import Level, Pick, Results

EXPERIMENT = "sagellm"  # unless MLFLOW_EXPERIMENT_NAME names another
ARTIFACTS = ("report.md", "curve.png", "ramp.png", "results.json", "results.csv", "junit.xml")
MISSING = "the MLflow client is not installed; pip install 'sagellm[mlflow]'"


REACH_TIMEOUT_S = 10.0
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # the SQLAlchemy stores MLflow reads
_SERVER = "mlflow server --backend-store-uri sqlite:///mlflow.db"
_FIX = ("give a tracking server (http://host:5000; start one with `" + _SERVER + "`), sqlite:///path/mlflow.db, "
        "databricks, or a SageMaker MLflow tracking server's ARN")


def mlflow_problems(uri: str | None, where: str) -> list[str]:
    """Why a run could not be logged to `uri`, found before the bench starts and without importing mlflow: no
    client installed, a URI MLflow does not read, a store the installed mlflow cannot use, a server that does
    not answer within REACH_TIMEOUT_S. Each line starts with `where`, what set the URI (`Output.mlflow`)."""
    if not uri:
        return []
    if importlib.util.find_spec("mlflow") is None:
        return [f"{where}: {MISSING}"]
    scheme = urllib.parse.urlsplit(uri).scheme.split("+")[0].lower()
    if uri in ("databricks", "databricks-uc") or scheme in ("databricks", "databricks-uc"):
        return []
    if scheme in ("", "file"):
        if _mlflow_major() < 3 or os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() == "true":  # its opt-out
            return []
        return [f"{where}: {uri!r} is a file store, which mlflow 3 no longer writes runs to (its filesystem "
                "backend is in maintenance mode); use sqlite:///path/mlflow.db or a tracking server (`"
                + _SERVER + "`)"]
    if scheme in ("http", "https"):
        return _unanswered(uri, where)
    if scheme in _DATABASES:
        missing = [name for name in ("sqlalchemy", "alembic") if importlib.util.find_spec(name) is None]
        return [(f"{where}: {uri!r}: a database store needs the full mlflow (pip install mlflow), not the tracking "
                "client alone; or log to a tracking server (http://host:5000)")] if missing else []
    if scheme == "arn":
        return [] if importlib.util.find_spec("sagemaker_mlflow") else [
            (f"{where}: {uri!r}: a SageMaker MLflow tracking server is reached through MLflow's plugin for it; "
            "pip install sagemaker-mlflow")]
    return [f"{where}: {uri!r} is not a tracking URI MLflow reads; {_FIX}"]


def _mlflow_major() -> int:
    """The installed mlflow's major version (mlflow, or the mlflow-skinny client), read from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    for name in ("mlflow", "mlflow-skinny"):
        try:
            return int(version(name).split(".")[0])
        except (PackageNotFoundError, ValueError):
            continue
    return 0


def _unanswered(uri: str, where: str) -> list[str]:
    """A problem when nothing answers HTTP at the tracking server `uri` within REACH_TIMEOUT_S (any HTTP status
    counts as an answer: the server is there; whether it takes the run is found out when it is logged)."""
    if not urllib.parse.urlsplit(uri).hostname:
        return [f"{where}: {uri!r} names no host; {_FIX}"]
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=REACH_TIMEOUT_S):
            return []
    except urllib.error.HTTPError:
        return []
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc or "timed out"
        return [(f"{where}: {uri}: the tracking server did not answer within {REACH_TIMEOUT_S:g} s ({reason}); "
                f"start it (e.g. `{_SERVER} --port 5000`) or correct the URI")]


def params(results: Results) -> dict[str, str]:
    """What the run was: model, instance, profile, target and workload, as MLflow parameters."""
    run = results.run
    values: dict[str, Any] = {
        "model": run.model, "profile": run.profile, "instance_type": run.instance_type,
        "instance_count": run.instance_count, "target": run.target, "emulated": run.emulated,
        "time_scale": run.time_scale, "region": run.region, "container": run.container,
        "input_tokens": run.input_tokens, "output_tokens": run.output_tokens, "repeats": run.repeats,
        "sweep": results.sweep.method if results.sweep else None, "bench_run": run.bench_run,
        "sagellm_version": run.tool_version,
    }
    if run.workload is not None:
        values |= {"workload.api": run.workload.api, "workload.seed": run.workload.seed,
                   "workload.dataset": run.workload.dataset, "workload.input_tokens": run.workload.input_tokens,
                   "workload.output_tokens": run.workload.output_tokens}
    if run.request_rate:
        values["arrivals"] = run.arrivals
    return {key: str(value) for key, value in values.items() if value is not None}


def level_metrics(level: Level) -> dict[str, float]:
    """One level's figures (and its prediction's), as MLflow metrics."""
    out: dict[str, float | None] = {
        "throughput_tokens_per_s": level.throughput_tokens_per_s, "requests_per_s": level.requests_per_s,
        "error_rate": level.error_rate}
    for name, stats in (("ms_per_token", level.latency_ms_per_token), ("ttft_ms", level.ttft_ms),
                        ("itl_ms", level.itl_ms), ("e2e_s", level.e2e_s)):
        out |= {f"{name}.p50": stats.p50, f"{name}.p90": stats.p90, f"{name}.p99": stats.p99}
    if level.request_rate is not None:
        out["request_rate"] = level.request_rate
    if level.goodput is not None:
        out |= {"slo_attainment": level.slo_attainment, "goodput.requests_per_s": level.goodput.requests_per_s,
                "goodput.tokens_per_s": level.goodput.tokens_per_s}
    if level.predicted is not None:
        p = level.predicted
        out |= {"predicted.throughput_tokens_per_s": p.throughput_tokens_per_s,
                "predicted.ms_per_token": p.ms_per_token, "predicted.ttft_ms": p.ttft_ms,
                "predicted.itl_ms": p.itl_ms, "predicted.e2e_s": p.e2e_s}
    return {key: value for key, value in out.items() if value is not None}


def _pick(name: str, pick: Pick | None) -> dict[str, float]:
    if pick is None:
        return {}
    out = {f"{name}.throughput_tokens_per_s": pick.throughput_tokens_per_s}
    if pick.ms_per_token_p50 is not None:
        out[f"{name}.ms_per_token_p50"] = pick.ms_per_token_p50
    if pick.concurrency is not None:
        out[f"{name}.concurrency"] = float(pick.concurrency)
    if pick.request_rate is not None:
        out[f"{name}.request_rate"] = pick.request_rate
    return out


def _step(level: Level, index: int) -> int:
    """The level's MLflow step: its concurrency; an open-loop level (a rate, not an integer) its position."""
    return level.concurrency if level.concurrency is not None else index


def log_run(directory: Path, results: Results, uri: str) -> str:
    """Log a finished run (results and the files beside them in `directory`) to the MLflow tracking server at
    `uri` as one MLflow run; returns its run id. TargetError when the server cannot take it."""
    if importlib.util.find_spec("mlflow") is None:
        raise InputError(f"--mlflow: {MISSING}")
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
    try:
        found = client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else client.create_experiment(name)
        run = results.run
        label = f"{run.profile or 'http'} · {run.model} · {run.instance_type or run.endpoint}"
        created = client.create_run(experiment, start_time=int(run.started_at.timestamp() * 1000), run_name=label)
        run_id = created.info.run_id
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, _step(lv, i))
                   for i, lv in enumerate(results.levels) for key, value in level_metrics(lv).items()]
        metrics += [Metric(key, value, now, 0) for key, value in
                    (_pick("knee", results.knee) | _pick("max", results.max_throughput)).items()]
        if results.cost.usd_per_1m_tokens is not None:
            metrics.append(Metric("usd_per_1m_tokens", results.cost.usd_per_1m_tokens, now, 0))
        gate = "none" if results.gate is None else "pass" if results.gate.passed else "fail"
        tags = [RunTag("sagellm.gate", gate), RunTag("sagellm.bench_run", run.bench_run or "")]
        client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in params(results).items()],
                         tags=tags)
        for artifact in ARTIFACTS:
            if (directory / artifact).exists():
                client.log_artifact(run_id, str(directory / artifact))
        failed = results.failure is not None
        client.set_terminated(run_id, status="FAILED" if failed else "FINISHED",
                              end_time=int(run.ended_at.timestamp() * 1000) if run.ended_at else None)
    except (MlflowException, OSError) as exc:
        raise TargetError(f"--mlflow: could not log the run to {uri}: {str(exc).splitlines()[0]}") from None
    return str(run_id)

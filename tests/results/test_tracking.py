"""A finished run logged to a real MLflow tracking server on loopback, read back through MlflowClient."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import free_port, sagellm, wait_for
from results_helpers import results
from sagellm.errors import InputError, TargetError
from sagellm.results import tracking
from sagellm.results.report import write_report
from sagellm.results.schema import write_results
from sagellm.results.tracking import MISSING, log_run, mlflow_problems

mlflow = pytest.importorskip("mlflow")  # the dev extra installs it; `pip install 'sagellm[mlflow]'` the client


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server` on a free loopback port, its runs and artifacts in a temporary folder; stopped after."""
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{home / 'runs.db'}", "--serve-artifacts",
         "--artifacts-destination", str(home / "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=home)
    try:
        wait_for(lambda: proc.poll() is not None or _answers(url), 120, "mlflow server", poll_s=0.5)
        assert proc.poll() is None, (home / "server.log").read_text()[-3000:]
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group: it and its workers
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def finished_run(folder: Path) -> Path:
    """A synthetic finished run written as a bench writes it (results.json and the files beside it)."""
    run = results()
    folder.mkdir(parents=True, exist_ok=True)
    write_results(folder / "results.json", run)
    write_report(folder, run)
    return folder


@pytest.mark.integration
def test_a_run_is_logged_with_params_per_level_metrics_knee_max_and_artifacts(server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    folder = finished_run(tmp_path)
    run = results()

    run_id = log_run(folder, run, server)

    client = MlflowClient(tracking_uri=server)
    logged = client.get_run(run_id)
    assert logged.info.status == "FINISHED"
    assert {k: logged.data.params[k] for k in ("model", "instance_type", "profile", "input_tokens")} == {
        "model": run.run.model, "instance_type": "ml.g5.2xlarge", "profile": "max-throughput", "input_tokens": "256"}
    history = client.get_metric_history(run_id, "throughput_tokens_per_s")
    assert sorted((m.step, m.value) for m in history) == [(lv.concurrency, lv.throughput_tokens_per_s)
                                                          for lv in run.levels]
    assert run.knee is not None and run.max_throughput is not None
    assert logged.data.metrics["knee.concurrency"] == run.knee.concurrency
    assert logged.data.metrics["max.throughput_tokens_per_s"] == run.max_throughput.throughput_tokens_per_s
    assert logged.data.tags["sagellm.gate"] == "none"
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"report.md", "curve.png", "results.json", "results.csv", "junit.xml"} <= names
    copy = Path(client.download_artifacts(run_id, "results.json", str(tmp_path / "back")))
    assert copy.read_bytes() == (folder / "results.json").read_bytes()


@pytest.mark.integration
def test_report_logs_a_finished_run_from_the_command_line(server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    folder = finished_run(tmp_path / "run")

    ran = sagellm("report", str(folder), "--mlflow", server)

    assert ran.returncode == 0, ran.stderr[-2000:]
    run_id = ran.stderr.split("MLflow run ", 1)[1].split()[0]
    assert MlflowClient(tracking_uri=server).get_run(run_id).data.params["profile"] == "max-throughput"


@pytest.mark.slow
def test_a_server_that_does_not_answer_is_one_line_and_exit_2_before_anything(tmp_path: Path) -> None:
    folder = finished_run(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"

    ran = sagellm("report", str(folder), "--mlflow", url)

    assert ran.returncode == 2, ran.stderr[-2000:]
    assert ran.stderr.splitlines() == [
        (f"sagellm: error: --mlflow: {url}: the tracking server did not answer within 10 s ([Errno 111] Connection "
        "refused); start it (e.g. `mlflow server --backend-store-uri sqlite:///mlflow.db --port 5000`) or correct "
        "the URI")]


@pytest.mark.slow
def test_a_server_that_stops_answering_before_the_log_is_a_target_error_in_one_line(tmp_path: Path) -> None:
    folder = finished_run(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5")
    try:
        with pytest.raises(TargetError, match=f"^--mlflow: could not log the run to {url}: ") as failed:
            log_run(folder, results(), url)
    finally:
        del os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]
    assert len(str(failed.value).splitlines()) == 1


@pytest.mark.slow
def test_a_server_that_accepts_but_never_answers_is_refused_within_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracking, "REACH_TIMEOUT_S", 1.0)
    with socket.socket() as silent:  # the kernel accepts the connection; nobody ever reads or replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()

        problems = mlflow_problems(url, "Output.mlflow")

    assert time.monotonic() - started < 5
    assert problems == [(f"Output.mlflow: {url}: the tracking server did not answer within 1 s (timed out); start it "
                        "(e.g. `mlflow server --backend-store-uri sqlite:///mlflow.db --port 5000`) or correct the URI")]


FIX = ("give a tracking server (http://host:5000; start one with `mlflow server --backend-store-uri "
       "sqlite:///mlflow.db`), sqlite:///path/mlflow.db, databricks, or a SageMaker MLflow tracking server's ARN")


@pytest.mark.parametrize(("uri", "line"), [
    ("localhost:5000", f"--mlflow: 'localhost:5000' is not a tracking URI MLflow reads; {FIX}"),
    ("htp://mlflow:5000", f"--mlflow: 'htp://mlflow:5000' is not a tracking URI MLflow reads; {FIX}"),
    ("http:///api", f"--mlflow: 'http:///api' names no host; {FIX}"),
    ("file:./mlruns", ("--mlflow: 'file:./mlruns' is a file store, which mlflow 3 no longer writes runs to (its "
                       "filesystem backend is in maintenance mode); use sqlite:///path/mlflow.db or a tracking "
                       "server (`mlflow server --backend-store-uri sqlite:///mlflow.db`)")),
    ("./mlruns", ("--mlflow: './mlruns' is a file store, which mlflow 3 no longer writes runs to (its filesystem "
                  "backend is in maintenance mode); use sqlite:///path/mlflow.db or a tracking server (`mlflow "
                  "server --backend-store-uri sqlite:///mlflow.db`)")),
])
@pytest.mark.slow
def test_a_bad_tracking_uri_is_exit_2_in_one_line_before_the_bench_makes_anything(
        tmp_path: Path, uri: str, line: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}

    ran = sagellm("bench", "--profile", "max-throughput", "--model", "tiiuae/falcon-7b", "--mlflow", uri,
                  "--out", str(tmp_path / "out"), env=env, cwd=tmp_path)

    assert ran.returncode == 2, ran.stderr[-2000:]
    assert ran.stderr.splitlines() == [f"sagellm: error: {line}"]
    assert list(tmp_path.iterdir()) == []  # nothing deployed, nothing written


def test_the_stores_mlflow_3_writes_to_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert mlflow_problems(f"sqlite:///{tmp_path / 'mlflow.db'}", "Output.mlflow") == []
    assert mlflow_problems("databricks", "Output.mlflow") == mlflow_problems("databricks://team", "Output.mlflow") == []
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow's own opt-out of the refusal
    assert mlflow_problems(str(tmp_path / "mlruns"), "Output.mlflow") == []


def test_a_database_store_with_the_client_alone_says_to_install_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a))

    assert mlflow_problems("sqlite:///mlflow.db", "Output.mlflow") == [
        ("Output.mlflow: 'sqlite:///mlflow.db': a database store needs the full mlflow (pip install mlflow), not the "
        "tracking client alone; or log to a tracking server (http://host:5000)")]


def test_without_the_client_installed_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))

    assert mlflow_problems("http://127.0.0.1:5000", "Output.mlflow") == [f"Output.mlflow: {MISSING}"]
    assert mlflow_problems(None, "Output.mlflow") == []
    with pytest.raises(InputError, match="pip install 'sagellm\\[mlflow\\]'"):
        log_run(Path("."), results(), "http://127.0.0.1:5000")


@pytest.mark.integration
def test_bench_logs_its_run_once_the_results_are_written(server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from bench_helpers import bench_args

    ran = sagellm(*bench_args(tmp_path / "out"), env={**os.environ, "MLFLOW_TRACKING_URI": server}, timeout=300)

    assert ran.returncode == 0, ran.stderr[-3000:]
    run_id = ran.stderr.split("MLflow run ", 1)[1].split()[0]
    client = MlflowClient(tracking_uri=server)
    assert [m.step for m in client.get_metric_history(run_id, "ms_per_token.p50")] == [1, 4]
    assert "curve.png" in {a.path for a in client.list_artifacts(run_id)}

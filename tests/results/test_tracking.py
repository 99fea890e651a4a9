"""A finished run logged to a real MLflow tracking server on loopback, read back through MlflowClient."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_helpers import free_port, sagellm, wait_for
from results_helpers import results
from sagellm.errors import InputError
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


def test_a_server_that_does_not_answer_is_one_line_and_exit_3(tmp_path: Path) -> None:
    folder = finished_run(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}

    ran = sagellm("report", str(folder), "--mlflow", url, env=env)

    assert ran.returncode == 3, ran.stderr[-2000:]
    assert "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines()[-1].startswith(f"sagellm: error: --mlflow: could not log the run to {url}")


def test_without_the_client_installed_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))

    assert mlflow_problems("http://127.0.0.1:5000") == [MISSING]
    assert mlflow_problems(None) == []
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

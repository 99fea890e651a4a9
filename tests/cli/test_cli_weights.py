"""`sagellm weights upload`: a snapshot to the local AWS's S3, and bad input as one line."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from bench_helpers import SAGELLM, finish, free_port, spawn, wait_for
from sagellm.aws.local import LocalAws

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-model"


def upload(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), "weights", "upload", *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)


def emulator_info(proc: subprocess.Popen[str], port: int) -> dict[str, object]:
    """`sagellm emulate`'s /info once it answers (the test fails with its stderr if it ended first)."""
    info: dict[str, object] = {}

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=1) as reply:
                info.update(json.load(reply))
            return True
        except OSError:
            return proc.poll() is not None  # ended: fail below with its stderr

    wait_for(answers, 60, "the emulator's /info")
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return info


@pytest.mark.slow
def test_upload_puts_the_snapshot_under_the_prefix_and_says_how_to_deploy_it(server: LocalAws) -> None:
    server.reset()
    server.client("s3").create_bucket(Bucket="models")
    result = upload(str(TINY), "s3://models/tiny/", env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the summary goes to stderr; piped, there is no bar (nor its blank line)
    assert len(result.stderr.splitlines()) == 1
    assert "uploaded 3 files" in result.stderr and "-c model_s3_uri=s3://models/tiny/" in result.stderr
    listed = server.client("s3").list_objects_v2(Bucket="models", Prefix="tiny/")["Contents"]
    assert {o["Key"] for o in listed} == {"tiny/config.json", "tiny/model.safetensors", "tiny/tokenizer_config.json"}


def test_a_folder_without_weights_is_one_line_and_exit_2(server: LocalAws, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((TINY / "config.json").read_text())
    result = upload(str(tmp_path), "s3://models/tiny/", env=server.env())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        (f"sagellm: error: {tmp_path}: no weights (*.safetensors or *.bin); give the snapshot with its weight files, "
        "not only its config")]


def test_a_target_that_is_not_a_prefix_is_one_line_and_exit_2(server: LocalAws) -> None:
    result = upload(str(TINY), "s3://models/tiny", env=server.env())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "sagellm: error: S3_URI: 's3://models/tiny' is not an S3 prefix; give s3://<bucket>/<prefix>/ (ending in '/')"]


def uploaded(server: LocalAws) -> dict[str, str]:
    """The tiny model uploaded under s3://models/tiny/ by `sagellm weights upload`; the local AWS's environment."""
    server.reset()
    server.client("s3").create_bucket(Bucket="models")
    assert upload(str(TINY), "s3://models/tiny/", env=server.env()).returncode == 0
    return server.env()


@pytest.mark.integration
def test_bench_deploys_a_model_from_its_s3_prefix_and_reads_its_config_there(server: LocalAws, tmp_path: Path) -> None:
    env = uploaded(server)
    out = tmp_path / "out"
    ran = subprocess.run([str(SAGELLM), "bench", "--profile", "max-throughput", "--model", "my-org/tiny-llama",
                          "--model-s3-uri", "s3://models/tiny/", "--instance", "ml.g5.xlarge", "--concurrency", "1",
                          "--requests-per-level", "2", "--warmup", "0", "--time-scale", "0.1", "--output-tokens", "16",
                          "--out", str(out)], capture_output=True, text=True, timeout=600, env=env, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    run = results["run"]
    # A model the catalog does not know: planned from the config.json in the prefix, served from /opt/ml/model.
    assert run["model"] == "my-org/tiny-llama" and run["environment"]["HF_MODEL_ID"] == "/opt/ml/model"
    assert "HF_TOKEN" not in run["environment"]
    assert results["levels"][0]["ok"] == 2


@pytest.mark.slow
def test_emulate_serves_a_model_planned_from_the_config_json_in_its_s3_prefix(server: LocalAws) -> None:
    env = uploaded(server)
    port = free_port()
    proc = spawn("emulate", "--profile", "max-throughput", "--model", "my-org/tiny-llama", "--model-s3-uri",
                 "s3://models/tiny/", "--instance", "ml.g5.xlarge", "--port", str(port), env=env)
    started = time.monotonic()
    try:
        info = emulator_info(proc, port)
        assert info["model_id"] == "my-org/tiny-llama"
        # The plan's limits come from the config.json staged in S3: its 2048-token context.
        assert info["max_total_tokens"] == 2048
    finally:
        proc.send_signal(signal.SIGINT)
        finish(proc, started, timeout=30)


@pytest.mark.parametrize("command", ["bench", "emulate"])
def test_a_model_s3_uri_that_is_not_a_prefix_is_one_line_and_exit_2(command: str, server: LocalAws) -> None:
    ran = subprocess.run([str(SAGELLM), command, "--profile", "max-throughput", "--model", "my-org/tiny-llama",
                          "--model-s3-uri", "s3://models/tiny"], capture_output=True, text=True, timeout=120,
                         env=server.env(), check=False)
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        ("sagellm: error: --model-s3-uri: 's3://models/tiny' is not an S3 prefix; give s3://<bucket>/<prefix>/ "
         "(ending in '/')")]


def test_an_existing_endpoint_takes_no_model_s3_uri(server: LocalAws) -> None:
    ran = subprocess.run([str(SAGELLM), "bench", "--target", "sagemaker", "--endpoint-name", "prod-chat",
                          "--model-s3-uri", "s3://models/tiny/"], capture_output=True, text=True, timeout=120,
                         env=server.env(), check=False)
    assert ran.returncode == 2
    assert "--model-s3-uri: an existing endpoint serves the weights it was deployed with" in ran.stderr


def test_bench_on_sagemaker_refuses_a_local_folder_before_anything_is_made(server: LocalAws, tmp_path: Path) -> None:
    ran = subprocess.run([str(SAGELLM), "bench", "--target", "sagemaker", "--profile", "max-throughput", "--model",
                          str(TINY), "--instance", "ml.g5.xlarge", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120, env=server.env(), check=False)
    assert ran.returncode == 2
    assert ran.stderr.splitlines() == [
        (f"sagellm: error: --model: {TINY} is a local folder, which SageMaker cannot read: upload it with `sagellm "
         f"weights upload {TINY} s3://<bucket>/<prefix>/`, then add --model-s3-uri=s3://<bucket>/<prefix>/")]
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_bench_on_the_local_target_serves_a_local_folder_without_its_weights(server: LocalAws, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ran = subprocess.run([str(SAGELLM), "bench", "--profile", "max-throughput", "--model", str(TINY), "--instance",
                          "ml.g5.xlarge", "--concurrency", "1", "--requests-per-level", "2", "--warmup", "0",
                          "--time-scale", "0.1", "--output-tokens", "16", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, env=server.env(), check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    # Planned from the folder's config.json (its 2048-token context); moto and the emulator need no weights.
    assert results["run"]["model"] == str(TINY)
    assert results["run"]["environment"]["MAX_TOTAL_TOKENS"] == "2048"
    assert results["levels"][0]["ok"] == 2


@pytest.mark.slow
def test_emulate_serves_a_local_folder_planned_from_its_config_json(server: LocalAws) -> None:
    port = free_port()
    proc = spawn("emulate", "--profile", "max-throughput", "--model", str(TINY), "--instance", "ml.g5.xlarge",
                 "--port", str(port), env=server.env())
    started = time.monotonic()
    try:
        info = emulator_info(proc, port)
        assert (info["model_id"], info["max_total_tokens"]) == (str(TINY), 2048)
    finally:
        proc.send_signal(signal.SIGINT)
        finish(proc, started, timeout=30)


def test_a_missing_bucket_is_one_line_and_exit_2(server: LocalAws) -> None:
    server.reset()
    result = upload(str(TINY), "s3://no-such-bucket/tiny/", env=server.env())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        ("sagellm: error: S3_URI: bucket 'no-such-bucket' does not exist (NoSuchBucket); create it "
         "(`aws s3 mb s3://no-such-bucket`) or give a bucket that exists")]

"""`sagellm weights upload`: a snapshot to the local AWS's S3, and bad input as one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench_helpers import SAGELLM
from sagellm.aws.local import LocalAws

TINY = Path(__file__).resolve().parent / "fixtures" / "tiny-model"


def upload(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), "weights", "upload", *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)


@pytest.mark.slow
def test_upload_puts_the_snapshot_under_the_prefix_and_says_how_to_deploy_it(server: LocalAws) -> None:
    server.reset()
    server.client("s3").create_bucket(Bucket="models")
    result = upload(str(TINY), "s3://models/tiny/", env=server.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the bar and the summary go to stderr
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

"""Weights staged in S3: the snapshot check, the upload and the model facts read back, on the local AWS."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sagellm.aws.local import LocalAws
from sagellm.aws.weights import snapshot_bytes, snapshot_files, upload_snapshot
from sagellm.catalog.s3_weights import CONTAINER_MODEL_DIR, s3_model
from sagellm.errors import InputError
from sagellm.profiles import resolve

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-model"
URI = "s3://models/tiny/v1/"


@pytest.fixture
def aws(server: LocalAws, monkeypatch: pytest.MonkeyPatch) -> LocalAws:
    """The local AWS, emptied, with a bucket; boto3 in this process points at it (as the CLI's would)."""
    server.reset()
    for key, value in server.env({}).items():
        monkeypatch.setenv(key, value)
    server.client("s3").create_bucket(Bucket="models")
    return server


def test_upload_writes_every_file_under_the_prefix_and_reports_every_byte(aws: LocalAws) -> None:
    sent: list[int] = []
    keys = upload_snapshot(TINY, URI, client=aws.client("s3"), progress=sent.append)
    listed = aws.client("s3").list_objects_v2(Bucket="models", Prefix="tiny/v1/")["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(keys) == [
        "tiny/v1/config.json", "tiny/v1/model.safetensors", "tiny/v1/tokenizer_config.json"]
    assert sum(sent) == snapshot_bytes(TINY) == sum(o["Size"] for o in listed)
    body = aws.client("s3").get_object(Bucket="models", Key="tiny/v1/config.json")["Body"].read()
    assert json.loads(body) == json.loads((TINY / "config.json").read_text())


def test_a_plan_from_s3_weights_reads_its_model_facts_from_the_uploaded_config(aws: LocalAws, tmp_path: Path) -> None:
    upload_snapshot(TINY, URI, client=aws.client("s3"))
    model = s3_model("acme/tiny-llama", URI)
    assert (model.n_layers, model.hidden_size, model.n_heads, model.n_kv_heads, model.max_context) == (22, 2048, 32, 4, 2048)
    assert 1.0 < model.params_b < 1.2  # TinyLlama-1.1B's shape
    assert not model.gated and URI in model.source

    plan = resolve("min-latency", "acme/tiny-llama", "ml.g5.xlarge", profiles_dir=tmp_path, model_s3_uri=URI)
    main = plan.primary
    assert main.model_data_s3_uri == URI
    assert main.environment["HF_MODEL_ID"] == CONTAINER_MODEL_DIR
    # What the emulator serves: the plan's own architecture, as the config.json in the prefix gave it.
    assert main.architecture is not None and main.architecture.n_layers == 22 and main.architecture.hidden_size == 2048
    assert plan.gated_models == []


def test_a_prefix_without_a_config_is_one_line_naming_the_upload_command(aws: LocalAws) -> None:
    with pytest.raises(InputError) as error:
        s3_model("acme/tiny-llama", "s3://models/empty/")
    assert error.value.messages == [
        ("model_source.s3_uri: s3://models/empty/config.json cannot be read (NoSuchKey); upload the model with "
        "`sagellm weights upload DIR s3://models/empty/`")]


def test_snapshot_check_wants_a_config_and_weights(tmp_path: Path) -> None:
    assert [p.name for p in snapshot_files(TINY)] == ["config.json", "model.safetensors", "tokenizer_config.json"]
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    shutil.copy(TINY / "config.json", only_config)
    with pytest.raises(InputError, match=r"only-config: no weights \(\*\.safetensors or \*\.bin\)"):
        snapshot_files(only_config)
    (only_config / "config.json").rename(only_config / "pytorch_model.bin")
    with pytest.raises(InputError, match="only-config: no config.json"):
        snapshot_files(only_config)
    with pytest.raises(InputError, match="missing: not a folder"):
        snapshot_files(tmp_path / "missing")


@pytest.mark.parametrize("uri", ["s3://models/tiny", "https://models/tiny/", "s3://Models/tiny/"])
def test_an_upload_target_must_be_an_s3_prefix(uri: str) -> None:
    with pytest.raises(InputError, match=r"S3_URI: .* is not an S3 prefix; give s3://<bucket>/<prefix>/"):
        upload_snapshot(TINY, uri)


def test_a_missing_bucket_is_bad_input_naming_the_bucket_and_how_to_make_it(aws: LocalAws) -> None:
    with pytest.raises(InputError) as error:
        upload_snapshot(TINY, "s3://no-such-bucket/tiny/", client=aws.client("s3"))
    assert error.value.messages == [
        ("S3_URI: bucket 'no-such-bucket' does not exist (NoSuchBucket); create it (`aws s3 mb s3://no-such-bucket`) "
        "or give a bucket that exists")]


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("AccessDenied", 403, ("S3_URI: these AWS credentials may not write to s3://models/tiny/ (AccessDenied); grant them "
                          "s3:PutObject on arn:aws:s3:::models/tiny/* or give a prefix they can write")),
    ("ExpiredToken", 400, ("S3_URI: S3 refused the AWS credentials (ExpiredToken); configure or renew them "
                          "(a profile, environment variables or an instance role) and rerun")),
])
def test_refused_access_is_bad_input_saying_what_to_grant_or_renew(code: str, status: int, expected: str) -> None:
    import boto3
    from botocore.stub import Stubber

    # Stubbed: moto does not enforce bucket policies or token expiry, and these are S3's answers to PutObject.
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    with Stubber(client) as stub:
        stub.add_client_error("put_object", code, http_status_code=status)
        with pytest.raises(InputError) as error:
            upload_snapshot(TINY, "s3://models/tiny/", client=client)
    assert error.value.messages == [expected]


def test_an_unreachable_s3_is_an_infrastructure_failure_saying_how_far_it_got() -> None:
    import boto3
    from botocore.config import Config

    from bench_helpers import free_port
    from sagellm.errors import TargetError

    closed = f"http://127.0.0.1:{free_port()}"
    client = boto3.client("s3", region_name="us-east-1", endpoint_url=closed, aws_access_key_id="k",
                          aws_secret_access_key="s", config=Config(retries={"max_attempts": 1}))
    with pytest.raises(TargetError) as error:
        upload_snapshot(TINY, "s3://models/tiny/", client=client)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"uploading {TINY}/config.json to s3://models/tiny/config.json failed (Could not connect")
    assert message.endswith("0 of 3 files were uploaded; rerun the same command (it writes every file again)")

"""Model weights staged in S3: the prefix's form, and the model facts from the config.json in it (boto3, lazily).

SageMaker copies an uncompressed `S3Prefix` ModelDataSource to /opt/ml/model before the container starts, so the
container reads the weights from disk: no Hugging Face token and no Hub egress (botocore sagemaker
service-2.json, S3ModelDataSource: an `S3Prefix` S3Uri "always ends with a forward slash").
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from sagellm.catalog.model import Model
from sagellm.errors import InputError

# s3://bucket/prefix/: an S3 bucket name (3–63 of a-z, 0-9, '.', '-') and a prefix ending in '/'.
S3_PREFIX = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>(?:[^/]+/)*)$")
S3_PREFIX_FORM = "s3://<bucket>/<prefix>/ (ending in '/')"
# Where SageMaker puts the ModelDataSource in the container; the engines' model id names it.
CONTAINER_MODEL_DIR = "/opt/ml/model"
# The prefix a message tells the user to fill in.
EXAMPLE_PREFIX = "s3://<bucket>/<prefix>/"


def split_s3_prefix(uri: str, where: str) -> tuple[str, str]:
    """`s3://bucket/a/b/` → ("bucket", "a/b/"); InputError naming `where` for anything else."""
    match = S3_PREFIX.match(uri)
    if match is None:
        raise InputError(f"{where}: {uri!r} is not an S3 prefix; give {S3_PREFIX_FORM}")
    return match["bucket"], match["prefix"]


def upload_first(folder: str, s3_option: str) -> str:
    """How a local model folder is deployed: staged in S3 first, then named by `s3_option` (e.g. `-c model_s3_uri=`).

    Not as a CDK asset: a directory asset is uploaded as a zip (aws-cdk-lib FileAssetPackaging.ZIP_DIRECTORY), and
    a ModelDataSource takes either an uncompressed prefix or a gzip-compressed TAR object (botocore sagemaker
    service-2.json, S3ModelDataSource.CompressionType: None | Gzip)."""
    return (f"{folder} is a local folder, which SageMaker cannot read: upload it with `sagellm weights upload "
            f"{folder} {EXAMPLE_PREFIX}`, then add {s3_option}{EXAMPLE_PREFIX}")


def s3_client() -> Any:
    """An S3 client from the environment's credentials and region (AWS_ENDPOINT_URL points it at a local AWS)."""
    import boto3

    return boto3.client("s3")


def s3_model(hf_id: str, uri: str, *, client: Any = None, where: str = "model_source.s3_uri") -> Model:
    """The model's facts from the config.json under the S3 prefix `uri` (weights staged there, not on the Hub)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from sagellm.catalog.hub import model_from_config

    bucket, prefix = split_s3_prefix(uri, where)
    try:
        body = (client or s3_client()).get_object(Bucket=bucket, Key=f"{prefix}config.json")["Body"].read()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise InputError(f"{where}: {uri}config.json cannot be read ({code or exc}); upload the model with "
                         "`sagellm weights upload DIR " + uri + "`") from None
    except BotoCoreError as exc:
        raise InputError(f"{where}: {uri}config.json cannot be read ({exc})") from None
    try:
        config = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: {uri}config.json is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{where}: {uri}config.json is not a config (a JSON object of the model's settings)")
    model = model_from_config(hf_id, config, where=f"{uri}config.json")
    # Weights from S3 need no token, whatever the Hub gates.
    return dataclasses.replace(model, gated=False, source=f"config.json in {uri} (parameters estimated from it)")

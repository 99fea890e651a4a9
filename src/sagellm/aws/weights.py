"""Stage a local model snapshot in S3 for `ModelDataSource` (uncompressed, under one prefix): checked, then uploaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from sagellm.catalog.s3_weights import s3_client, split_s3_prefix
from sagellm.errors import InputError, SagellmError, TargetError

WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
# S3 error codes that are the caller's to fix: the credentials, or what they may write. Anything else is S3's.
REFUSED_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                       "TokenRefreshRequired"}
NO_ACCESS = {"AccessDenied", "AllAccessDisabled", "AccountProblem"}


def snapshot_files(folder: Path) -> list[Path]:
    """Every file of a model snapshot (relative to `folder`), once it holds config.json and weights."""
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder; give the model's snapshot folder (config.json and weights)")
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    if Path("config.json") not in files:
        raise InputError(f"{folder}: no config.json; give the folder of a transformers snapshot "
                         "(save_pretrained or `hf download`)")
    if not any(p.match(pattern) for p in files for pattern in WEIGHT_PATTERNS):
        raise InputError(f"{folder}: no weights ({' or '.join(WEIGHT_PATTERNS)}); give the snapshot with its "
                         "weight files, not only its config")
    return files


def upload_snapshot(folder: Path, s3_uri: str, *, client: Any = None,
                    progress: Callable[[int], None] | None = None) -> list[str]:
    """Upload every file of the snapshot under the prefix (keys keep their paths); `progress` gets bytes sent.
    Returns the keys written."""
    bucket, prefix = split_s3_prefix(s3_uri, "S3_URI")
    files = snapshot_files(folder)
    client = client or s3_client()
    keys: list[str] = []
    for relative in files:
        key = prefix + relative.as_posix()
        try:
            # upload_file: boto3's managed transfer (multipart and parallel parts above its threshold).
            client.upload_file(str(folder / relative), bucket, key, Callback=progress)
        except (S3UploadFailedError, ClientError, BotoCoreError, OSError) as exc:
            raise upload_failed(exc, folder / relative, s3_uri, key, done=len(keys), total=len(files)) from None
        keys.append(key)
    return keys


def upload_failed(exc: Exception, path: Path, s3_uri: str, key: str, *, done: int, total: int) -> SagellmError:
    """One line for a failed upload: InputError when the bucket, the access or the credentials need fixing."""
    bucket, prefix = split_s3_prefix(s3_uri, "S3_URI")
    # boto3 wraps PutObject's ClientError in S3UploadFailedError, keeping it only as the context.
    cause = exc.__context__ if isinstance(exc, S3UploadFailedError) else exc
    code = cause.response.get("Error", {}).get("Code", "") if isinstance(cause, ClientError) else ""
    if code == "NoSuchBucket":
        return InputError(f"S3_URI: bucket {bucket!r} does not exist (NoSuchBucket); create it "
                          f"(`aws s3 mb s3://{bucket}`) or give a bucket that exists")
    if code in NO_ACCESS:
        return InputError(f"S3_URI: these AWS credentials may not write to {s3_uri} ({code}); grant them "
                          f"s3:PutObject on arn:aws:s3:::{bucket}/{prefix}* or give a prefix they can write")
    if code in REFUSED_CREDENTIALS or isinstance(cause, NoCredentialsError):
        return InputError(f"S3_URI: S3 refused the AWS credentials ({code or cause}); configure or renew them "
                          "(a profile, environment variables or an instance role) and rerun")
    if isinstance(exc, OSError):
        return InputError(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions and rerun")
    return TargetError(f"uploading {path} to s3://{bucket}/{key} failed ({cause}); {done} of {total} files "
                       "were uploaded; rerun the same command (it writes every file again)")


def snapshot_bytes(folder: Path) -> int:
    """The bytes `upload_snapshot` will send."""
    return sum((folder / p).stat().st_size for p in snapshot_files(folder))

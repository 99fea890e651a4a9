"""Stage a local model snapshot in S3 for `ModelDataSource` (uncompressed, under one prefix): checked, then uploaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagellm.catalog.s3_weights import s3_client, split_s3_prefix
from sagellm.errors import InputError

WEIGHT_PATTERNS = ("*.safetensors", "*.bin")


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
    keys = []
    for relative in files:
        key = prefix + relative.as_posix()
        # upload_file: boto3's managed transfer (multipart and parallel parts above its threshold).
        client.upload_file(str(folder / relative), bucket, key, Callback=progress)
        keys.append(key)
    return keys


def snapshot_bytes(folder: Path) -> int:
    """The bytes `upload_snapshot` will send."""
    return sum((folder / p).stat().st_size for p in snapshot_files(folder))

"""`sagellm weights upload`: stage a local model snapshot in S3, for `-c model_s3_uri=` or `model_source:`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app

weights_app = typer.Typer(help="Model weights staged in S3 (deployed with no token and no Hub).",
                          no_args_is_help=True)
app.add_typer(weights_app, name="weights")


@weights_app.command("upload", epilog="Example:\n\n"
                     "  sagellm weights upload ./Llama-3.1-8B-Instruct s3://my-models/llama-3-1-8b/")
def weights_upload(
    folder: Annotated[Path, typer.Argument(help="the snapshot folder: config.json, weights (*.safetensors or "
                                           "*.bin) and tokenizer files")],
    s3_uri: Annotated[str, typer.Argument(metavar="S3_URI", help="the prefix to write, s3://bucket/prefix/")],
) -> None:
    """Upload a local model snapshot under an S3 prefix (checked first: config.json and weights)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from sagellm.aws.weights import snapshot_bytes, upload_snapshot
    from sagellm.catalog.s3_weights import split_s3_prefix

    split_s3_prefix(s3_uri, "S3_URI")
    total = snapshot_bytes(folder)
    from rich.console import Console

    console = Console(stderr=True)
    # Off when stderr is a pipe or a CI log: a bar there is only a blank line before the result or the error.
    with Progress(TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("upload", total=total)
        keys = upload_snapshot(folder, s3_uri, progress=lambda sent: progress.advance(task, sent))
    print(f"uploaded {len(keys)} files ({total / 1e9:.2f} GB) to {s3_uri}; deploy with -c model_s3_uri={s3_uri} "
          f"or a profile's model_source: {{s3_uri: {s3_uri}}}", file=sys.stderr)

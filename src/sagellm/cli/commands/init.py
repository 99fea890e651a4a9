"""`sagellm init`: a CDK app in your folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app


@app.command("init")
def init(
    folder: Annotated[Path, typer.Argument(help="where to write the app (created if missing)")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="overwrite files that already exist")] = False,
) -> None:
    """Write a ready CDK app into FOLDER, like `cdk init`: app.py, cdk.json, requirements.txt pinning this
    sagellm, profiles/team.yaml (extends max-throughput), gates.yaml and a README.

    Then, in FOLDER: `sagellm cdk synth -c profile=max-throughput -c model=tiiuae/falcon-7b`.
    """
    from sagellm.scaffold import write_app

    for path in write_app(folder, force=force):
        print(f"wrote {path}")
    where = "" if folder.resolve() == Path.cwd() else f"cd {folder} && "
    print(f"next: {where}sagellm cdk synth -c profile=team -c model=tiiuae/falcon-7b", file=sys.stderr)

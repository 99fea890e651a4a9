"""`sagellm report`: re-render a finished run's report from its results.json."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import MLFLOW_HELP
from sagellm.errors import InputError


@app.command()
def report(
    directory: Annotated[Path, typer.Argument(help="a bench --out folder holding results.json")],
    mlflow: Annotated[str | None, typer.Option("--mlflow", help=MLFLOW_HELP)] = None,
) -> None:
    """Re-render report.md, curve.png, junit.xml and results.csv from results.json, and print the report
    (and, with --mlflow, log the finished run to an MLflow tracking server)."""
    from sagellm.render import print_report
    from sagellm.results.report import write_report
    from sagellm.results.schema import load_results
    from sagellm.results.tracking import log_run, mlflow_problems

    if problems := mlflow_problems(mlflow, "--mlflow"):
        raise InputError(problems)
    results = load_results(directory / "results.json")
    write_report(directory, results)
    print_report(directory)
    if mlflow:
        print(f"MLflow run {log_run(directory, results, mlflow)} at {mlflow}", file=sys.stderr)

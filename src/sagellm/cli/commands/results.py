"""`sagellm results schema`: the results.json format."""

from __future__ import annotations

import json

import typer

from sagellm.cli.app import app

results_app = typer.Typer(help="The results.json format.", no_args_is_help=True)
app.add_typer(results_app, name="results")


@results_app.command("schema")
def results_schema() -> None:
    """Print the JSON Schema of results.json (generated from the pydantic model the bench writes)."""
    from sagellm.results.schema import Results

    print(json.dumps(Results.model_json_schema(), indent=2))

"""The `sagellm` Typer app and the global options; commands and groups (sub-apps) register on it."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

app = typer.Typer(
    help="Deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles.\n\n"
    "Exit codes: 0 ok · 1 gate failed · 2 bad input · 3 target/infrastructure failure · 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


class PanelledCommand(TyperCommand):
    """A command whose --help lists its options under their `rich_help_panel` headings, in the order they
    first appear (the app's help is plain text, where Typer would put them all under "Options")."""

    # Any: Typer ships its own click, whose context and formatter types it does not export.
    def format_options(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for panel, records in panels.items():
            with formatter.section(panel):
                formatter.write_dl(records)


def _print_version(value: bool) -> None:
    if value:
        from sagellm import __version__

        print(f"sagellm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="print the version and exit")] = False,
          offline: Annotated[bool, typer.Option("--offline", help="read models outside the catalog from the "
                                                "Hugging Face cache only (as HF_HUB_OFFLINE=1)")] = False) -> None:
    """Deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"  # what huggingface_hub and sagellm.catalog.hub both read

"""`sagellm calibrate`: the planner corrected by measured runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import ProfilesDir


@app.command(epilog="Example:\n\n  sagellm calibrate run-42 run-43   # bench --out folders (or their results.json)")
def calibrate(
    runs: Annotated[list[Path], typer.Argument(help="bench --out folders or results.json files of measured runs")],
    profiles_dir: ProfilesDir = None,
) -> None:
    """Fit the planner's step times to measured runs; store one correction per model × instance × container.

    Writes <profiles_dir>/calibration/*.yaml (review them like code); `plan`, `profiles show` and every
    profile's auto values then use it and say so. Emulated runs are refused: they only replay the planner.
    """
    from sagellm.results.calibrate_planner import calibrate_runs

    for line in calibrate_runs(runs, profiles_dir):
        print(line)

"""The bench's options declared once: spec errors are named by the flag read from the command's own parameters."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Annotated

import typer
from typer.main import get_command

from sagellm.bench import specs
from sagellm.bench.client.trace import TraceOptions
from sagellm.bench.client.workload import WorkloadOptions
from sagellm.cli import app
from sagellm.cli.commands.bench import bench
from sagellm.cli.options import Fills, as_flags, flags_of, spec_flags

SPECS = (specs.Local, specs.SageMaker, specs.Endpoint, specs.Http, specs.ServingSpec, specs.Closed, specs.Open,
         specs.Ramp, specs.Sweep, specs.Gate, specs.Output, specs.Workers, specs.AwsBenchmarkJob, specs.Bench, WorkloadOptions,
         TraceOptions)


def toy(
    turns: Annotated[str | None, typer.Option("--turns")] = None,
    think_time: Annotated[str | None, typer.Option("--think-time"), Fills("think_time_s")] = None,
    ramp: Annotated[bool | None, typer.Option("--ramp/--no-ramp")] = None,
    window: Annotated[float, typer.Option("--span"), Fills("window_s", "step_s")] = 1.0,
    plain: int = 0,
) -> None:
    """A command with an option of each kind."""


def test_the_flags_are_read_from_the_options_keyed_by_the_field_each_fills() -> None:
    assert flags_of(toy) == {"turns": "--turns", "think_time_s": "--think-time", "ramp": "--ramp",
                             "window_s": "--span", "step_s": "--span"}


def test_every_field_a_bench_option_fills_is_a_spec_field_and_every_flag_is_the_commands() -> None:
    spec_fields = {field.name for spec in SPECS for field in fields(spec)}
    declared = [name for parameter in inspect.signature(bench, eval_str=True).parameters.values()
                for extra in getattr(parameter.annotation, "__metadata__", ()) if isinstance(extra, Fills)
                for name in extra.fields]
    assert "step_s" in declared and set(declared) <= spec_fields  # a renamed spec field fails here
    command = get_command(app).commands["bench"]  # type: ignore[attr-defined]
    assert set(spec_flags().values()) <= {flag for param in command.params for flag in param.opts}


def test_spec_fields_in_error_lines_become_the_flags_that_set_them() -> None:
    assert as_flags(["Ramp.step_s: -1 must be a positive number of seconds",
                     "Closed.concurrency: 2 levels; an AIPerf run is one level (give one)",
                     "Endpoint.name: required", "Closed.unheard_of: kept as it is"]) == [
        "--duration-per-level: -1 must be a positive number of seconds",
        "--concurrency: 2 levels; an AIPerf run is one level (give one)",
        "--endpoint-name: required", "Closed.unheard_of: kept as it is"]

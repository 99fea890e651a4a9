"""Options several commands share, and the parsers of their values (one InputError line each)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.models import OptionInfo

from sagellm.errors import InputError

PROFILES_DIR_HELP = "folder with your own profile YAML (default: ./profiles when it exists)"
REGION_HELP = "AWS region (prices, image URIs)"
INSTANCE_HELP = "instance type, e.g. ml.g5.12xlarge (default: the profile's)"
JSON_HELP = "machine-readable output on stdout"
MLFLOW_HELP = ("log the run to the MLflow tracking server at this URI (parameters, metrics per level with step = "
               "concurrency, knee and max, report/plot/results as artifacts); needs pip install 'sagellm[mlflow]'")
ALLOW_INCOMPARABLE_HELP = "compare with a baseline of another model, instance, container or workload anyway"
ProfilesDir = Annotated[Path | None, typer.Option("--profiles-dir", help=PROFILES_DIR_HELP)]


def region_option(value: str | None) -> str | None:
    """--region checked as it is parsed, before a command does anything (catalog.regions.check_region)."""
    if value is None:  # the command's own default (the AWS configuration's region)
        return None
    from sagellm.catalog.regions import check_region

    return check_region(value)


Region = Annotated[str, typer.Option("--region", help=REGION_HELP, callback=region_option)]


def engine_choice(value: str | None) -> str | None:
    """--engine checked as it is parsed: one of sagellm.engines.ENGINES (imported only when given)."""
    if value is None:
        return None
    from sagellm.engines import engine_option

    return engine_option(value)


# The registry is imported only when the flag is given, so --help stays fast: its error names the engines.
EngineOption = Annotated[str | None, typer.Option("--engine", callback=engine_choice, help="serving engine (a container "
                                            "kind: tgi, lmi, …) in place of the profile's container.kind, at its "
                                            "pinned version")]
InstanceOption = Annotated[str | None, typer.Option("--instance", help=INSTANCE_HELP)]
MODEL_S3_URI_HELP = ("the model's weights staged in S3, an uncompressed snapshot under s3://BUCKET/PREFIX/ (`sagellm "
                     "weights upload`): deployed from there with no token and no Hub, a model outside the catalog "
                     "read from its config.json there (as -c model_s3_uri)")
ModelS3Uri = Annotated[str | None, typer.Option("--model-s3-uri", help=MODEL_S3_URI_HELP)]
ModelOption = Annotated[str, typer.Option("--model", help="Hugging Face model id, e.g. meta-llama/Llama-2-7b-hf")]
InputTokens = Annotated[int | None, typer.Option("--input-tokens", help="prompt tokens per request "
                                                    "(default: the profile's payload, 256)")]
OutputTokens = Annotated[int | None, typer.Option("--output-tokens", help="generated tokens per request "
                                                     "(default: the profile's payload, 256)")]
Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
AllowIncomparable = Annotated[bool, typer.Option("--allow-incomparable", help=ALLOW_INCOMPARABLE_HELP)]
SERVED = "Model & profile"  # the --help panel of what a bench serves
INT32_MAX = 2**31 - 1  # AWS API integers (profiles.schema.INT32_MAX; kept here so --help never imports pydantic)


def payload_from(input_tokens: int | None, output_tokens: int | None):
    from sagellm.planner import Payload
    from sagellm.profiles.schema import U32_MAX

    given = {"--input-tokens": input_tokens, "--output-tokens": output_tokens}
    errors = [f"{flag}: {value} is out of range; give a number of tokens from 1 to {U32_MAX}"
              for flag, value in given.items() if value is not None and not 1 <= value <= U32_MAX]
    if errors:
        raise InputError(errors)
    if input_tokens is None and output_tokens is None:
        return None
    return Payload(input_tokens or 256, output_tokens or 256)


def _levels(text: str, option: str, parse: type[int | float], how: str) -> tuple:
    """A comma-separated list of positive levels, each once; InputError repeating the bad part otherwise."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise InputError(f"{option}: {text!r} has no level; {how}")
    if "" in parts:
        raise InputError(f"{option}: {text!r} has an empty level between commas; {how}")
    values = []
    for part in parts:
        try:
            values.append(parse(part))
        except ValueError:
            kind = "a whole number" if parse is int else "a number"
            raise InputError(f"{option}: {text!r}: {part!r} is not {kind}; {how}") from None
    if not all(0 < v < float("inf") for v in values):
        raise InputError(f"{option}: {text!r}: {min(values, key=lambda v: v > 0)} is not a level; {how}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise InputError(f"{option}: {text!r}: {twice[0]:g} is given twice; list each level once")
    return tuple(values)


def rate_levels(text: str | None) -> tuple[float, ...]:
    return () if text is None else _levels(text, "--request-rate", float,
                                              "give rates > 0 (requests/s) separated by commas, e.g. 0.5,1,2")


def speed_levels(text: str | None) -> tuple[float, ...]:
    return (1.0,) if text is None else _levels(text, "--trace-speed", float,
                                               "give speed factors > 0 separated by commas, e.g. 1,2,4")


def worker_count(text: str) -> int | None:
    """`auto` (None) or a whole number ≥ 1."""
    if text.strip() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"--workers: {text!r} must be auto or a whole number ≥ 1 (e.g. --workers 4)")
    return value


def concurrency_levels(text: str) -> tuple[int, ...]:
    return _levels(text, "--concurrency", int, "give levels ≥ 1 separated by commas, e.g. 1,2,4,8")


class Fills:
    """Beside a bench option whose parameter is named otherwise: the spec field(s) its value sets."""

    def __init__(self, *fields: str) -> None:
        self.fields = fields


def flags_of(command: Callable[..., Any]) -> dict[str, str]:
    """Spec field → the flag that sets it, read from a Typer command's own options: each is declared once, on
    its parameter (named as the field, or with a Fills beside it), as httpie declares its options once in
    httpie/cli/definition.py for both its parser and its docs."""
    flags: dict[str, str] = {}
    for name, parameter in inspect.signature(command, eval_str=True).parameters.items():
        extras = getattr(parameter.annotation, "__metadata__", ())
        option = next((extra for extra in extras if isinstance(extra, OptionInfo)), None)
        if option is not None:  # in Annotated, Typer keeps the first flag as the option's `default`
            fields = next((extra.fields for extra in extras if isinstance(extra, Fills)), (name,))
            flags.update(dict.fromkeys(fields, str(option.default).split("/")[0]))  # --ramp/--no-ramp: --ramp
    return flags


@cache
def spec_flags() -> dict[str, str]:
    """The bench command's flags by the spec field each sets (plan and workload share its flags' names), read from
    the app it registered on (importing sagellm.cli registers every command; the commands stay independent)."""
    from sagellm.cli.app import app

    [bench] = [command.callback for command in app.registered_commands
               if command.callback is not None and (command.name or command.callback.__name__) == "bench"]
    return flags_of(bench)


# Spec errors name the field (`Closed.warmup: -1 must be 0 or more`), a CLI user sees the flag (`--warmup: -1
# must be 0 or more`).
SPEC_FIELD = re.compile(r"\b(?:Local|SageMaker|Endpoint|Http|ServingSpec|Closed|Open|Ramp|Output|Sweep|Workers"
                        r"|WorkloadOptions|AwsBenchmarkJob|Bench|TraceOptions)\.([a-z][a-z0-9_]*)\b")


def as_flags(messages: list[str]) -> list[str]:
    """Error lines with each spec field the CLI sets named by its flag."""
    return [SPEC_FIELD.sub(lambda field: spec_flags().get(field[1], field[0]), line) for line in messages]


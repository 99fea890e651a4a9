"""Render the CLI reference and the results schema from the code, at every docs build (mkdocs-gen-files)."""

import json
from collections.abc import Iterator
from typing import Any

import mkdocs_gen_files
import typer
from typer.testing import CliRunner

from sagellm.cli import app
from sagellm.results.schema import Results

HELP_WIDTH = 100  # wide enough that option tables do not wrap mid-word, narrow enough for the page


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of the CLI, groups before their subcommands, in the order `--help` lists them."""
    yield path
    # Typer vendors its own click, so a group is recognised by its subcommands, not by click.Group.
    for name, subcommand in getattr(command, "commands", {}).items():
        yield from commands(subcommand, (*path, name))


def help_text(path: tuple[str, ...]) -> str:
    """What `sagellm … --help` prints, exactly as a user sees it."""
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="sagellm", terminal_width=HELP_WIDTH,
                                env={"COLUMNS": str(HELP_WIDTH), "TERMINAL_WIDTH": str(HELP_WIDTH),
                                     "NO_COLOR": "1", "TERM": "dumb"})
    if result.exit_code != 0:
        raise RuntimeError(f"sagellm {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    # Rich pads every line to the full width (help panels); the padding is noise in a code block.
    return "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")


def cli_page() -> str:
    """One section per command, each holding its `--help`."""
    lines = ["# CLI reference", "",
             ("Generated from the command-line app at every docs build: each section is what "
             "`sagellm … --help` prints. Exit codes: [Gate](../gate.md#exit-codes)."), ""]
    for path in commands(typer.main.get_command(app)):
        lines += [f"## `{' '.join(('sagellm', *path))}`", "", "```text", help_text(path), "```", ""]
    return "\n".join(lines)


def type_of(field: dict[str, Any]) -> str:
    """A field's JSON Schema type in a few words: `integer | null`, `array of Level`, `Run`."""
    if "$ref" in field:
        name = field["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in field:
        return " | ".join(type_of(option) for option in field["anyOf"])
    if "enum" in field:
        return " | ".join(f'"{value}"' for value in field["enum"])
    if "const" in field:
        return json.dumps(field["const"])
    kind = field.get("type", "any")
    if kind == "array":
        return f"array of {type_of(field.get('items', {}))}"
    if kind == "object" and "additionalProperties" in field:
        return f"object of {type_of(field['additionalProperties'])}"
    return str(kind)


def fields_table(model: dict[str, Any]) -> list[str]:
    """A table of one model's fields: name, type, whether required, default."""
    required = set(model.get("required", []))
    rows = ["| field | type | required | default |", "|---|---|---|---|"]
    for name, field in model.get("properties", {}).items():
        kind = type_of(field).replace("|", "\\|")
        default = f"`{json.dumps(field['default'])}`" if "default" in field else ""
        rows.append(f"| `{name}` | {kind} | {'yes' if name in required else ''} | {default} |")
    return rows


def schema_page() -> str:
    """The results.json JSON Schema: one table per model, then the schema itself."""
    schema = Results.model_json_schema()
    lines = ["# Results schema", "",
             ("Generated from the pydantic model the bench writes, at every docs build; "
             "`sagellm results schema` prints the same JSON Schema. What the fields mean: [Results](../results.md)."),
             "", f"## {schema.get('title', 'Results')}", "", *fields_table(schema), ""]
    for name, model in sorted(schema.get("$defs", {}).items()):
        if "properties" in model:
            lines += [f"## {name}", "", *fields_table(model), ""]
    lines += ["## JSON Schema", "", "```json", json.dumps(schema, indent=2), "```", ""]
    return "\n".join(lines)


with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(cli_page())
with mkdocs_gen_files.open("reference/results-schema.md", "w") as page:
    page.write(schema_page())

"""`sagellm profiles list|show|validate|schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import (
    EngineOption,
    InputTokens,
    InstanceOption,
    Json,
    ModelOption,
    OutputTokens,
    ProfilesDir,
    Region,
    payload_from,
)
from sagellm.errors import InputError

profiles_app = typer.Typer(help="List, show, validate, import profiles and print their JSON Schema.",
                           no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def profiles_list(profiles_dir: ProfilesDir = None, json_out: Json = False) -> None:
    """List the standard profiles and your own (./profiles or --profiles-dir)."""
    from sagellm.profiles.loader import all_sources

    sources = all_sources(profiles_dir)
    rows = [{"name": n, "file": s.path, "extends": s.data.get("extends"), "description": s.data.get("description", ""),
             **({"error": s.problem} if s.problem else {})} for n, s in sources.items()]
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        ext = f" (extends {r['extends']})" if r["extends"] else ""
        text = f"unusable: {r['error']}" if "error" in r else f"{r['description']}{ext}"
        print(f"{r['name']:<20} {text}\n{'':<20} {r['file']}")


@profiles_app.command("show")
def profiles_show(
    profile: Annotated[str, typer.Argument(help="profile name, e.g. max-throughput")],
    model: ModelOption,
    instance: InstanceOption = None,
    engine: EngineOption = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> None:
    """Print the resolved DeploymentPlan: environment, instance, count, kind, copies, scaling."""
    from sagellm.planner import step_time_notes
    from sagellm.profiles import design_for

    design = design_for(profile, model, instance, payload=payload_from(input_tokens, output_tokens), region=region,
                        profiles_dir=profiles_dir, engine=engine)
    plan = design.plan()
    if json_out:
        print(plan.model_dump_json(indent=2))
        return
    from sagellm.render import print_plan

    print_plan(plan, (*design.notes, *step_time_notes(design.shape())))


@profiles_app.command("validate")
def profiles_validate(
    files: Annotated[list[Path] | None, typer.Argument(help="profile YAML files, or a models.yaml (default: every "
                                                       "profile and the folder's models.yaml)")] = None,
    profiles_dir: ProfilesDir = None,
) -> None:
    """Run every check `show`, `plan`, `bench` and `cdk synth` run on a profile, without a model or a deploy."""
    from sagellm.profiles.loader import all_sources, duplicate_name, local_models, read_file
    from sagellm.profiles.validate import validate_profile

    sources = all_sources(profiles_dir)
    errors: list[str] = []
    names = list(sources) if files is None else []
    model_folders = [profiles_dir or Path("profiles")] if files is None else []
    for f in files or []:
        if f.name == "models.yaml":
            model_folders.append(f.parent)
            continue
        try:
            src = read_file(f)
        except InputError as exc:
            errors.extend(exc.messages)
            continue
        name = str(src.data.get("name", f.stem))
        if name in names:
            errors.append(duplicate_name(src, sources[name], name))
            continue
        sources[name] = src
        names.append(name)
    for folder in model_folders:
        try:
            local_models(folder)
        except InputError as exc:
            errors.extend(exc.messages)
    for name in names:
        errors.extend(validate_profile(name, sources))
    if errors:
        raise InputError(errors)
    print(f"{len(names)} profile(s) valid: {', '.join(names)}")


@profiles_app.command("schema")
def profiles_schema() -> None:
    """Print the profile JSON Schema (point your editor's YAML plugin at it)."""
    from sagellm.profiles.schema import Profile

    print(json.dumps(Profile.model_json_schema(), indent=2))


@profiles_app.command("import")
def profiles_import(
    file: Annotated[Path, typer.Argument(help="a DescribeAIRecommendationJob response, as JSON (`aws sagemaker "
                                         "describe-ai-recommendation-job` writes one)")],
    name: Annotated[str, typer.Option("--name", help="the profile's name (and file name)")],
    recommendation: Annotated[int, typer.Option("--recommendation", help="which of the job's recommendations "
                                                "(1 = its first)")] = 1,
    profiles_dir: ProfilesDir = None,
) -> None:
    """Write a SageMaker AI recommendation's DeploymentConfiguration as a profile in the profiles folder, checked by
    every check `profiles validate` runs (docs/aws-ai-jobs.md says what maps)."""
    from sagellm.profiles.imported import write_imported

    try:
        response = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{file}: cannot be read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{file}: not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(response, dict):
        raise InputError(f"{file}: not a DescribeAIRecommendationJob response (a JSON object)")
    path, model = write_imported(response, recommendation, name, profiles_dir or Path("profiles"))
    print(f"wrote {path}")
    print(f"deploy: cdk deploy -c profile={name} -c model={model or '<the model>'} -c profiles_dir={path.parent}")


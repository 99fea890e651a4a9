"""The `sagellm` command: thin commands that parse, call the library, render. Heavy imports stay lazy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.errors import ExitStatus, InputError, SagellmError

app = typer.Typer(
    help="Deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles.\n\n"
    "Exit codes: 0 ok · 1 gate failed · 2 bad input · 3 target/infrastructure failure · 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="List, show, validate profiles and print their JSON Schema.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")

ProfilesDir = Annotated[Path | None, typer.Option("--profiles-dir", help="folder with your own profile YAML "
                                                     "(default: ./profiles when it exists)")]
Region = Annotated[str, typer.Option("--region", help="AWS region (prices, image URIs)")]
Instance = Annotated[str | None, typer.Option("--instance", help="instance type, e.g. ml.g5.12xlarge "
                                                 "(default: the profile's)")]
Model = Annotated[str, typer.Option("--model", help="Hugging Face model id, e.g. meta-llama/Llama-2-7b-hf")]
InputTokens = Annotated[int | None, typer.Option("--input-tokens", help="prompt tokens per request "
                                                    "(default: the profile's payload, 256)")]
OutputTokens = Annotated[int | None, typer.Option("--output-tokens", help="generated tokens per request "
                                                     "(default: the profile's payload, 256)")]
Json = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]


def _payload(input_tokens: int | None, output_tokens: int | None):
    from sagellm.planner import Payload

    if input_tokens is None and output_tokens is None:
        return None
    if (input_tokens is not None and input_tokens < 1) or (output_tokens is not None and output_tokens < 1):
        raise InputError("--input-tokens/--output-tokens: must be at least 1")
    return Payload(input_tokens or 256, output_tokens or 256)


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--concurrency: {text!r} is not a comma-separated list of integers (e.g. 1,2,4,8)") from None
    if not values or min(values) < 1:
        raise InputError(f"--concurrency: {text!r}: give at least one level, each ≥ 1")
    return values


# ---------------------------------------------------------------- profiles

@profiles_app.command("list")
def profiles_list(profiles_dir: ProfilesDir = None, json_out: Json = False) -> None:
    """List the standard profiles and your own (./profiles or --profiles-dir)."""
    from sagellm.profiles.loader import all_sources

    sources = all_sources(profiles_dir)
    rows = [{"name": n, "file": s.path, "extends": s.data.get("extends"), "description": s.data.get("description", "")}
            for n, s in sources.items()]
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        ext = f" (extends {r['extends']})" if r["extends"] else ""
        print(f"{r['name']:<20} {r['description']}{ext}\n{'':<20} {r['file']}")


@profiles_app.command("show")
def profiles_show(
    profile: Annotated[str, typer.Argument(help="profile name, e.g. max-throughput")],
    model: Model,
    instance: Instance = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> None:
    """Print the resolved DeploymentPlan: environment, instance, count, kind, copies, scaling."""
    from sagellm.profiles import resolve

    plan = resolve(profile, model, instance, payload=_payload(input_tokens, output_tokens), region=region,
                   profiles_dir=profiles_dir)
    if json_out:
        print(plan.model_dump_json(indent=2))
        return
    from sagellm.render import print_plan

    print_plan(plan)


@profiles_app.command("validate")
def profiles_validate(
    files: Annotated[list[Path] | None, typer.Argument(help="profile YAML files (default: every profile)")] = None,
    profiles_dir: ProfilesDir = None,
) -> None:
    """Check profile files: schema, unknown keys (with line), extends chains, secrets."""
    from sagellm.profiles.loader import all_sources, load_profile, read_source
    from sagellm.profiles.resolve import static_errors

    sources = all_sources(profiles_dir)
    names = list(sources)
    if files:
        names = []
        for f in files:
            if not f.is_file():
                raise InputError(f"{f}: no such file")
            src = read_source(str(f), f.read_text())
            name = str(src.data.get("name", f.stem))
            sources[name] = src
            names.append(name)
    errors: list[str] = []
    for name in names:
        try:
            errors.extend(static_errors(load_profile(name, sources), sources))
        except InputError as exc:
            errors.extend(exc.messages)
    if errors:
        raise InputError(errors)
    print(f"{len(names)} profile(s) valid: {', '.join(names)}")


@profiles_app.command("schema")
def profiles_schema() -> None:
    """Print the profile JSON Schema (point your editor's YAML plugin at it)."""
    from sagellm.profiles.schema import Profile

    print(json.dumps(Profile.model_json_schema(), indent=2))


# ---------------------------------------------------------------- plan

@app.command(epilog="Examples:\n\n"
             "  sagellm plan --profile max-throughput --model meta-llama/Llama-2-7b-hf --instance ml.g5.2xlarge\n\n"
             "  sagellm plan --profile replicas --model llama2-13b --instance ml.p4d.24xlarge --tensor-parallel 1\n\n"
             "  sagellm plan --profile min-latency --model llama2-70b --instance ml.p4d.24xlarge --input-tokens 2048 --json")
def plan(
    profile: Annotated[str, typer.Option("--profile", help="profile name")],
    model: Model,
    instance: Instance = None,
    tensor_parallel: Annotated[int | None, typer.Option("--tensor-parallel", min=1,
                                                           help="GPUs per copy (overrides the profile)")] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=1, help="copies per instance "
                                                    "(inference components)")] = None,
    instance_count: Annotated[int | None, typer.Option("--instance-count", min=1,
                                                          help="instances behind the endpoint")] = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    concurrency: Annotated[str, typer.Option("--concurrency", help="endpoint-wide levels")] =
    "1,2,4,8,16,32,64,128,256,512",
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> None:
    """Predict the latency–throughput curve of a profile before paying for a GPU hour.

    Per concurrency: ms/token (e2e ÷ output tokens, the published definition), TTFT, ITL, e2e, tokens/s,
    and whether requests would exceed the 60 s invocation timeout; plus KV capacity, the knee
    (max throughput ÷ latency), the max-throughput point inside the timeout and $/1M tokens.

    --json prints {"shape": {...}, "environment": {...}, "curve": {"points": [...], "knee", "max_throughput",
    "kv_capacity_tokens_per_copy", "max_sequences_per_copy", "usd_per_h", "usd_per_1m_tokens_at_max_throughput"}}.
    """
    from sagellm.planner import predict
    from sagellm.profiles.resolve import design_for, environment

    levels = _concurrency(concurrency)
    d = design_for(profile, model, instance, payload=_payload(input_tokens, output_tokens), region=region,
                   profiles_dir=profiles_dir, tensor_parallel=tensor_parallel, copies=replicas,
                   instance_count=instance_count)
    curve = predict(d.shape(), d.payload, levels, region)
    main = d.copies[0]
    shape = {"profile": d.profile.name, "model": main.model.hf_id, "instance_type": d.instance.instance_type,
             "tensor_parallel": main.tp, "copies_per_instance": main.copies, "instance_count": d.instance_count,
             "quantization": main.quantization}
    env = environment(main, d.profile.container, d.profile, d.instance.is_neuron)
    if json_out:
        print(json.dumps({"shape": shape, "environment": env, "curve": curve.to_dict()}, indent=2))
        return
    from sagellm.render import print_curve

    print_curve(shape, env, curve)


# ---------------------------------------------------------------- bench, gate, report

@app.command(epilog="Examples:\n\n"
             "  sagellm bench --profile max-throughput --model meta-llama/Llama-2-7b-hf --instance ml.g5.2xlarge "
             "--time-scale 0.1   # local, emulated\n\n"
             "  sagellm bench --profile replicas --model llama2-13b --instance ml.p4d.24xlarge --target sagemaker "
             "--thresholds gates.yaml --out run-42   # real account, gated\n\n"
             "  sagellm bench --target sagemaker --endpoint-name prod-chat --thresholds gates.yaml "
             "  # an existing endpoint, nothing deployed\n\n"
             "  sagellm bench --profile max-throughput --model llama2-7b --target http --url http://localhost:8080 "
             "# an existing TGI")
def bench(
    profile: Annotated[str | None, typer.Option("--profile", help="profile name (with --endpoint-name: "
                                                "default the endpoint's sagellm:profile tag)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Hugging Face model id, e.g. "
                                              "meta-llama/Llama-2-7b-hf (with --endpoint-name: default the "
                                              "deployed one)")] = None,
    instance: Instance = None,
    target: Annotated[str, typer.Option("--target", help="local: embedded AWS (moto) + emulator · sagemaker: "
                                        "your AWS account (credentials from the environment) · http: an "
                                        "existing TGI/OpenAI-compatible server at --url")] = "local",
    endpoint_name: Annotated[str | None, typer.Option("--endpoint-name", help="sagemaker target: bench this "
                                                      "existing endpoint; nothing is deployed or deleted")] = None,
    inference_component: Annotated[str | None, typer.Option("--inference-component", help="with "
                                   "--endpoint-name: the component to invoke (default: its only one)")] = None,
    url: Annotated[str | None, typer.Option("--url", help="server URL for --target http")] = None,
    api: Annotated[str, typer.Option("--api", help="http target protocol: tgi, openai or auto "
                                     "(openai when the URL has /v1)")] = "auto",
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    concurrency: Annotated[str, typer.Option("--concurrency", help="levels, in order; escalation stops at "
                                             ">5% errors or a timeout")] = "1,2,4,8,16,32,64,128,256,512",
    requests_per_level: Annotated[int | None, typer.Option("--requests-per-level", min=1, help="measured "
                                  "requests per level (default: 3 × concurrency, at least 8)")] = None,
    duration_per_level: Annotated[float | None, typer.Option("--duration-per-level", help="seconds per "
                                  "level instead of a request count")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="warm-up requests per worker per level, "
                                        "excluded from the statistics")] = 1,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="YAML rules to gate on "
                                                       "(see README)")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="results.json of an earlier run to "
                                                     "compare against")] = None,
    out: Annotated[Path, typer.Option("--out", help="folder for results.json, requests.jsonl, report.md, "
                                      "curve.png, junit.xml")] = Path("sagellm-results"),
    keep: Annotated[bool, typer.Option("--keep", help="do not destroy the stack (sagemaker target)")] = False,
    time_scale: Annotated[float, typer.Option("--time-scale", help="local emulator only: run simulated time "
                                              "this much faster (0.1 = 10×); results are in simulated "
                                              "time")] = 1.0,
    slo: Annotated[float | None, typer.Option("--slo-ms-per-token", help="also report the highest "
                                                 "throughput with p50 ms/token under this")] = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> int:
    """Deploy a profile, sweep concurrency closed-loop, report, gate, and always tear down.

    The sagemaker target deploys the bench's own stack (tagged sagellm:bench-run) and deletes exactly that
    stack, or benches an existing endpoint (--endpoint-name) without deploying or deleting anything.
    Relative paths resolve against the current folder; nothing else is read from it.

    Exit 0 when every threshold holds, 1 when one fails, 2 on bad input (nothing deployed),
    3 when the target or its teardown failed, 130 after teardown when interrupted (Ctrl-C, SIGTERM).
    """
    from sagellm.bench.runner import BenchOptions, run_bench
    from sagellm.render import bench_progress, print_report

    opts = BenchOptions(
        profile=profile, model=model, instance=instance, target=target, endpoint_name=endpoint_name,
        inference_component=inference_component, url=url, api=api,
        payload=_payload(input_tokens, output_tokens), concurrency=_concurrency(concurrency),
        requests_per_level=requests_per_level, duration_per_level_s=duration_per_level, warmup=warmup,
        thresholds=thresholds, baseline=baseline, out=out, keep=keep, region=region, profiles_dir=profiles_dir,
        time_scale=time_scale, slo_ms_per_token=slo, command=" ".join(["sagellm", *sys.argv[1:]]),
    )
    with bench_progress() as (progress, say):
        outcome = run_bench(opts, progress, say)
    if json_out:
        print(outcome.results.model_dump_json(indent=2))
    else:
        print_report(out)
    if outcome.error:
        print(f"sagellm: error: {outcome.error}", file=sys.stderr)
    return int(outcome.exit_status)


@app.command()
def gate(
    results: Annotated[Path, typer.Argument(help="results.json of a finished run")],
    thresholds: Annotated[Path, typer.Option("--thresholds", help="YAML rules")],
    baseline: Annotated[Path | None, typer.Option("--baseline", help="results.json to compare against")] = None,
    json_out: Json = False,
) -> int:
    """Evaluate thresholds on a finished run: exit 0 pass, 1 fail (every violation printed), 2 bad thresholds."""
    from sagellm.results.gate import gate as evaluate
    from sagellm.results.gate import load_thresholds
    from sagellm.results.report import write_report
    from sagellm.results.schema import load_results, write_results

    run = load_results(results)
    rules = load_thresholds(thresholds)
    base_path = baseline or (rules.baseline.results if rules.baseline else None)
    verdict = evaluate(run, rules, load_results(base_path) if base_path else None)
    updated = run.model_copy(update={"gate": verdict})
    write_results(results, updated)
    write_report(results.parent, updated)
    if json_out:
        print(verdict.model_dump_json(indent=2))
    else:
        for v in verdict.violations:
            print(f"FAIL {v.rule}: {v.message}")
        print(f"{'PASS' if verdict.passed else 'FAIL'}: {len(verdict.rules)} rule(s), "
              f"{len(verdict.violations)} violation(s)")
    return int(ExitStatus.OK if verdict.passed else ExitStatus.GATE_FAILED)


@app.command()
def report(
    directory: Annotated[Path, typer.Argument(help="a bench --out folder holding results.json")],
) -> None:
    """Re-render report.md, curve.png and junit.xml from results.json, and print the report."""
    from sagellm.render import print_report
    from sagellm.results.report import write_report
    from sagellm.results.schema import load_results

    write_report(directory, load_results(directory / "results.json"))
    print_report(directory)


@app.command()
def emulate(
    profile: Annotated[str, typer.Option("--profile", help="profile name")],
    model: Model,
    instance: Instance = None,
    port: Annotated[int, typer.Option("--port", help="loopback port")] = 8080,
    time_scale: Annotated[float, typer.Option("--time-scale", help="run simulated time faster (0.1 = 10×)")] = 1.0,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
) -> None:
    """Serve an emulated endpoint for a profile on 127.0.0.1 (foreground, Ctrl-C to stop).

    Speaks the SageMaker runtime (/endpoints/NAME/invocations[-response-stream]), TGI (/generate,
    /generate_stream, /info, /health) and OpenAI (/v1/completions), so any load tool can be pointed at it.
    Prompt tokens are counted as whitespace-separated words. Results from it are emulated, not measured.
    """
    from sagellm.emulator import run_emulator
    from sagellm.profiles import resolve

    if not 0 < time_scale <= 1:
        raise InputError(f"--time-scale: {time_scale} must be in (0, 1]")
    plan = resolve(profile, model, instance, payload=_payload(input_tokens, output_tokens), region=region,
                   profiles_dir=profiles_dir)
    print(f"emulating {plan.profile}: {plan.primary.model_id} on {plan.instance_type} at http://127.0.0.1:{port} "
          f"(time scale {time_scale:g}); Ctrl-C to stop", file=sys.stderr)
    run_emulator(plan, port=port, time_scale=time_scale)


@app.command(epilog="Examples:\n\n"
             "  sagellm cleanup --dry-run               # list bench stacks and what would be deleted\n\n"
             "  sagellm cleanup --older-than 6h --yes   # in a scheduled job: delete without asking")
def cleanup(
    older_than: Annotated[str, typer.Option("--older-than", help="only stacks older than this: 30m, 2h, 1d")]
    = "1h",
    region: Region = "us-east-1",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, do not delete")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="delete without asking")] = False,
) -> None:
    """Delete the stacks bench runs left behind (a killed bench, --keep): whole stacks, through CloudFormation.

    Only stacks tagged sagellm:bench-run (set by `sagellm bench` alone) are considered; stacks deployed with
    `cdk deploy` or a team's own LlmEndpoint are never touched. A bench stack is kept while its bench still
    runs on this machine or while it is younger than --older-than. Shows what it will delete and asks first.
    """
    import boto3

    from sagellm.aws.cleanup import delete_leftovers, find_leftovers
    from sagellm.errors import TargetError

    seconds = _duration(older_than)
    session = boto3.Session(region_name=region)
    survey = find_leftovers(session, seconds)
    for stack, reason in survey.kept:
        print(f"keep    {stack}: {reason}")
    for line in survey.unreadable:
        print(f"skip    {line} (could not read it)")
    for stack in survey.leftovers:
        print(f"delete  {stack}")
    if not survey.leftovers:
        print(f"no bench stacks older than {older_than} to delete in {region}")
    elif not dry_run:
        if not yes:
            if not sys.stdin.isatty():
                raise InputError(f"--yes: {len(survey.leftovers)} stack(s) to delete and no terminal to ask; "
                                 "pass --yes to delete them")
            if not typer.confirm(f"Delete {len(survey.leftovers)} stack(s) and everything in them?"):
                print("nothing deleted")
                return
        failures = delete_leftovers(session, survey.leftovers)
        if failures:
            raise TargetError(f"could not delete: {'; '.join(failures)}")
        print(f"deleted {len(survey.leftovers)} stack(s)")
    if survey.unreadable:
        raise TargetError(f"could not read {len(survey.unreadable)} listed stack(s); they were skipped")


@app.command("local-aws")
def local_aws(
    port: Annotated[int, typer.Option("--port", help="loopback port")] = 4566,
    region: Region = "us-east-1",
) -> None:
    """Serve sagellm's local AWS on 127.0.0.1 (foreground, Ctrl-C to stop): moto extended for SageMaker
    inference components, autoscaling and rollbacks, already CDK-bootstrapped.

    Point `sagellm bench --target sagemaker`, `cdk deploy` and `sagellm cleanup` at it with
    AWS_ENDPOINT_URL=http://localhost:PORT and any credentials; point the runtime
    (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME) at `sagellm emulate`. Its state lives as long as the command.
    """
    from sagellm.aws.local import serve

    serve(port, region, say=lambda text: print(text, file=sys.stderr))


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError, IndexError):
        raise InputError(f"--older-than: {text!r} must be a number with s, m, h or d (e.g. 2h)") from None


def main() -> None:
    """Entry point: expected errors become one line on stderr and an exit code; --debug shows tracebacks."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        result = app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(ExitStatus.INTERRUPTED)
    except typer.TyperException as exc:  # usage errors (typer ships its own click)
        show = getattr(exc, "show", None)
        if show:
            show()
        sys.exit(ExitStatus.BAD_INPUT)
    except SagellmError as exc:
        if debug:
            raise
        for line in str(exc).splitlines():
            print(f"sagellm: error: {line}", file=sys.stderr)
        sys.exit(exc.exit_status)
    except Exception as exc:  # a bug: one line (exit 3, never 1, which means "gate failed")
        if debug:
            raise
        print(f"sagellm: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(ExitStatus.TARGET_FAILED)
    sys.exit(result if isinstance(result, int) else ExitStatus.OK)

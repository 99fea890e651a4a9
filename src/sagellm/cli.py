"""The `sagellm` command: thin commands that parse, call the library, render. Heavy imports stay lazy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.errors import ExitStatus, InputError, SagellmError
from sagellm.scratch import run_scratch

app = typer.Typer(
    help="Deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles.\n\n"
    "Exit codes: 0 ok · 1 gate failed · 2 bad input · 3 target/infrastructure failure · 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
profiles_app = typer.Typer(help="List, show, validate profiles and print their JSON Schema.", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
results_app = typer.Typer(help="The results.json format.", no_args_is_help=True)
app.add_typer(results_app, name="results")


def _print_version(value: bool) -> None:
    if value:
        from sagellm import __version__

        print(f"sagellm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="print the version and exit")] = False) -> None:
    """Deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""

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
AllowIncomparable = Annotated[bool, typer.Option("--allow-incomparable", help="compare with a baseline of another "
                                                 "model, instance, container or workload anyway")]
INT32_MAX = 2**31 - 1  # AWS API integers (profiles.schema.INT32_MAX; kept here so --help never imports pydantic)


def _payload(input_tokens: int | None, output_tokens: int | None):
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


def _rates(text: str | None) -> tuple[float, ...]:
    return () if text is None else _levels(text, "--request-rate", float,
                                              "give rates > 0 (requests/s) separated by commas, e.g. 0.5,1,2")


def _workers(text: str) -> int | None:
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


def _concurrency(text: str) -> tuple[int, ...]:
    return _levels(text, "--concurrency", int, "give levels ≥ 1 separated by commas, e.g. 1,2,4,8")


# ---------------------------------------------------------------- profiles

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
    model: Model,
    instance: Instance = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> None:
    """Print the resolved DeploymentPlan: environment, instance, count, kind, copies, scaling."""
    from sagellm.planner import step_time_notes
    from sagellm.profiles.resolve import design_for, to_plan

    design = design_for(profile, model, instance, payload=_payload(input_tokens, output_tokens), region=region,
                        profiles_dir=profiles_dir)
    plan = to_plan(design)
    if json_out:
        print(plan.model_dump_json(indent=2))
        return
    from sagellm.render import print_plan

    print_plan(plan, step_time_notes(design.shape()))


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


# ---------------------------------------------------------------- plan

@app.command(epilog="Examples:\n\n"
             "  sagellm plan --profile max-throughput --model meta-llama/Llama-2-7b-hf --instance ml.g5.2xlarge\n\n"
             "  sagellm plan --profile replicas --model llama2-13b --instance ml.p4d.24xlarge --tensor-parallel 1\n\n"
             "  sagellm plan --profile min-latency --model llama2-70b --instance ml.p4d.24xlarge --input-tokens 2048 --json")
def plan(
    profile: Annotated[str, typer.Option("--profile", help="profile name")],
    model: Model,
    instance: Instance = None,
    tensor_parallel: Annotated[int | None, typer.Option("--tensor-parallel", min=1, max=INT32_MAX,
                                                           help="GPUs per copy (overrides the profile)")] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=1, max=INT32_MAX, help="copies per instance "
                                                    "(inference components)")] = None,
    instance_count: Annotated[int | None, typer.Option("--instance-count", min=1, max=INT32_MAX,
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
             "quantization": main.quantization, "container": f"{d.container} {d.container_version}"}
    env = environment(main, d)
    if json_out:
        print(json.dumps({"shape": shape, "environment": env, "curve": curve.to_dict()}, indent=2))
        return
    from sagellm.render import print_curve

    print_curve(shape, env, curve)


@app.command(epilog="Example:\n\n  sagellm calibrate run-42 run-43   # bench --out folders (or their results.json)")
def calibrate(
    runs: Annotated[list[Path], typer.Argument(help="bench --out folders or results.json files of measured runs")],
    profiles_dir: ProfilesDir = None,
) -> None:
    """Fit the planner's step times to measured runs; store one correction per model × instance × container.

    Writes <profiles_dir>/calibration/*.yaml (review them like code); `plan`, `profiles show` and every
    profile's auto values then use it and say so. Emulated runs are refused: they only replay the planner.
    """
    from sagellm.bench.calibrate import calibrate_runs

    for line in calibrate_runs(runs, profiles_dir):
        print(line)


# ---------------------------------------------------------------- bench, gate, report

@app.command(epilog="Examples:\n\n"
             "  sagellm bench --profile max-throughput --model meta-llama/Llama-2-7b-hf --instance ml.g5.2xlarge "
             "--time-scale 0.1   # local, emulated\n\n"
             "  sagellm bench --profile replicas --model llama2-13b --instance ml.p4d.24xlarge --target sagemaker "
             "--thresholds gates.yaml --out run-42   # real account, gated\n\n"
             "  sagellm bench --target sagemaker --endpoint-name prod-chat --thresholds gates.yaml "
             "  # an existing endpoint, nothing deployed\n\n"
             "  sagellm bench --profile max-throughput --model llama2-7b --target http --url http://localhost:8080 "
             "# an existing TGI\n\n"
             "  sagellm bench --target http --api openai --url http://localhost:8000 --concurrency 1,4,16 "
             "# an existing vLLM, no prediction")
def bench(
    profile: Annotated[str | None, typer.Option("--profile", help="profile name (optional for --target "
                                                "http: with --model it predicts the run; with --endpoint-name: "
                                                "default the endpoint's sagellm:profile tag)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="catalog model, e.g. meta-llama/Llama-2-7b-hf "
                                              "(optional for --target http; with --endpoint-name: default the "
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
    api: Annotated[str, typer.Option("--api", help="tgi (generate), chat (TGI Messages API; "
                                     "/v1/chat/completions on an http target), openai (completions, http "
                                     "target) or auto (http: openai when the URL has /v1, else tgi)")] = "auto",
    served_model: Annotated[str | None, typer.Option("--served-model", help="http target, OpenAI API: the "
                            "model name the server serves (default: the one its /v1/models lists)")] = None,
    input_tokens: Annotated[str | None, typer.Option("--input-tokens", help="prompt tokens per request: 512, "
                                                     "512:64 (mean:stddev) or 256-1024 (min-max); default: "
                                                     "the profile's payload")] = None,
    output_tokens: Annotated[str | None, typer.Option("--output-tokens", help="generated tokens per request, "
                                                      "same forms")] = None,
    shared_prefix: Annotated[int, typer.Option("--shared-prefix", min=0, help="open every prompt with the "
                                               "same N tokens (to measure prefix caching on purpose)")] = 0,
    dataset: Annotated[Path | None, typer.Option("--dataset", help="prompts from a JSONL file "
                                                 "({\"prompt\", \"output_tokens\"} per line) or ShareGPT "
                                                 "JSON")] = None,
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", help="folder with the model's "
                                                   "tokenizer.json: prompts in real tokens (default: one "
                                                   "token per word)")] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the prompts and arrivals (same seed, "
                                      "same requests)")] = 0,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="closed-loop levels, in order; "
                                                    "escalation stops at >5% errors or a timeout "
                                                    "[default: 1,2,4,…,512, or adaptive]")] = None,
    sweep: Annotated[str | None, typer.Option("--sweep", help="adaptive: start at the predicted knee and "
                                              "max, refine where the measurement departs, stop once both are "
                                              "bracketed within 10% · doubling: the --concurrency list "
                                              "[default: adaptive with --profile and --model and no "
                                              "--concurrency/--request-rate; else doubling]")] = None,
    budget_minutes: Annotated[float | None, typer.Option("--budget-minutes", help="stop the sweep once it "
                                                         "has spent this many endpoint-minutes (wall time × "
                                                         "instances)")] = None,
    request_rate: Annotated[str | None, typer.Option("--request-rate", help="open-loop levels instead, "
                                                     "requests/s, e.g. 1,2,4,8")] = None,
    arrivals: Annotated[str | None, typer.Option("--arrivals", help="open loop: constant or poisson "
                                                 "[default: constant]")] = None,
    max_in_flight: Annotated[int | None, typer.Option("--max-in-flight", help="open loop: requests in "
                                                      "flight at most; later ones wait and are recorded "
                                                      "late [default: 1024]")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="run each level N times; results give "
                                         "the mean and spread")] = 1,
    requests_per_level: Annotated[int | None, typer.Option("--requests-per-level", help="measured "
                                  "requests per level (default: 3 × concurrency, or 60 s of arrivals; at "
                                  "least 8)")] = None,
    duration_per_level: Annotated[float | None, typer.Option("--duration-per-level", help="seconds per "
                                  "level instead of a request count")] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="warm-up requests per worker (open loop: "
                                        "per level), excluded from the statistics")] = 1,
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="YAML rules to gate on "
                                                       "(see README)")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="results.json of an earlier run to "
                                                     "compare against")] = None,
    allow_incomparable: AllowIncomparable = False,
    out: Annotated[Path, typer.Option("--out", help="folder for results.json, requests.jsonl, report.md, "
                                      "curve.png, junit.xml, results.csv")] = Path("sagellm-results"),
    keep: Annotated[bool, typer.Option("--keep", help="do not destroy the stack (sagemaker target)")] = False,
    time_scale: Annotated[float, typer.Option("--time-scale", help="local emulator only: run simulated time "
                                              "this much faster (0.1 = 10×); results are in simulated "
                                              "time")] = 1.0,
    slo: Annotated[float | None, typer.Option("--slo-ms-per-token", help="also report the highest "
                                                 "throughput with p50 ms/token under this")] = None,
    ramp: Annotated[bool | None, typer.Option("--ramp/--no-ramp", help="open-loop load rising in steps over "
                                              "time, recording instances and latency per interval "
                                              "[default: --ramp for a profile with autoscaling]")] = None,
    instance_startup: Annotated[float | None, typer.Option("--instance-startup", help="local target, "
                                "autoscaling: simulated seconds from a scale-out to the new instance "
                                "InService [default: 525, see README]")] = None,
    workers: Annotated[str, typer.Option("--workers", help="worker processes that share each level's load "
                                         "(auto: one per 256 streams, at most one per core)")] = "1",
    ray: Annotated[str | None, typer.Option("--ray", help="run the workers as Ray actors on the cluster at "
                                            "this address (auto: a local cluster); needs "
                                            "pip install 'sagellm[ray]'")] = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    hf_token_secret: Annotated[str | None, typer.Option("--hf-token-secret", help="Secrets Manager name or ARN "
                               "of the Hugging Face token (gated models on the sagemaker target)")] = None,
    json_out: Json = False,
) -> int:
    """Deploy a profile, sweep concurrency (closed loop) or request rates (open loop), report, gate, and
    always tear down.

    The sagemaker target deploys the bench's own stack (tagged sagellm:bench-run) and deletes exactly that
    stack, or benches an existing endpoint (--endpoint-name) without deploying or deleting anything.
    Relative paths resolve against the current folder; nothing else is read from it.

    Exit 0 when every threshold holds, 1 when one fails, 2 on bad input (nothing deployed),
    3 when the target or its teardown failed, 130 after teardown when interrupted (Ctrl-C, SIGTERM).
    """
    from sagellm.bench.client.workload import WorkloadOptions
    from sagellm.bench.progress import watching
    from sagellm.bench.runner import BenchOptions, run_bench
    from sagellm.render import print_report

    if concurrency is not None and request_rate is not None:
        raise InputError("--concurrency/--request-rate: give one, not both (closed loop or open loop)")
    if concurrency is not None and ramp:
        raise InputError("--ramp/--concurrency: a ramp is open loop; give --request-rate steps, or --no-ramp")
    rates = _rates(request_rate)
    method = sweep or ("auto" if concurrency is None and request_rate is None else "doubling")
    opts = BenchOptions(
        profile=profile, model=model, instance=instance, target=target, endpoint_name=endpoint_name,
        inference_component=inference_component, url=url, api=api, served_model=served_model,
        workload=WorkloadOptions(input_tokens=input_tokens, output_tokens=output_tokens, shared_prefix=shared_prefix,
                                 dataset=dataset, tokenizer=tokenizer, seed=seed),
        concurrency=() if rates or concurrency is None else _concurrency(concurrency), sweep=method,
        budget_minutes=budget_minutes,
        request_rate=rates, arrivals=arrivals, max_in_flight=max_in_flight, repeats=repeats,
        requests_per_level=requests_per_level, duration_per_level_s=duration_per_level, warmup=warmup,
        thresholds=thresholds, baseline=baseline, allow_incomparable=allow_incomparable, out=out, keep=keep,
        region=region, profiles_dir=profiles_dir, hf_token_secret=hf_token_secret,
        time_scale=time_scale, slo_ms_per_token=slo, command=" ".join(["sagellm", *sys.argv[1:]]),
        # --concurrency asks for a closed-loop sweep: no ramp unless --ramp says so.
        ramp=ramp if ramp is not None else (False if concurrency is not None else None),
        instance_startup_s=instance_startup, workers=_workers(workers), ray=ray,
    )
    with watching() as watch:
        outcome = run_bench(opts, watch)
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
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="YAML rules")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="results.json to compare against")] = None,
    allow_incomparable: AllowIncomparable = False,
    out: Annotated[Path | None, typer.Option("--out", help="folder for the verdict: results.json, report.md, "
                                             "junit.xml, curve.png, results.csv (default: gate/ beside RESULTS; "
                                             "never the run's own folder)")] = None,
    json_out: Json = False,
) -> int:
    """Evaluate thresholds (and/or a baseline) on a finished run; the run's own files are left as they are.

    Exit 0 pass, 1 fail (every violation printed), 2 bad input (thresholds, a level the run never planned,
    a baseline that is not comparable), or the run's own 3/130 when it failed or was interrupted.
    """
    from sagellm.results.gate import gate as evaluate
    from sagellm.results.gate import planned_levels, read_gate
    from sagellm.results.report import write_report
    from sagellm.results.schema import load_results, write_results

    out = out or results.parent / "gate"
    if out.resolve() == results.parent.resolve():
        raise InputError(f"--out: {out} is the run's own folder and its files would be overwritten "
                         "(pick another folder, or leave --out out for gate/ beside it)")
    run = load_results(results)
    rules, base = read_gate(thresholds, baseline, run.run, planned_levels(run), allow_incomparable=allow_incomparable)
    if rules is None:
        raise InputError("--thresholds/--baseline: nothing to check (give a thresholds file, a baseline, or both)")
    verdict = evaluate(run, rules, base)
    updated = run.model_copy(update={"gate": verdict})
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.json", updated)
    write_report(out, updated)
    if json_out:
        print(verdict.model_dump_json(indent=2))
    else:
        for v in verdict.violations:
            print(f"FAIL {v.rule}: {v.message}")
        for difference in verdict.incomparable:
            print(f"NOTE baseline differs (--allow-incomparable): {difference}")
        print(f"{'PASS' if verdict.passed else 'FAIL'}: {len(verdict.rules)} rule(s), "
              f"{len(verdict.violations)} violation(s); written to {out}/")
    if run.failure is not None:  # an incomplete run never passes, whatever its rules say
        print(f"sagellm: error: the run did not complete: {run.failure.message}", file=sys.stderr)
        return run.failure.exit_status
    return int(ExitStatus.OK if verdict.passed else ExitStatus.GATE_FAILED)


@results_app.command("schema")
def results_schema() -> None:
    """Print the JSON Schema of results.json (generated from the pydantic model the bench writes)."""
    from sagellm.results.schema import Results

    print(json.dumps(Results.model_json_schema(), indent=2))


@app.command()
def report(
    directory: Annotated[Path, typer.Argument(help="a bench --out folder holding results.json")],
) -> None:
    """Re-render report.md, curve.png, junit.xml and results.csv from results.json, and print the report."""
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
    endpoint_name: Annotated[str | None, typer.Option("--endpoint-name", help="the one endpoint name the "
                             "SageMaker routes answer to (default: sagellm-<profile>)")] = None,
    time_scale: Annotated[float, typer.Option("--time-scale", help="run simulated time faster (0.1 = 10×)")] = 1.0,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
) -> None:
    """Serve an emulated endpoint for a profile on 127.0.0.1 (foreground, Ctrl-C to stop).

    Speaks the SageMaker runtime (/endpoints/NAME/invocations[-response-stream]), the pinned container's
    routes (TGI: /generate, /generate_stream, /invocations, /info, /health; LMI: /invocations) and OpenAI
    (/v1/completions, /v1/chat/completions, /v1/models), so any load tool can be pointed at it.
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
    run_emulator(plan, port=port, time_scale=time_scale, endpoint_name=endpoint_name)


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


def _usage_line(exc: typer.TyperException, argv: list[str]) -> str:
    """A usage error as one line: the option, the value given, what is wrong, where to read more."""
    text = exc.format_message()
    param = getattr(exc, "param", None)
    option = getattr(exc, "option_name", None)
    if isinstance(exc, typer.BadParameter) and param is not None and param.opts and "Missing" not in text:
        flag = param.opts[0]
        given = _given(argv, param.opts)
        text = f"{flag}: {given!r}: {exc.message}" if given is not None else f"{flag}: {exc.message}"
    elif option and getattr(exc, "possibilities", None) is not None:
        close = sorted(exc.possibilities)  # type: ignore[attr-defined]
        text = f"{option}: no such option" + (f"; did you mean {', '.join(close)}?" if close else "")
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "sagellm"
    return f"{' '.join(text.split())} (see `{command} --help`)"


def _given(argv: list[str], opts: list[str]) -> str | None:
    """The value given on the command line for an option (`--x 1` or `--x=1`)."""
    for i, arg in enumerate(argv):
        if arg in opts and i + 1 < len(argv):
            return argv[i + 1]
        name, _, value = arg.partition("=")
        if name in opts and _:
            return value
    return None


def main() -> None:
    """Entry point: expected errors become one line on stderr and an exit code; --debug shows tracebacks."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        with run_scratch():  # every temporary file of the command and its children, removed on the way out
            result = app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(ExitStatus.INTERRUPTED)
    except typer.TyperException as exc:  # usage errors (typer ships its own click)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
        else:
            print(f"sagellm: error: {_usage_line(exc, sys.argv)}", file=sys.stderr)
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

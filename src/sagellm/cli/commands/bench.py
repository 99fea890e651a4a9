"""`sagellm bench`: deploy → sweep → report → gate → teardown."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from sagellm.cli.app import PanelledCommand, app
from sagellm.cli.options import (
    ALLOW_INCOMPARABLE_HELP,
    INSTANCE_HELP,
    JSON_HELP,
    MLFLOW_HELP,
    MODEL_S3_URI_HELP,
    PROFILES_DIR_HELP,
    REGION_HELP,
    SERVED,
    Fills,
    as_flags,
    concurrency_levels,
    engine_choice,
    rate_levels,
    region_option,
    speed_levels,
    worker_count,
)
from sagellm.errors import InputError

if TYPE_CHECKING:
    from sagellm.bench.client.trace import TraceOptions
    from sagellm.bench.load.open_loop import Arrivals
    from sagellm.bench.runner import BenchOutcome
    from sagellm.bench.specs import LoadSpec, TargetSpec


@app.command(cls=PanelledCommand, epilog="Examples:\n\n"
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
    # Model & profile
    profile: Annotated[str | None, typer.Option("--profile", rich_help_panel=SERVED, help="profile name (optional "
                                                "for --target http: with --model it predicts the run; with "
                                                "--endpoint-name: default the endpoint's sagellm:profile tag)")] = None,
    model: Annotated[str | None, typer.Option("--model", rich_help_panel=SERVED, help="catalog model, e.g. "
                                              "meta-llama/Llama-2-7b-hf (optional for --target http; with "
                                              "--endpoint-name: default the deployed one)")] = None,
    instance: Annotated[str | None, typer.Option("--instance", rich_help_panel=SERVED, help=INSTANCE_HELP)] = None,
    engine: Annotated[str | None, typer.Option("--engine", rich_help_panel=SERVED, callback=engine_choice,
                                               help="serving engine (a container kind: tgi, lmi, …) in place of "
                                               "the profile's container.kind, at its pinned version")] = None,
    region: Annotated[str | None, typer.Option("--region", rich_help_panel=SERVED, help=REGION_HELP + " (default: "
                                               "with --target sagemaker, your AWS configuration's region, else "
                                               "us-east-1; one region from deploy to teardown)",
                                               callback=region_option)] = None,
    profiles_dir: Annotated[Path | None, typer.Option("--profiles-dir", rich_help_panel=SERVED,
                                                      help=PROFILES_DIR_HELP)] = None,
    model_s3_uri: Annotated[str | None, typer.Option("--model-s3-uri", rich_help_panel=SERVED,
                                                     help=MODEL_S3_URI_HELP)] = None,
    hf_token_secret: Annotated[str | None, typer.Option("--hf-token-secret", rich_help_panel=SERVED, help="Secrets "
                               "Manager name or ARN of the Hugging Face token (gated models on the sagemaker "
                               "target)")] = None,
    # Target
    target: Annotated[str, typer.Option("--target", rich_help_panel="Target", help="local: embedded AWS (moto) + "
                                        "emulator · sagemaker: your AWS account (credentials from the "
                                        "environment) · http: an existing TGI/OpenAI-compatible server at "
                                        "--url")] = "local",
    endpoint_name: Annotated[str | None, typer.Option("--endpoint-name", rich_help_panel="Target", help="sagemaker "
                                                      "target: bench this existing endpoint; nothing is deployed "
                                                      "or deleted"), Fills("name")] = None,
    inference_component: Annotated[str | None, typer.Option("--inference-component", rich_help_panel="Target",
                                   help="with --endpoint-name: the component to invoke (default: its only "
                                   "one)")] = None,
    url: Annotated[str | None, typer.Option("--url", rich_help_panel="Target", help="server URL for --target "
                                            "http")] = None,
    api: Annotated[str, typer.Option("--api", rich_help_panel="Target", help="tgi (generate), chat (TGI Messages "
                                     "API; /v1/chat/completions on an http target), openai (completions, http "
                                     "target) or auto (http: openai when the URL has /v1, else tgi)")] = "auto",
    served_model: Annotated[str | None, typer.Option("--served-model", rich_help_panel="Target", help="http "
                            "target, OpenAI API: the model name the server serves (default: the one its "
                            "/v1/models lists)")] = None,
    keep: Annotated[bool, typer.Option("--keep", rich_help_panel="Target", help="do not destroy the stack "
                                       "(sagemaker target)")] = False,
    time_scale: Annotated[float, typer.Option("--time-scale", rich_help_panel="Target", help="local emulator only: "
                                              "run simulated time this much faster (0.1 = 10×); results are in "
                                              "simulated time")] = 1.0,
    instance_startup: Annotated[float | None, typer.Option("--instance-startup", rich_help_panel="Target",
                                help="local target, autoscaling: simulated seconds from a scale-out to the new "
                                "instance InService [default: 525, see docs/ramp.md]"),
                   Fills("instance_startup_s")] = None,
    cdk_cli: Annotated[Path | None, typer.Option("--cdk-cli", rich_help_panel="Target", help="the AWS CDK CLI to "
                                                 "deploy with (or SAGELLM_CDK_CLI; default: found, else fetched "
                                                 "once)")] = None,
    # Workload
    input_tokens: Annotated[str | None, typer.Option("--input-tokens", rich_help_panel="Workload", help="prompt "
                                                     "tokens per request: 512, 512:64 (mean:stddev) or 256-1024 "
                                                     "(min-max); default: the profile's payload")] = None,
    output_tokens: Annotated[str | None, typer.Option("--output-tokens", rich_help_panel="Workload",
                                                      help="generated tokens per request, same forms")] = None,
    shared_prefix: Annotated[int, typer.Option("--shared-prefix", min=0, rich_help_panel="Workload", help="open "
                                               "every prompt with the same N tokens (to measure prefix caching "
                                               "on purpose)")] = 0,
    prefixes: Annotated[int, typer.Option("--prefixes", min=1, rich_help_panel="Workload", help="N distinct shared "
                                          "prefixes of --shared-prefix tokens, one per request drawn with the "
                                          "seed (to measure prefix-aware routing)")] = 1,
    dataset: Annotated[Path | None, typer.Option("--dataset", rich_help_panel="Workload", help="prompts from a "
                                                 "JSONL file ({\"prompt\", \"output_tokens\"} per line) or "
                                                 "ShareGPT JSON")] = None,
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", rich_help_panel="Workload", help="folder with "
                                                   "the model's tokenizer.json: prompts in real tokens (default: "
                                                   "one token per word)")] = None,
    seed: Annotated[int, typer.Option("--seed", rich_help_panel="Workload", help="seed of the prompts and "
                                      "arrivals (same seed, same requests)")] = 0,
    turns: Annotated[str | None, typer.Option("--turns", rich_help_panel="Workload", help="multi-turn "
                                              "conversations of this many turns: 3, 3:1 or 2-6; each turn re-sends "
                                              "the history and adds --input-tokens (docs/workloads.md)")] = None,
    think_time: Annotated[str | None, typer.Option("--think-time", rich_help_panel="Workload", help="with --turns: "
                                                   "seconds between a reply and the next turn: 2, 2:0.5 or 1-3 "
                                                   "[default: 0]"), Fills("think_time_s")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", rich_help_panel="Workload", help="replay a request "
                                               "trace: a Mooncake JSONL (timestamp ms, input_length, "
                                               "output_length, hash_ids) or Azure LLM inference CSV (TIMESTAMP, "
                                               "ContextTokens, GeneratedTokens), each request at its recorded "
                                               "time with its lengths, as an open-loop level "
                                               "(docs/workloads.md)")] = None,
    trace_speed: Annotated[str | None, typer.Option("--trace-speed", rich_help_panel="Workload", help="with "
                                                    "--trace: play it this much faster (2 = twice as fast); "
                                                    "several (1,2,4) are levels of the sweep [default: 1]"),
                   Fills("speed")] = None,
    trace_requests: Annotated[int | None, typer.Option("--trace-requests", rich_help_panel="Workload",
                                                       help="with --trace: only its first N requests"),
                   Fills("requests")] = None,
    trace_window: Annotated[str | None, typer.Option("--trace-window", rich_help_panel="Workload", help="with "
                                                     "--trace: only the requests due in START-END seconds of the "
                                                     "trace, e.g. 0-600"), Fills("window_s")] = None,
    workload_config: Annotated[Path | None, typer.Option("--workload-config", rich_help_panel="Workload",
                               help="an AIPerf workload spec (SageMaker AI's AIWorkloadConfig: the request `sagellm "
                               "workload export` writes, or the spec itself): its lengths, shared prefix, seed and "
                               "one level of load in place of those flags (docs/aws-ai-jobs.md)")] = None,
    # Load
    concurrency: Annotated[str | None, typer.Option("--concurrency", rich_help_panel="Load", help="closed-loop "
                                                    "levels, in order; escalation stops at >5% errors or a "
                                                    "timeout [default: 1,2,4,…,512, or adaptive]")] = None,
    request_rate: Annotated[str | None, typer.Option("--request-rate", rich_help_panel="Load", help="open-loop "
                                                     "levels instead, requests/s, e.g. 1,2,4,8")] = None,
    arrivals: Annotated[str | None, typer.Option("--arrivals", rich_help_panel="Load", help="open loop: constant "
                                                 "or poisson [default: constant]")] = None,
    max_in_flight: Annotated[int | None, typer.Option("--max-in-flight", rich_help_panel="Load", help="open loop: "
                                                      "requests in flight at most; later ones wait and are "
                                                      "recorded late [default: 1024]")] = None,
    max_ttft_s: Annotated[float | None, typer.Option("--max-ttft-s", rich_help_panel="Load", help="open loop: a "
                                                     "level stops early, over-saturated, when a first token "
                                                     "waits longer (or its requests in flight keep growing) "
                                                     "[default: 60, SageMaker's invocation timeout]")] = None,
    ramp: Annotated[bool | None, typer.Option("--ramp/--no-ramp", rich_help_panel="Load", help="open-loop load "
                                              "rising in steps over time, recording instances and latency per "
                                              "interval [default: --ramp for a profile with autoscaling]")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, rich_help_panel="Load", help="run each level N times; "
                                         "results give the mean and spread")] = 1,
    requests_per_level: Annotated[int | None, typer.Option("--requests-per-level", rich_help_panel="Load",
                                  help="measured requests per level (default: 3 × concurrency, or 60 s of "
                                  "arrivals; at least 8)")] = None,
    duration_per_level: Annotated[float | None, typer.Option("--duration-per-level", rich_help_panel="Load",
                                  help="seconds per level instead of a request count"),
                   Fills("duration_per_level_s", "step_s")] = None,
    warmup: Annotated[int | None, typer.Option("--warmup", rich_help_panel="Load", help="warm-up requests per "
                                               "worker (open loop: per level), excluded from the statistics "
                                               "[default: 1]")] = None,
    spawn_rate: Annotated[float | None, typer.Option("--spawn-rate", rich_help_panel="Load", help="closed loop: "
                                                     "workers started a second at each level's start, so that they "
                                                     "do not stay in phase; 0: all at once [default: 1000]")] = None,
    load_by: Annotated[str, typer.Option("--load-by", rich_help_panel="Load", help="who sends the load: sagellm "
                                         "(its own client) or aws-benchmark-job (SageMaker AI's benchmark job runs "
                                         "AIPerf against the sagemaker target's endpoint, one job a level; "
                                         "docs/aws-ai-jobs.md)")] = "sagellm",
    aws_role_arn: Annotated[str | None, typer.Option("--aws-role-arn", rich_help_panel="Load", help="--load-by "
                            "aws-benchmark-job: the IAM role SageMaker AI runs each job as"),
                   Fills("role_arn")] = None,
    aws_output_s3_uri: Annotated[str | None, typer.Option("--aws-output-s3-uri", rich_help_panel="Load",
                                 help="--load-by aws-benchmark-job: where the jobs write their results"),
                   Fills("output_s3_uri")] = None,
    aws_poll_s: Annotated[float, typer.Option("--aws-poll-s", rich_help_panel="Load", help="--load-by "
                                              "aws-benchmark-job: seconds between status checks"),
                   Fills("poll_s")] = 30.0,
    # Sweep
    sweep: Annotated[str | None, typer.Option("--sweep", rich_help_panel="Sweep", help="adaptive: start at the "
                                              "predicted knee and max, refine where the measurement departs, "
                                              "stop once both are bracketed within 10% · doubling: the "
                                              "--concurrency list [default: adaptive with --profile and --model "
                                              "and no --concurrency/--request-rate; else doubling]"),
                   Fills("method")] = None,
    budget_minutes: Annotated[float | None, typer.Option("--budget-minutes", rich_help_panel="Sweep", help="stop "
                                                         "the sweep once it has spent this many endpoint-minutes "
                                                         "(wall time × instances)")] = None,
    # Gate
    thresholds: Annotated[Path | None, typer.Option("--thresholds", rich_help_panel="Gate", help="YAML rules to "
                                                    "gate on (see docs/gate.md)")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", rich_help_panel="Gate", help="results.json of an "
                                                  "earlier run to compare against")] = None,
    allow_incomparable: Annotated[bool, typer.Option("--allow-incomparable", rich_help_panel="Gate",
                                                     help=ALLOW_INCOMPARABLE_HELP)] = False,
    slo: Annotated[float | None, typer.Option("--slo-ms-per-token", rich_help_panel="Gate", help="also report the "
                                              "highest throughput with p50 ms/token under this"),
                   Fills("slo_ms_per_token")] = None,
    # Output
    out: Annotated[Path, typer.Option("--out", rich_help_panel="Output", help="folder for results.json, "
                                      "requests.jsonl, report.md, curve.png, junit.xml, "
                                      "results.csv")] = Path("sagellm-results"),
    json_out: Annotated[bool, typer.Option("--json", rich_help_panel="Output", help=JSON_HELP)] = False,
    mlflow: Annotated[str | None, typer.Option("--mlflow", envvar="MLFLOW_TRACKING_URI", rich_help_panel="Output",
                                               help=MLFLOW_HELP)] = None,
    # Workers
    workers: Annotated[str, typer.Option("--workers", rich_help_panel="Workers", help="worker processes that "
                                         "share each level's load (auto: one per 256 streams, at most one per "
                                         "core)"), Fills("count")] = "1",
    ray: Annotated[str | None, typer.Option("--ray", rich_help_panel="Workers", help="run the workers as Ray "
                                            "actors on the cluster at this address (auto: a local cluster); "
                                            "needs pip install 'sagellm[ray]'")] = None,
) -> int:
    """Deploy a profile, sweep concurrency (closed loop) or request rates (open loop), report, gate, and
    always tear down.

    The sagemaker target deploys the bench's own stack (tagged sagellm:bench-run) and deletes exactly that
    stack, or benches an existing endpoint (--endpoint-name) without deploying or deleting anything.
    Relative paths resolve against the current folder; nothing else is read from it.

    Exit 0 when every threshold holds, 1 when one fails, 2 on bad input (nothing deployed),
    3 when the target or its teardown failed, 130 after teardown when interrupted (Ctrl-C, SIGTERM, SIGHUP).
    """
    from sagellm.bench import specs
    from sagellm.bench.progress import watching
    from sagellm.bench.runner import run

    if cdk_cli is not None:
        _use_cdk_cli(cdk_cli)
    if workload_config is not None:  # the file's values stand in for the flags it replaces
        (input_tokens, output_tokens, shared_prefix, seed, concurrency, request_rate, arrivals, max_in_flight,
         requests_per_level, duration_per_level, warmup) = _from_workload_config(workload_config, {
             "--input-tokens": input_tokens, "--output-tokens": output_tokens, "--shared-prefix": shared_prefix,
             "--dataset": dataset, "--seed": seed, "--concurrency": concurrency, "--request-rate": request_rate,
             "--arrivals": arrivals, "--max-in-flight": max_in_flight, "--requests-per-level": requests_per_level,
             "--duration-per-level": duration_per_level, "--warmup": warmup, "--ramp": ramp, "--trace": trace})
    warmup = (0 if trace else 1) if warmup is None else warmup  # a trace's requests are all measured by default
    rates = rate_levels(request_rate)
    levels = () if rates or concurrency is None else concurrency_levels(concurrency)
    count = worker_count(workers)
    # Flags of a target or a load other than the one asked for: the specs cannot even hold them.
    parts = _Parts([*_target_misplaced(target, url, time_scale, keep, served_model, endpoint_name,
                                       inference_component, instance_startup),
                    *_load_misplaced(concurrency, request_rate, rates, ramp, arrivals, max_in_flight, max_ttft_s,
                                     trace, spawn_rate),
                    *_trace_misplaced(trace, concurrency, request_rate, arrivals, ramp, requests_per_level,
                                      duration_per_level, trace_speed, trace_requests, trace_window),
                    *_load_by_misplaced(load_by, aws_role_arn, aws_output_s3_uri)])
    parts.build("target", lambda: _target(target, url, api, served_model, endpoint_name, inference_component, keep,
                                          time_scale, instance_startup))
    parts.build("serving", lambda: specs.ServingSpec(profile, model, instance, region=region,
                                                     profiles_dir=profiles_dir, hf_token_secret=hf_token_secret,
                                                     engine=engine, model_s3_uri=model_s3_uri))
    parts.pair()
    speeds = parts.trace(trace, trace_speed, trace_requests, trace_window)
    if trace is None or "trace" in parts.built:
        parts.build("load", lambda: _load(parts.built.get("trace"), speeds, rates, levels, concurrency, arrivals,
                                          max_in_flight, max_ttft_s, ramp, requests_per_level, duration_per_level,
                                          warmup, repeats, spawn_rate))
    parts.build("sweep", lambda: specs.Sweep(_sweep_method(sweep, concurrency, request_rate, trace),
                                             budget_minutes))
    parts.build("workers", lambda: specs.Workers(count, ray))
    parts.build("output", lambda: specs.Output(out, " ".join(["sagellm", *sys.argv[1:]]), mlflow))
    parts.load_by(load_by, aws_role_arn, aws_output_s3_uri, aws_poll_s)
    if parts.errors:
        raise InputError(as_flags(parts.errors))
    try:  # what the parts cannot run with together (conversations and workers) is named by its flags too
        spec = specs.Bench(
            workload=specs.WorkloadOptions(input_tokens=input_tokens, output_tokens=output_tokens,
                                           shared_prefix=shared_prefix, prefixes=prefixes, dataset=dataset,
                                           tokenizer=tokenizer,
                                           seed=seed, turns=turns, think_time_s=think_time,
                                           trace=parts.built.pop("trace", None)),
            gate=specs.Gate(thresholds, baseline, allow_incomparable, slo), **parts.built)
    except InputError as exc:
        raise InputError(as_flags(exc.messages)) from None
    with watching() as watch:
        try:
            outcome = run(spec, watch)
        except InputError as exc:
            raise InputError(as_flags(exc.messages)) from None
    return _report(outcome, out, json_out)


def _use_cdk_cli(cdk_cli: Path) -> None:
    """--cdk-cli: where the CDK CLI is looked up (aws/cdk_cli_lookup.py), in this run's processes."""
    import os

    from sagellm.aws.cdk_cli_lookup import check_chosen

    os.environ["SAGELLM_CDK_CLI"] = str(check_chosen(cdk_cli))  # before anything is made


def _report(outcome: BenchOutcome, out: Path, json_out: bool) -> int:
    """The results on stdout (report or --json), the run's error and the violated rules on stderr; the exit."""
    from sagellm.render import print_report

    if json_out:
        print(outcome.results.model_dump_json(indent=2))
    else:
        print_report(out)
    if outcome.error:
        print(f"sagellm: error: {outcome.error}", file=sys.stderr)
    if outcome.results.gate is not None:  # the violated rules last on stderr, where a CI log shows them
        from sagellm.results.gate import violation_lines

        for line in violation_lines(outcome.results.gate):
            print(line, file=sys.stderr)
    return int(outcome.exit_status)


class _Parts:
    """The bench spec's parts as they are built, with every problem found on the way (reported all at once)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.built: dict[str, Any] = {}

    def build(self, name: str, make: Callable[[], Any]) -> None:
        try:
            self.built[name] = make()
        except InputError as exc:
            self.errors.extend(exc.messages)

    def pair(self) -> None:
        """The served model and the target together, reported with every other problem, not after them."""
        from sagellm.bench import specs

        if "target" in self.built and "serving" in self.built:
            self.errors.extend(specs.pairing_problems(self.built["serving"], self.built["target"]))

    def trace(self, trace: Path | None, trace_speed: str | None, trace_requests: int | None,
              trace_window: str | None) -> tuple[float, ...]:
        """--trace: the replay's options, and its speeds (each a level of the sweep)."""
        from sagellm.bench import specs
        from sagellm.bench.client.trace import parse_window

        if trace is None:
            return ()
        speeds: tuple[float, ...] = ()
        try:
            speeds = speed_levels(trace_speed)
        except InputError as exc:
            self.errors.extend(exc.messages)
        self.build("trace", lambda: specs.TraceOptions(trace, speeds[0] if speeds else 1.0, trace_requests,
                                                       parse_window(trace_window, "--trace-window")))
        return speeds

    def load_by(self, load_by: str, aws_role_arn: str | None, aws_output_s3_uri: str | None,
                aws_poll_s: float) -> None:
        """--load-by aws-benchmark-job: the job's spec, and what the target cannot run it with."""
        from sagellm.bench import specs

        if load_by == "aws-benchmark-job" and aws_role_arn and aws_output_s3_uri:
            self.build("load_by", lambda: specs.AwsBenchmarkJob(aws_role_arn, aws_output_s3_uri, aws_poll_s))
            if "target" in self.built:
                self.errors.extend(specs.load_by_problems(self.built.get("load_by"), self.built["target"]))


def _target_misplaced(target: str, url: str | None, time_scale: float, keep: bool, served_model: str | None,
                      endpoint_name: str | None, inference_component: str | None,
                      instance_startup: float | None) -> list[str]:
    """Flags of a target other than the one asked for."""
    wrong = [
        (bool(url) and target != "http", "--url: only used with --target http"),
        (time_scale != 1.0 and target != "local", "--time-scale: only the local emulator can compress time"),
        (keep and target == "local", ("--keep: the local AWS lives only as long as the bench; use `sagellm "
                                      "emulate` for a lasting local endpoint")),
        (bool(served_model) and target != "http",
         "--served-model: only used with --target http (the name an existing server serves)"),
        (endpoint_name is not None and target != "sagemaker", "--endpoint-name: only with --target sagemaker"),
        (inference_component is not None and endpoint_name is None, "--inference-component: only with --endpoint-name"),
        (endpoint_name is not None and keep, "--keep: an existing endpoint is never deleted; leave --keep out"),
        (instance_startup is not None and target != "local", "--instance-startup: only with --target local"),
    ]
    return [message for misplaced, message in wrong if misplaced]


def _spawn_rate(flag: float | None) -> float | None:
    """--spawn-rate as the spec holds it: the default when not given, None (all at once) for 0."""
    from sagellm.bench.load.closed_loop import SPAWN_RATE

    return SPAWN_RATE if flag is None else flag or None


def _load_misplaced(concurrency: str | None, request_rate: str | None, rates: tuple[float, ...], ramp: bool | None,
                    arrivals: str | None, max_in_flight: int | None, max_ttft_s: float | None,
                    trace: Path | None, spawn_rate: float | None = None) -> list[str]:
    """Flags of a load other than the one asked for (closed loop, open loop, ramp)."""
    wrong = [
        (concurrency is not None and request_rate is not None,
         "--concurrency/--request-rate: give one, not both (closed loop or open loop)"),
        (concurrency is not None and bool(ramp),
         "--ramp/--concurrency: a ramp is open loop; give --request-rate steps, or --no-ramp"),
        (not rates and not trace and (arrivals is not None or max_in_flight is not None or max_ttft_s is not None),
         "--arrivals/--max-in-flight/--max-ttft-s: only with --request-rate"),
        (spawn_rate is not None and bool(rates or trace or ramp),
         "--spawn-rate: only with a closed loop (--concurrency); an open loop's arrivals keep their schedule"),
    ]
    return [message for misplaced, message in wrong if misplaced]


def _trace_misplaced(trace: Path | None, concurrency: str | None, request_rate: str | None, arrivals: str | None,
                     ramp: bool | None, requests_per_level: int | None, duration_per_level: float | None,
                     trace_speed: str | None, trace_requests: int | None, trace_window: str | None) -> list[str]:
    """A trace's own arrivals in place of a load's flags, its own flags only with a trace; a ramp's steps."""
    wrong = [
        (trace is not None and (concurrency is not None or request_rate is not None or arrivals is not None
                                or bool(ramp) or requests_per_level is not None or duration_per_level is not None),
         ("--trace: replays the trace's own arrivals, a level per --trace-speed; leave out --concurrency, --request-rate, "
          "--arrivals, --ramp, --requests-per-level and --duration-per-level (--trace-requests, --trace-window and "
          "--trace-speed choose the part and the pace)")),
        (trace is None and (trace_speed is not None or trace_requests is not None or trace_window is not None),
         "--trace-speed/--trace-requests/--trace-window: only with --trace"),
        (bool(ramp) and requests_per_level is not None,
         "--requests-per-level: a ramp's steps last --duration-per-level seconds each"),
    ]
    return [message for misplaced, message in wrong if misplaced]


def _load_by_misplaced(load_by: str, aws_role_arn: str | None, aws_output_s3_uri: str | None) -> list[str]:
    """Who sends the load, and the flags that belong to it."""
    wrong = [
        (load_by not in ("sagellm", "aws-benchmark-job"), f"--load-by: {load_by!r} must be sagellm or aws-benchmark-job"),
        (load_by == "sagellm" and (aws_role_arn or aws_output_s3_uri) is not None,
         "--aws-role-arn/--aws-output-s3-uri: only with --load-by aws-benchmark-job"),
        (load_by == "aws-benchmark-job" and not aws_role_arn,
         "--aws-role-arn: required with --load-by aws-benchmark-job (the IAM role SageMaker AI runs the job as)"),
        (load_by == "aws-benchmark-job" and not aws_output_s3_uri,
         "--aws-output-s3-uri: required with --load-by aws-benchmark-job (the S3 prefix the jobs write results to)"),
    ]
    return [message for misplaced, message in wrong if misplaced]


def _load(trace: TraceOptions | None, speeds: tuple[float, ...], rates: tuple[float, ...], levels: tuple[int, ...],
          concurrency: str | None, arrivals: str | None, max_in_flight: int | None, max_ttft_s: float | None,
          ramp: bool | None, requests_per_level: int | None, duration_per_level: float | None, warmup: int,
          repeats: int, spawn_rate: float | None = None) -> LoadSpec:
    """--ramp: a ramp; --no-ramp or --concurrency: the levels; neither: a ramp when the plan autoscales."""
    from sagellm.bench import specs
    from sagellm.bench.load.saturation import SAGEMAKER_INVOCATION_TIMEOUT_S
    from sagellm.bench.sweep.run import MAX_IN_FLIGHT

    in_flight = MAX_IN_FLIGHT if max_in_flight is None else max_in_flight
    ttft_s = SAGEMAKER_INVOCATION_TIMEOUT_S if max_ttft_s is None else max_ttft_s
    if trace is not None:  # a level per speed, its arrivals the trace's
        return specs.trace_level(trace, speeds=speeds, warmup=warmup, repeats=repeats, max_in_flight=in_flight,
                                 max_ttft_s=ttft_s)
    requests = None if ramp else requests_per_level  # refused above
    given = specs.Open(rates, cast("Arrivals", arrivals or "constant"),  # the spec refuses other text
                       in_flight, requests, duration_per_level, warmup, repeats, ttft_s) if rates else \
        specs.Closed(levels, requests, duration_per_level, warmup, repeats, _spawn_rate(spawn_rate))
    if ramp:
        return specs.ramp_of(given)
    return given if ramp is False or concurrency is not None else specs.RampIfAutoscaled(given)


def _sweep_method(sweep: str | None, concurrency: str | None, request_rate: str | None, trace: Path | None) -> str:
    """--sweep, or its default: auto (adaptive given a prediction) with no levels and no trace, else doubling."""
    return sweep or ("auto" if concurrency is None and request_rate is None and trace is None else "doubling")


def _from_workload_config(path: Path, given: dict[str, Any]) -> tuple[Any, ...]:
    """An AIPerf spec's workload and load as the flags' values; a flag given beside it is bad input."""
    from sagellm.bench.aiperf import read_spec
    from sagellm.bench.specs import Closed

    at_default = {"--shared-prefix": 0, "--seed": 0, "--ramp": False}  # these flags' defaults are not None
    if both := [flag for flag, value in given.items() if value is not None and value != at_default.get(flag)]:
        raise InputError(f"{', '.join(both)}: not with --workload-config, which sets the workload and the load")
    read = read_spec(path)
    w, load = read.workload, read.load
    if isinstance(load, Closed):
        return (w.input_tokens, w.output_tokens, w.shared_prefix, w.seed, str(load.concurrency[0]), None, None, None,
                load.requests_per_level, load.duration_per_level_s, load.warmup)
    return (w.input_tokens, w.output_tokens, w.shared_prefix, w.seed, None, str(load.request_rate[0]), load.arrivals,
            load.max_in_flight, load.requests_per_level, load.duration_per_level_s, load.warmup)


def _target(target: str, url: str | None, api: str, served_model: str | None, endpoint_name: str | None,
            inference_component: str | None, keep: bool, time_scale: float,
            instance_startup: float | None) -> TargetSpec:
    """The target spec --target names, with the flags that belong to it."""
    from sagellm.bench import specs

    if target == "http":
        return specs.Http(url or "", api, served_model)
    if target == "sagemaker" and endpoint_name is not None:
        return specs.Endpoint(endpoint_name, inference_component, api)
    if target == "sagemaker":
        return specs.SageMaker(keep=keep, api=api)
    if target == "local":
        return specs.Local(time_scale, instance_startup, api)
    raise InputError(f"--target: {target!r} must be local, sagemaker or http")

"""`sagellm workload export|benchmark-job`: SageMaker AI's workload configs and benchmark jobs, written (and sent
only when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sagellm.cli.app import app
from sagellm.cli.options import as_flags
from sagellm.errors import InputError

workload_app = typer.Typer(help="A bench workload as SageMaker AI's AIPerf workload config, and benchmark jobs that "
                           "run it (requests written to --out; sent with --submit).", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

OUT_HELP = "folder for the <OperationName>.request.json files"
SUBMIT_HELP = "also send the request with boto3 in your AWS configuration's region (--region to choose)"
Out = Annotated[Path, typer.Option("--out", help=OUT_HELP)]
Submit = Annotated[bool, typer.Option("--submit", help=SUBMIT_HELP)]
Region = Annotated[str | None, typer.Option("--region", help="AWS region to send to (default: your AWS "
                                            "configuration's)")]


@workload_app.command("export", epilog="Examples:\n\n"
                      "  sagellm workload export --input-tokens 512:64 --output-tokens 128 --concurrency 8 "
                      "--out aws\n\n"
                      "  sagellm workload export --request-rate 2 --arrivals poisson --duration-per-level 300 "
                      "--name chat-2rps --submit")
def export(
    name: Annotated[str, typer.Option("--name", help="AIWorkloadConfigName")] = "sagellm-workload",
    input_tokens: Annotated[str, typer.Option("--input-tokens", help="prompt tokens: 512 or 512:64 "
                                              "(mean:stddev)")] = "256",
    output_tokens: Annotated[str, typer.Option("--output-tokens", help="generated tokens, same forms")] = "256",
    shared_prefix: Annotated[int, typer.Option("--shared-prefix", min=0, help="open every prompt with the same N "
                                               "tokens")] = 0,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="closed loop: requests in "
                                                    "flight (one level)")] = None,
    request_rate: Annotated[float | None, typer.Option("--request-rate", help="open loop: requests/s (one "
                                                       "level)")] = None,
    arrivals: Annotated[str, typer.Option("--arrivals", help="open loop: constant or poisson")] = "poisson",
    max_in_flight: Annotated[int | None, typer.Option("--max-in-flight", help="open loop: requests in flight at "
                                                      "most (AIPerf's concurrency beside a rate)")] = None,
    requests_per_level: Annotated[int | None, typer.Option("--requests-per-level", help="measured requests "
                                                           "(default: the bench's)")] = None,
    duration_per_level: Annotated[float | None, typer.Option("--duration-per-level", help="seconds instead of a "
                                                             "request count")] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="warm-up requests per stream (open loop: in all)")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="seed of the prompts")] = 0,
    dataset_s3_uri: Annotated[str | None, typer.Option("--dataset-s3-uri", help="a dataset in AIPerf's format in "
                                                       "S3, as the config's input channel")] = None,
    out: Out = Path("aws-ai-jobs"),
    submit: Submit = False,
    region: Region = None,
) -> None:
    """Write a bench workload as a CreateAIWorkloadConfig request (an AIPerf spec); `sagellm bench
    --workload-config FILE` reads that file back as a bench workload. See docs/aws-ai-jobs.md for what maps."""
    from sagellm.aws import ai_jobs
    from sagellm.bench import specs
    from sagellm.bench.aiperf import spec_of
    from sagellm.bench.load.open_loop import ARRIVALS
    from sagellm.bench.sweep.run import MAX_IN_FLIGHT

    if (concurrency is None) == (request_rate is None):
        raise InputError("--concurrency / --request-rate: give exactly one level (closed or open loop)")
    if request_rate is None and (max_in_flight is not None):
        raise InputError("--max-in-flight: only with --request-rate")
    if arrivals not in ARRIVALS:
        raise InputError(f"--arrivals: {arrivals!r} must be constant or poisson")
    workload = specs.WorkloadOptions(input_tokens=input_tokens, output_tokens=output_tokens,
                                     shared_prefix=shared_prefix, seed=seed)
    load: specs.Closed | specs.Open = specs.Closed((concurrency,), requests_per_level, duration_per_level, warmup) \
        if concurrency is not None else specs.Open((request_rate,), arrivals,  # type: ignore[arg-type]
                                                   max_in_flight or MAX_IN_FLIGHT, requests_per_level,
                                                   duration_per_level, warmup)
    try:
        spec = spec_of(workload, load)
    except InputError as exc:
        raise InputError(as_flags(exc.messages)) from None
    params = ai_jobs.workload_config_request(name, spec, dataset_s3_uri)
    _write_and_send(out, "CreateAIWorkloadConfig", params, submit, region)


@workload_app.command("benchmark-job", epilog="Example:\n\n"
                      "  sagellm workload benchmark-job --endpoint-name prod-chat --workload-config sagellm-workload "
                      "--role-arn arn:aws:iam::111122223333:role/Bench --output-s3-uri s3://bucket/bench/ --submit")
def benchmark_job(
    endpoint_name: Annotated[str, typer.Option("--endpoint-name", help="the endpoint AIPerf loads")],
    workload_config: Annotated[str, typer.Option("--workload-config", help="the AIWorkloadConfig's name or ARN "
                                                 "(`sagellm workload export --submit` creates one)")],
    role_arn: Annotated[str, typer.Option("--role-arn", help="IAM role SageMaker AI runs the job as")],
    output_s3_uri: Annotated[str, typer.Option("--output-s3-uri", help="where the job writes its results")],
    inference_component: Annotated[list[str] | None, typer.Option("--inference-component", help="load these "
                                   "components of the endpoint (repeat the option)")] = None,
    mlflow_arn: Annotated[str | None, typer.Option("--mlflow-arn", help="a SageMaker managed MLflow tracking "
                                                   "server or app to log to")] = None,
    name: Annotated[str | None, typer.Option("--name", help="AIBenchmarkJobName (default: "
                                             "<endpoint>-benchmark)")] = None,
    out: Out = Path("aws-ai-jobs"),
    submit: Submit = False,
    region: Region = None,
) -> None:
    """Write a CreateAIBenchmarkJob request: AIPerf run by SageMaker AI against an endpoint (or its components)."""
    from sagellm.aws import ai_jobs

    params = ai_jobs.benchmark_job_request(name or ai_jobs.job_name(f"{endpoint_name}-benchmark"),
                                           endpoint=endpoint_name, workload_config=workload_config,
                                           output_s3_uri=output_s3_uri, role_arn=role_arn,
                                           inference_components=tuple(inference_component or ()),
                                           mlflow_arn=mlflow_arn)
    _write_and_send(out, "CreateAIBenchmarkJob", params, submit, region)


def _write_and_send(out: Path, operation: str, params: dict[str, Any], submit: bool, region: str | None) -> None:
    """Write the request; with --submit send it and print the ARN the service gives."""
    from sagellm.aws import ai_jobs

    path = ai_jobs.write_request(out, operation, params)
    print(f"wrote {path}")
    if submit:
        reply = ai_jobs.submit(operation, params, ai_jobs.client(region))
        arn = next((v for k, v in reply.items() if k.endswith("Arn")), None)
        print(f"{operation}: {arn}")

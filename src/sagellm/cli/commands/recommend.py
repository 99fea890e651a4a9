"""`sagellm recommend`: the cheapest deployment predicted to meet an SLO at a load, written as a profile."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from sagellm.cli.app import app
from sagellm.cli.options import INT32_MAX, InputTokens, Json, ModelOption, OutputTokens, Region
from sagellm.clock import Clock
from sagellm.errors import ExitStatus, InputError

if TYPE_CHECKING:
    from sagellm.recommend import Recommendation, Space
    from sagellm.recommend.aws_job import AwsJob

QUANTIZATIONS = ("none", "gptq", "awq", "bitsandbytes", "eetq", "fp8")  # profiles.schema.Quantization
TARGETS = ("local", "sagemaker")
DEFAULT_TIME_SCALE = 0.05
DEFAULT_BUDGET_MINUTES = 30.0
PROGRESS_EVERY_S = 2.0  # at most one progress line on stderr this often while the search runs


def _names(text: str | None, option: str) -> tuple[str, ...]:
    """`a,b` → ('a', 'b'); an empty item is bad input."""
    if text is None:
        return ()
    items = tuple(t.strip() for t in text.split(","))
    if not all(items):
        raise InputError(f"{option}: {text!r} has an empty item (give a comma-separated list)")
    return items


@app.command(epilog="Examples:\n\n"
             "  sagellm recommend --model llama2-7b --request-rate 2 --thresholds slo.yaml --out rec\n\n"
             "  sagellm recommend --model llama2-13b --concurrency 32 --thresholds slo.yaml --families g5,g6e\n\n"
             "  sagellm recommend --model llama2-7b --request-rate 2 --peak-rate 6 --thresholds slo.yaml --json\n\n"
             "  sagellm recommend --model llama2-7b --concurrency 8 --thresholds slo.yaml --verify 2 --target sagemaker "
             "--hf-token-secret prod/huggingface/token")
def recommend(
    model: ModelOption,
    thresholds: Annotated[Path, typer.Option("--thresholds", help="the SLO: a thresholds file in the gate's "
                                             "language; a rule without `where` applies at the target load")],
    request_rate: Annotated[float | None, typer.Option("--request-rate", help="target load: requests/s, open "
                                                       "loop (Poisson arrivals)")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, max=INT32_MAX, help="target load: "
                                                    "concurrent requests, closed loop")] = None,
    peak_rate: Annotated[float | None, typer.Option("--peak-rate", help="requests/s at peak: the profile "
                                                    "autoscales from the target load's count to the peak's")] = None,
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    instances: Annotated[str | None, typer.Option("--instances", help="only these instance types "
                                                  "(comma-separated)")] = None,
    families: Annotated[str | None, typer.Option("--families", help="only these families, e.g. g5,g6e")] = None,
    engines: Annotated[str | None, typer.Option("--engine", "--engines", help="only these serving engines "
                                                "(comma-separated; default: every engine sagellm knows)")] = None,
    quantization: Annotated[str | None, typer.Option("--quantization", help="also search this weight "
                                                     "quantization (gptq, awq, fp8, …)")] = None,
    region: Region = "us-east-1",
    out: Annotated[Path, typer.Option("--out", help="folder for frontier.md, recommendation.json, frontier.png "
                                      "and profiles/<pick>.yaml")] = Path("recommendation"),
    verify: Annotated[int, typer.Option("--verify", min=0, max=20, help="bench the K cheapest candidates "
                                        "predicted to meet the SLO on --target and re-rank on what was "
                                        "measured")] = 0,
    target: Annotated[str, typer.Option("--target", help="--verify: local (embedded AWS + emulator) or "
                                        "sagemaker (your AWS account: deploys, benches and deletes one stack "
                                        "at a time; stores the measured correction)")] = "local",
    time_scale: Annotated[float | None, typer.Option("--time-scale", help="--verify --target local: run the "
                                                     "emulator's simulated time this much faster (default "
                                                     f"{DEFAULT_TIME_SCALE:g} = 20×)")] = None,
    budget_minutes: Annotated[float | None, typer.Option("--budget-minutes", help="--verify: start no bench after "
                                                         f"this many minutes (default {DEFAULT_BUDGET_MINUTES:g})")]
    = None,
    hf_token_secret: Annotated[str | None, typer.Option("--hf-token-secret", help="--verify --target sagemaker: "
                                                        "Secrets Manager name or ARN of the Hugging Face token "
                                                        "(gated models)")] = None,
    profiles_dir: Annotated[Path | None, typer.Option("--profiles-dir", help="the team's profiles folder: "
                                                      "predictions use its calibration/ corrections, and "
                                                      "--verify --target sagemaker stores one there (default: "
                                                      "./profiles)")] = None,
    headroom: Annotated[float, typer.Option("--headroom", min=0, max=99, help="percent: a pick meets every "
                                            "rule with at least this margin to its limit (predictions are "
                                            "not exact)")] = 10.0,
    aws_role_arn: Annotated[str | None, typer.Option("--aws-role-arn", help="hand the shortlist (the pick's instance type and the next "
                            "cheapest meeting the SLO, at most 3) to SageMaker AI: the IAM role its jobs run as; "
                            "writes CreateAIWorkloadConfig.request.json and CreateAIRecommendationJob.request.json "
                            "into --out")] = None,
    aws_model_s3_uri: Annotated[str | None, typer.Option("--aws-model-s3-uri", help="the model's weights in S3, as the job reads them")] = None,
    aws_output_s3_uri: Annotated[str | None, typer.Option("--aws-output-s3-uri", help="where the job writes its results")] = None,
    aws_job_name: Annotated[str | None, typer.Option("--aws-job-name", help="the job's and its workload config's name (default: the "
                            "profile's)")] = None,
    submit_aws_job: Annotated[bool, typer.Option("--submit-aws-job", help="also send both requests with boto3 in --region (the job runs real "
                              "endpoints: it costs GPU hours)")] = False,
    simulate_all: Annotated[bool, typer.Option("--simulate-all", help="simulate every candidate the mean model "
                                               "does not rule out, also those costing more than their engine's "
                                               "cheapest that meets the SLO (simulated frontier values past the "
                                               "pick; slower)")] = False,
    json_out: Json = False,
) -> None:
    """Search every deployment of a model in the catalog and pick the cheapest predicted to meet the SLO.

    Candidates: instance type × TP × inference-component copies × instance count × engine (× quantization),
    each predicted by the planner at the target load. Writes the frontier ($/h and $/1M tokens against the
    SLO), recommendation.json (every candidate, the pick, why each other lost), frontier.png and the pick as a
    profile extending the matching standard profile. Predictions use the corrections stored in
    <profiles-dir>/calibration/. --verify K benches the K cheapest on --target (at the target load and one step
    above), one at a time, and re-ranks on the measured numbers; on sagemaker it stores the measured correction
    as `sagellm calibrate` does. A pick meets every rule with --headroom to spare. A candidate costing more than its
    engine's cheapest that meets the SLO cannot win and is not simulated (the mean model's values; --simulate-all,
    --peak-rate, --verify and --aws-role-arn simulate it). Exit 0: a pick; 1: nothing
    meets the SLO (the limit that binds and the closest candidate's numbers are named); 2: bad input; 130:
    interrupted (the bench in flight torn down).
    """
    from sagellm.recommend import Load, choose, load_slo, search, write_all
    from sagellm.recommend.write import check_out

    started = time.monotonic()
    engine_names = _names(engines, "--engine")
    _check_options(request_rate, concurrency, peak_rate, bool(instances and families), engine_names, quantization)
    _check_verify_options(verify, target, time_scale, budget_minutes, hf_token_secret)
    check_out(out)
    aws_job = _aws_job(aws_role_arn, aws_model_s3_uri, aws_output_s3_uri, aws_job_name, submit_aws_job)
    load = Load(concurrency=concurrency, request_rate=request_rate)
    slo = load_slo(thresholds, load)
    space = _space(model, input_tokens, output_tokens, instances, families, region, engine_names, quantization,
                   profiles_dir)
    catalog_model, payload, rules = space.model, space.payload, slo.rules
    # A candidate that costs more than its engine's cheapest meeting the SLO cannot win, unless a peak, --verify or
    # the AWS job's shortlist reads candidates past the pick.
    prune = not (simulate_all or peak_rate is not None or verify or aws_role_arn is not None)
    found = search(space, load, rules, None if json_out else _progress(started), headroom / 100, slo.slo, prune)
    peak = Load(request_rate=peak_rate) if peak_rate is not None else None
    rec = choose(found, load, rules, payload, peak)
    elapsed = time.monotonic() - started
    interrupted = False
    if verify and rec.pick is not None:
        interrupted = _verify(rec, catalog_model.hf_id, verify, out, target, time_scale, budget_minutes, region,
                              hf_token_secret, profiles_dir)
    data = write_all(rec, catalog_model.hf_id, out)
    if aws_job is not None and rec.pick is not None:
        _hand_to_aws(rec, catalog_model.hf_id, aws_job, out, region, submit_aws_job)
    if json_out:
        print(json.dumps(data, indent=2, default=str))
    else:
        _print_frontier(rec, out, elapsed)
    if interrupted:
        raise typer.Exit(ExitStatus.INTERRUPTED)
    if rec.pick is None:
        _exit_nothing_meets(rec)
    if not json_out:
        _print_pick(rec, data)


def _space(model: str, input_tokens: int | None, output_tokens: int | None, instances: str | None,
           families: str | None, region: str, engine_names: tuple[str, ...], quantization: str | None,
           profiles_dir: Path | None) -> Space:
    """What the search covers: the model, the payload, the instance types, engines and quantizations, the region."""
    from sagellm.catalog import find_model
    from sagellm.engines import ENGINES
    from sagellm.planner import Payload
    from sagellm.recommend import Space, instance_types

    quants = ("none",) if quantization in (None, "none") else ("none", quantization)
    return Space(find_model(model, "--model"), Payload(input_tokens or 256, output_tokens or 256),
                 instance_types(_names(instances, "--instances"), _names(families, "--families"), region),
                 tuple(dict.fromkeys(engine_names)) or Space.engines, quants, region, profiles_dir,
                 inferentia=any(not ENGINES[e].gpu for e in engine_names))


def _hand_to_aws(rec: Recommendation, model_id: str, aws_job: AwsJob, out: Path, region: str, submit: bool) -> None:
    """Write the SageMaker AI recommendation job for the shortlist (and submit it when asked), saying so."""
    from sagellm.aws.ai_jobs import client
    from sagellm.recommend.aws_job import write_and_submit

    for line in write_and_submit(rec, model_id, aws_job, out, client(region) if submit else None):
        print(line, file=sys.stderr)


def _aws_job(role_arn: str | None, model_s3_uri: str | None, output_s3_uri: str | None, name: str | None,
             submit: bool) -> AwsJob | None:
    """The SageMaker AI job's settings: all three or none (and --submit-aws-job and --aws-job-name need them)."""
    from sagellm.recommend.aws_job import AwsJob

    given = {"--aws-role-arn": role_arn, "--aws-model-s3-uri": model_s3_uri, "--aws-output-s3-uri": output_s3_uri}
    if not any(given.values()):
        extra = [flag for flag, there in (("--submit-aws-job", submit), ("--aws-job-name", name)) if there]
        if extra:
            raise InputError(f"{', '.join(extra)}: needs --aws-role-arn, --aws-model-s3-uri and --aws-output-s3-uri")
        return None
    if missing := [flag for flag, value in given.items() if not value]:
        raise InputError(f"{', '.join(missing)}: required with {', '.join(f for f in given if f not in missing)} "
                         "(a SageMaker AI recommendation job needs a role, the model in S3 and an output S3 URI)")
    return AwsJob(role_arn or "", model_s3_uri or "", output_s3_uri or "", name)


def _progress(started: float) -> Callable[[int, int, int], None]:
    """Progress lines on stderr while the search predicts: at the start, then every few seconds, and the last."""
    last = [-PROGRESS_EVERY_S]

    def say(done: int, total: int, candidates: int) -> None:
        now = time.monotonic() - started
        if done in (0, total) or now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            print(f"recommend: {done}/{total} instance types searched, {candidates} candidates predicted "
                  f"({now:.0f} s)", file=sys.stderr, flush=True)
    return say


def _verify(rec: Recommendation, model_id: str, k: int, out: Path, target: str, time_scale: float | None,
            budget_minutes: float | None, region: str, hf_token_secret: str | None,
            profiles_dir: Path | None) -> bool:
    """Bench the finalists on the target and re-rank; → whether a signal cut it short."""
    from sagellm import bench
    from sagellm.recommend.verify import verify as verify_candidates

    spec = bench.SageMaker() if target == "sagemaker" else bench.Local(time_scale=time_scale or DEFAULT_TIME_SCALE)
    done = verify_candidates(rec, model_id, k, out, target=spec, budget_minutes=budget_minutes or
                             DEFAULT_BUDGET_MINUTES, say=lambda line: print(line, file=sys.stderr), region=region,
                             hf_token_secret=hf_token_secret, profiles_dir=profiles_dir)
    return done.interrupted


def _check_verify_options(verify: int, target: str, time_scale: float | None, budget_minutes: float | None,
                          hf_token_secret: str | None) -> None:
    """--verify's own options: each only where it applies, as bad input."""
    problems = []
    if target not in TARGETS:
        problems.append(f"--target: {target!r} must be local or sagemaker")
    given = {"--target": target != "local", "--time-scale": time_scale is not None,
             "--budget-minutes": budget_minutes is not None, "--hf-token-secret": hf_token_secret is not None}
    if not verify:
        problems += [f"{flag}: only with --verify K (it sets how the candidates are benched)"
                     for flag, there in given.items() if there]
    if target == "sagemaker" and time_scale is not None:
        problems.append("--time-scale: only with --target local (a SageMaker endpoint runs in real time)")
    if target == "local" and hf_token_secret is not None and verify:
        problems.append("--hf-token-secret: only with --target sagemaker (the local emulator loads no weights)")
    if time_scale is not None and (problem := Clock.scale_problem(time_scale, "--time-scale")):
        problems.append(problem)
    if budget_minutes is not None and not budget_minutes > 0:
        problems.append(f"--budget-minutes: {budget_minutes:g} must be > 0")
    if problems:
        raise InputError(problems)


def _check_options(request_rate: float | None, concurrency: int | None, peak_rate: float | None,
                   instances_and_families: bool, engine_names: tuple[str, ...], quantization: str | None) -> None:
    """Every problem with the options at once, as bad input."""
    from sagellm.engines import ENGINES

    problems = _load_problems(request_rate, concurrency, peak_rate)
    if instances_and_families:
        problems.append("--instances / --families: give one or the other")
    problems += [f"--engine: unknown engine {e!r} (known: {', '.join(ENGINES)})" for e in engine_names
                 if e not in ENGINES]
    if quantization is not None and quantization not in QUANTIZATIONS:
        problems.append(f"--quantization: unknown {quantization!r} (known: {', '.join(QUANTIZATIONS)})")
    if problems:
        raise InputError(problems)


def _load_problems(request_rate: float | None, concurrency: int | None, peak_rate: float | None) -> list[str]:
    """What is wrong with the target load and the peak."""
    problems = []
    if (request_rate is None) == (concurrency is None):
        problems.append("--request-rate / --concurrency: give exactly one target load (requests/s, or concurrent "
                        "requests)")
    for flag, rate in (("--request-rate", request_rate), ("--peak-rate", peak_rate)):
        if rate is not None and not rate > 0:
            problems.append(f"{flag}: {rate:g} is not a positive number of requests per second")
    if peak_rate is not None and request_rate is None:
        problems.append("--peak-rate: needs --request-rate (autoscaling sizes from a rate to a peak rate)")
    elif peak_rate is not None and request_rate is not None and peak_rate < request_rate:
        problems.append(f"--peak-rate: {peak_rate:g}/s is below --request-rate {request_rate:g}/s")
    return problems


def _print_frontier(rec: Recommendation, out: Path, elapsed: float) -> None:
    """The frontier table (with what --verify measured) and what was written."""
    from sagellm.recommend import frontier_markdown

    print(frontier_markdown(rec))
    print(f"{len(rec.candidates)} candidates predicted in {elapsed:.1f} s; wrote {out}/frontier.md, "
          f"recommendation.json, frontier.png")


def _exit_nothing_meets(rec: Recommendation) -> NoReturn:
    """Exit 1: one line for the verdict and the limit that binds, one for the closest candidate's numbers."""
    from sagellm.recommend.choose import binding_limit, closest_numbers
    from sagellm.recommend.search import CONTEXT

    how = "measured" if rec.verification else "predicted"
    print(f"sagellm: nothing is {how} to meet the SLO at {rec.load.name}; {binding_limit(rec)}", file=sys.stderr)
    if rec.closest is not None and rec.closest.limit != CONTEXT:  # over its context, no deployment is closer
        print(f"closest: {closest_numbers(rec, rec.closest)}", file=sys.stderr)
    raise typer.Exit(ExitStatus.GATE_FAILED)


def _print_pick(rec: Recommendation, data: dict[str, Any]) -> None:
    """The pick, its price at the load, its profile, and its autoscaling with a peak."""
    pick = rec.pick
    assert pick is not None
    from sagellm.recommend.choose import passed_over_for_headroom
    from sagellm.recommend.slo import describe_rule

    print(f"pick: {pick.label()}: ${pick.usd_per_h:.2f}/h at {rec.load.name} "
          f"(profile: {data['profile']})")
    print("margins: " + "; ".join(describe_rule(r, pick.values.get(r.label)) for r in rec.rules))
    if data["engine_verdict"]:
        print(data["engine_verdict"])
    if passed := passed_over_for_headroom(rec):
        cheapest = passed[0]
        more = f" (and {len(passed) - 1} more)" if len(passed) > 1 else ""
        print(f"passed over for headroom only: {cheapest.label()} at ${cheapest.usd_per_h:.2f}/h "
              f"{rec.reason(cheapest)}{more}")
    if rec.peak is not None:
        print(f"autoscaling {rec.peak.min_capacity}..{rec.peak.max_capacity}, target "
              f"{rec.peak.target_value:g} concurrent requests per container, sized for {rec.peak.peak.name}")

"""`sagellm plan`: the predicted curve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sagellm.cli.app import app
from sagellm.cli.options import (
    INT32_MAX,
    EngineOption,
    InstanceOption,
    Json,
    ModelOption,
    ProfilesDir,
    Region,
    as_flags,
    concurrency_levels,
)

if TYPE_CHECKING:
    from sagellm.bench.client.workload import Workload
    from sagellm.planner import Shape
    from sagellm.profiles.plan import DeploymentPlan

LENGTHS = "512 (fixed), 512:64 (normal: mean:stddev) or 256-1024 (uniform: min-max)"


@app.command(epilog="Examples:\n\n"
             "  sagellm plan --profile max-throughput --model meta-llama/Llama-2-7b-hf --instance ml.g5.2xlarge\n\n"
             "  sagellm plan --profile replicas --model llama2-13b --instance ml.p4d.24xlarge --tensor-parallel 1\n\n"
             "  sagellm plan --profile min-latency --model llama2-70b --instance ml.p4d.24xlarge --input-tokens 2048 --json\n\n"
             "  sagellm plan --profile max-throughput --model llama2-7b --input-tokens 256-2048 --output-tokens 256:64\n\n"
             "  sagellm plan --profile max-throughput --model llama2-7b --dataset sharegpt.json   # its lengths")
def plan(
    profile: Annotated[str, typer.Option("--profile", help="profile name")],
    model: ModelOption,
    instance: InstanceOption = None,
    engine: EngineOption = None,
    tensor_parallel: Annotated[int | None, typer.Option("--tensor-parallel", min=1, max=INT32_MAX,
                                                           help="GPUs per copy (overrides the profile)")] = None,
    replicas: Annotated[int | None, typer.Option("--replicas", min=1, max=INT32_MAX, help="copies per instance "
                                                    "(inference components)")] = None,
    instance_count: Annotated[int | None, typer.Option("--instance-count", min=1, max=INT32_MAX,
                                                          help="instances behind the endpoint")] = None,
    input_tokens: Annotated[str | None, typer.Option("--input-tokens", help=f"prompt tokens per request: {LENGTHS}, "
                                                     "as the bench draws them (default: the profile's payload)")]
    = None,
    output_tokens: Annotated[str | None, typer.Option("--output-tokens", help=f"generated tokens per request: "
                                                      f"{LENGTHS}")] = None,
    shared_prefix: Annotated[int, typer.Option("--shared-prefix", min=0, help="open every prompt with the same N "
                                               "tokens, as bench --shared-prefix (the prefix caches serve them)")] = 0,
    prefixes: Annotated[int, typer.Option("--prefixes", min=1, help="N distinct shared prefixes, as bench "
                                          "--prefixes, routed as the profile's routing says")] = 1,
    dataset: Annotated[Path | None, typer.Option("--dataset", help="the lengths of a JSONL or ShareGPT file's "
                                                 "requests, as the bench reads it (bench --dataset)")] = None,
    turns: Annotated[str | None, typer.Option("--turns", help="multi-turn conversations of this many turns (3, "
                                              "3:1 or 2-6), each turn re-sending the history, as bench --turns")]
    = None,
    think_time: Annotated[str | None, typer.Option("--think-time", help="with --turns: seconds between a reply and "
                                                   "the next turn (2, 2:0.5 or 1-3) [default: 0]")] = None,
    concurrency: Annotated[str, typer.Option("--concurrency", help="endpoint-wide levels")] =
    "1,2,4,8,16,32,64,128,256,512",
    trace: Annotated[Path | None, typer.Option("--trace", help="simulate a request trace replayed as `bench "
                                               "--trace` sends it (Mooncake JSONL or Azure CSV: its arrival "
                                               "times and lengths) instead of the curve")] = None,
    trace_speed: Annotated[float, typer.Option("--trace-speed", help="with --trace: this much faster")] = 1.0,
    trace_requests: Annotated[int | None, typer.Option("--trace-requests", help="with --trace: only its first N "
                                                       "requests")] = None,
    trace_window: Annotated[str | None, typer.Option("--trace-window", help="with --trace: only the requests due "
                                                     "in START-END seconds of the trace")] = None,
    region: Region = "us-east-1",
    profiles_dir: ProfilesDir = None,
    json_out: Json = False,
) -> None:
    """Predict the latency–throughput curve of a profile before paying for a GPU hour.

    Per concurrency, from simulated requests (the emulator's engine on a virtual clock, the bench's closed
    loop): p50 ms/token (e2e ÷ output tokens, the published definition), TTFT, ITL, e2e (p90 of ms/token and
    TTFT in --json), tokens/s, and whether requests would exceed the 60 s invocation timeout; plus KV capacity, the knee
    (max throughput ÷ latency), the max-throughput point inside the timeout and $/1M tokens.

    --json prints {"shape": {...}, "environment": {...}, "curve": {"points": [...], "knee", "max_throughput",
    "kv_capacity_tokens_per_copy", "max_sequences_per_copy", "usd_per_h", "usd_per_1m_tokens_at_max_throughput"}}.
    """
    from dataclasses import replace

    from sagellm.bench.client.trace import TraceOptions, parse_window
    from sagellm.bench.client.workload import Workload, WorkloadOptions
    from sagellm.bench.predicted import talks_of
    from sagellm.errors import InputError
    from sagellm.planner import Payload
    from sagellm.profiles import design_for, profile_payload
    from sagellm.results.simulated import conversation_curve, simulated_curve

    levels = concurrency_levels(concurrency)
    if trace is None and (trace_speed != 1.0 or trace_requests is not None or trace_window is not None):
        raise InputError("--trace-speed/--trace-requests/--trace-window: only with --trace")
    try:  # the bench's workload: its lengths, drawn per request as a bench with the same options sends them
        replay = None if trace is None else TraceOptions(trace, trace_speed, trace_requests,
                                                         parse_window(trace_window, "--trace-window"))
        workload = Workload(WorkloadOptions(input_tokens=input_tokens, output_tokens=output_tokens, dataset=dataset,
                                            shared_prefix=shared_prefix, prefixes=prefixes, turns=turns,
                                            think_time_s=think_time, trace=replay),
                            profile_payload(profile, profiles_dir))
    except InputError as exc:
        raise InputError(as_flags(exc.messages)) from None
    varied = workload.inputs.kind != "fixed" or workload.outputs.kind != "fixed" or dataset is not None
    # The longest request sizes the plan's limits (each request must be taken); the mean one its prediction.
    d = design_for(profile, model, instance, payload=Payload(*workload.longest()), region=region,
                   profiles_dir=profiles_dir, tensor_parallel=tensor_parallel, copies=replicas,
                   instance_count=instance_count, engine=engine)
    if workload.trace is not None:
        _print_trace(d.plan(), d.shape(), workload, json_out)
        return
    talks = talks_of(workload)
    by_turn: dict[int, Any] = {}
    if talks is not None:
        curve, summaries = conversation_curve(d.plan(), d.shape(), workload.payload(), levels, region, talks)
        by_turn = {c: [t.model_dump() for t in s.by_turn or ()] for c, s in summaries.items()}
    else:
        curve = simulated_curve(d.plan(), d.shape(), workload.payload(), levels, region,
                                sizes=workload.sizes if varied else None, prefixes=workload.shared_prefixes())
    curve = replace(curve, notes=(*d.notes, *curve.notes))  # the design's own (Inferentia: NeuronCores used)
    main = d.copies[0]
    shape = {"profile": d.profile.name, "model": main.model.hf_id, "instance_type": d.instance.instance_type,
             "tensor_parallel": main.tensor_parallel, "copies_per_instance": main.copies, "instance_count": d.instance_count,
             "quantization": main.quantization, "container": f"{d.container} {d.container_version}"}
    env = d.environment
    if json_out:
        extra = {"by_turn": by_turn} if talks is not None else {}  # conversations: per level, per turn
        print(json.dumps({"shape": shape, "environment": env, "curve": curve.to_dict(), **extra}, indent=2))
        return
    from sagellm.render import print_curve

    print_curve(shape, env, curve)


def _print_trace(plan: DeploymentPlan, shape: Shape, workload: Workload, json_out: bool) -> None:
    """The plan's endpoint replaying the workload's trace: what it would do to those requests, as a bench level."""
    from sagellm.bench.client.trace import trace_prefixes
    from sagellm.planner import StepModel
    from sagellm.results.simulated import simulated_trace

    trace = workload.trace
    assert trace is not None
    _, level = simulated_trace(plan, StepModel(shape), workload.payload(), trace.arrivals_s, workload.sizes,
                               trace.rate, prefixes=trace_prefixes(trace))
    record = trace.describe()
    if json_out:
        print(json.dumps({"trace": record.model_dump(mode="json"), "level": level.model_dump(mode="json")}, indent=2))
        return
    print(f"trace replay of {record.file} ({record.format}): {record.rows} of {record.rows_in_file} requests over "
          f"{record.duration_s:g} s at speed {record.speed:g} (mean {record.request_rate:.3g} requests/s), "
          "simulated on the emulator's engine")
    print(f"  requests {level.requests}, errors {sum(level.errors.values())}, throughput {level.throughput_tokens_per_s:.1f} "
          "tokens/s")
    for name, stats in (("TTFT ms", level.ttft_ms), ("ITL ms", level.itl_ms), ("e2e s", level.e2e_s),
                        ("ms/token", level.latency_ms_per_token)):
        print(f"  {name:9} p50 {stats.p50 or 0:.4g} · p90 {stats.p90 or 0:.4g} · p99 {stats.p99 or 0:.4g}")

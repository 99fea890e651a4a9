"""`sagellm plan`: the predicted curve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

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
    concurrency_levels,
)

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
    dataset: Annotated[Path | None, typer.Option("--dataset", help="the lengths of a JSONL or ShareGPT file's "
                                                 "requests, as the bench reads it (bench --dataset)")] = None,
    concurrency: Annotated[str, typer.Option("--concurrency", help="endpoint-wide levels")] =
    "1,2,4,8,16,32,64,128,256,512",
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

    from sagellm.bench.client.workload import Workload, WorkloadOptions
    from sagellm.bench.predicted import simulated_curve
    from sagellm.errors import InputError
    from sagellm.planner import Payload
    from sagellm.profiles import design_for, profile_payload

    levels = concurrency_levels(concurrency)
    try:  # the bench's workload: its lengths, drawn per request as a bench with the same options sends them
        workload = Workload(WorkloadOptions(input_tokens=input_tokens, output_tokens=output_tokens, dataset=dataset),
                            profile_payload(profile, profiles_dir))
    except InputError as exc:
        raise InputError([m.replace("WorkloadOptions.", "--").replace("_tokens", "-tokens") for m in exc.messages]) \
            from None
    varied = workload.inputs.kind != "fixed" or workload.outputs.kind != "fixed" or dataset is not None
    # The longest request sizes the plan's limits (each request must be taken); the mean one its prediction.
    d = design_for(profile, model, instance, payload=Payload(*workload.longest()), region=region,
                   profiles_dir=profiles_dir, tensor_parallel=tensor_parallel, copies=replicas,
                   instance_count=instance_count, engine=engine)
    curve = simulated_curve(d.plan(), d.shape(), workload.payload(), levels, region,
                            sizes=workload.sizes if varied else None)
    curve = replace(curve, notes=(*d.notes, *curve.notes))  # the design's own (Inferentia: NeuronCores used)
    main = d.copies[0]
    shape = {"profile": d.profile.name, "model": main.model.hf_id, "instance_type": d.instance.instance_type,
             "tensor_parallel": main.tp, "copies_per_instance": main.copies, "instance_count": d.instance_count,
             "quantization": main.quantization, "container": f"{d.container} {d.container_version}"}
    env = d.environment
    if json_out:
        print(json.dumps({"shape": shape, "environment": env, "curve": curve.to_dict()}, indent=2))
        return
    from sagellm.render import print_curve

    print_curve(shape, env, curve)

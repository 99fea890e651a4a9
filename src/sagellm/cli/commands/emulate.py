"""`sagellm emulate`: the local endpoint, standalone."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import (
    InputTokens,
    InstanceOption,
    ModelOption,
    ModelS3Uri,
    OutputTokens,
    ProfilesDir,
    Region,
    payload_from,
)
from sagellm.clock import Clock


@app.command()
def emulate(
    profile: Annotated[str, typer.Option("--profile", help="profile name")],
    model: ModelOption,
    instance: InstanceOption = None,
    model_s3_uri: ModelS3Uri = None,
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
    from sagellm import profiles
    from sagellm.catalog.s3_weights import split_s3_prefix
    from sagellm.emulator import run_emulator

    clock = Clock.of(time_scale, "--time-scale")
    if model_s3_uri is not None:
        split_s3_prefix(model_s3_uri, "--model-s3-uri")
    # design_for, not resolve: the emulator serves a local model folder without its weights staged in S3.
    plan = profiles.design_for(profile, model, instance, payload=payload_from(input_tokens, output_tokens),
                               region=region, profiles_dir=profiles_dir, model_s3_uri=model_s3_uri).plan()
    print(f"emulating {plan.profile}: {plan.primary.model_id} on {plan.instance_type} at http://127.0.0.1:{port} "
          f"(time scale {time_scale:g}); Ctrl-C to stop", file=sys.stderr)
    run_emulator(plan, port=port, clock=clock, endpoint_name=endpoint_name)

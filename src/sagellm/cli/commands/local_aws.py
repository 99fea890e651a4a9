"""`sagellm local-aws`: the local AWS, standalone."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import Region


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

"""`sagellm cdk`: the CDK CLI sagellm deploys with."""

from __future__ import annotations

import typer

from sagellm.cli.app import app
from sagellm.errors import ExitStatus


@app.command("cdk", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def cdk(ctx: typer.Context) -> int:
    """Run the AWS CDK CLI sagellm deploys with (SAGELLM_CDK_CLI, the checkout's, a compatible `cdk` on
    PATH, else the pinned one fetched once into ~/.cache/sagellm) with the arguments given, e.g.
    `sagellm cdk synth -c profile=max-throughput -c model=tiiuae/falcon-7b`; exits with the CLI's status.
    `sagellm cdk -- --help` prints the CLI's own help."""
    import os
    import subprocess

    from sagellm.aws.cdk_cli_lookup import find_cli, own_python_first
    from sagellm.aws.node import use_bundled_node

    env = dict(os.environ)
    use_bundled_node(env)  # the app's jsii runs on the bundled Node: none needs to be on PATH
    own_python_first(env)  # cdk.json's `python3 app.py` runs this sagellm, its virtualenv active or not
    try:
        return subprocess.run([*find_cli(), *ctx.args], env=env, check=False).returncode
    except KeyboardInterrupt:  # the CLI got the same Ctrl-C
        return ExitStatus.INTERRUPTED

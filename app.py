"""CDK app: `cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]`.

Other context keys: `hf_token_secret` (Secrets Manager name or ARN of the Hugging Face token; gated models
need it), `profiles_dir` (a team's profile folder), `input_tokens`/`output_tokens` (the workload the
admission limit is sized for; default: the profile's payload), `stack_name` (default
`sagellm-<profile>-<model>`), `bootstrapless=true` (no bootstrap stack needed, e.g. for a local AWS).
"""

from __future__ import annotations

import sys

from sagellm.aws.node import use_bundled_node

use_bundled_node()  # before aws_cdk starts jsii: the bundled Node, without the end-of-life banner

from aws_cdk import App, BootstraplessSynthesizer, Validations
from cdk_nag import AwsSolutionsChecks

from sagellm.cdk_context import read_context
from sagellm.errors import ExitStatus, InputError
from sagellm.profiles import resolve
from sagellm.stacks import EndpointStack


def fail(messages: list[str]) -> None:
    """Print one line per problem (no traceback) and exit with the bad-input status."""
    for message in messages:
        print(f"sagellm: bad cdk context: {message}", file=sys.stderr)
    sys.exit(ExitStatus.BAD_INPUT)


app = App()
try:
    ctx = read_context(app.node.try_get_context, app.node.get_all_context())
    plan = resolve(ctx.profile, ctx.model, ctx.instance, payload=ctx.payload, region=ctx.region,
                   profiles_dir=ctx.profiles_dir, hf_token_secret=ctx.hf_token_secret)
    EndpointStack(
        app,
        "Endpoint",
        plan=plan,
        stack_name=ctx.stack_name,
        synthesizer=BootstraplessSynthesizer() if ctx.bootstrapless else None,
    )
except InputError as error:
    fail(error.messages)
# Always on: a new AwsSolutions finding fails `cdk synth`; acknowledgements (with reasons) live in the constructs.
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()

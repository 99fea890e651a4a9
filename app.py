"""CDK app: `cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]`.

Other context keys: `profiles_dir` (a team's profile folder), `stack_name` (default
`sagellm-<profile>-<model>`), `bootstrapless=true` (no bootstrap stack needed, e.g. for a local AWS).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from aws_cdk import App, BootstraplessSynthesizer, Validations
from cdk_nag import AwsSolutionsChecks

from sagellm.errors import ExitStatus, InputError
from sagellm.profiles import resolve
from sagellm.stacks import EndpointStack


def fail(messages: list[str]) -> None:
    """Print one line per problem (no traceback) and exit with the bad-input status."""
    for message in messages:
        print(f"sagellm: bad cdk context: {message}", file=sys.stderr)
    sys.exit(ExitStatus.BAD_INPUT)


app = App()
context = app.node.try_get_context
profile, model = context("profile"), context("model")
missing = [key for key, value in (("profile", profile), ("model", model)) if not value]
if missing:
    fail(
        [
            f"{key}: missing (cdk synth -c profile=<name> -c model=<Hugging Face id>; `sagellm profiles list`)"
            for key in missing
        ]
    )
try:
    plan = resolve(
        profile,
        model,
        context("instance"),
        region=context("region") or "us-east-1",
        profiles_dir=Path(context("profiles_dir")) if context("profiles_dir") else None,
    )
    model_slug = re.sub(r"[^a-z0-9]+", "-", model.split("/")[-1].lower()).strip("-")
    EndpointStack(
        app,
        "Endpoint",
        plan=plan,
        stack_name=context("stack_name") or f"sagellm-{profile}-{model_slug}",
        synthesizer=BootstraplessSynthesizer() if str(context("bootstrapless")).lower() == "true" else None,
    )
except InputError as error:
    fail(error.messages)
# Always on: a new AwsSolutions finding fails `cdk synth`; acknowledgements (with reasons) live in the constructs.
Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()

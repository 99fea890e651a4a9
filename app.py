"""CDK app: `cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]`.

Other context keys: `hf_token_secret` (Secrets Manager name or ARN of the Hugging Face token; gated models
need it), `profiles_dir` (a team's profile folder), `input_tokens`/`output_tokens` (the workload the
admission limit is sized for; default: the profile's payload), `stack_name` (default
`sagellm-<profile>-<model>`), `bootstrapless=true` (no bootstrap stack needed, e.g. for a local AWS).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagellm.aws.node import use_bundled_node

use_bundled_node()  # before aws_cdk starts jsii: the bundled Node, without the end-of-life banner

from aws_cdk import App, BootstraplessSynthesizer, Validations
from cdk_nag import AwsSolutionsChecks

from sagellm.errors import ExitStatus, InputError
from sagellm.planner import Payload
from sagellm.profiles import resolve
from sagellm.profiles.tokens import STORE_IT, token_errors
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


def payload() -> Payload | None:
    """The payload from `-c input_tokens=… -c output_tokens=…`, or None for the profile's."""
    raw = {key: context(key) for key in ("input_tokens", "output_tokens")}
    if all(value is None for value in raw.values()):
        return None
    try:
        tokens = {key: int(value) for key, value in raw.items() if value is not None}
    except ValueError:
        raise InputError(f"input_tokens/output_tokens: {raw} must be whole numbers of tokens") from None
    if min(tokens.values()) < 1:
        raise InputError(f"input_tokens/output_tokens: {raw} must be at least 1")
    return Payload(tokens.get("input_tokens", 256), tokens.get("output_tokens", 256))


def hf_token_secret(context: Callable[[str], Any]) -> str | None:
    """`-c hf_token_secret=<secret name or ARN>`, checked like a profile's; a token itself is never context."""
    errors = [f"{key}: a token is never passed as context (it would be written to cdk.out): {STORE_IT}"
              for key in ("hf_token", "HF_TOKEN") if context(key) is not None]
    secret = context("hf_token_secret")
    errors += token_errors({"hf_token_secret": secret}, lambda loc: loc[-1]) if secret is not None else []
    if errors:
        raise InputError(errors)
    return str(secret) if secret else None


try:
    plan = resolve(
        profile,
        model,
        context("instance"),
        payload=payload(),
        region=context("region") or "us-east-1",
        profiles_dir=Path(context("profiles_dir")) if context("profiles_dir") else None,
        hf_token_secret=hf_token_secret(context),
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

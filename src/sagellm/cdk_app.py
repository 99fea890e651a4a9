"""The CDK app: CDK context → one EndpointStack.

`cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]` runs it through the
root app.py; the bench runs it as `--app "<python> -m sagellm.cdk_app"`, so it never executes an app found in
the working directory. Context keys: see `endpoint_stack`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from aws_cdk import App, BootstraplessSynthesizer, Tags, Validations

from sagellm.errors import ExitStatus, InputError
from sagellm.planner import Payload
from sagellm.stacks import EndpointStack

# Stack tags the bench adds (context key → tag): which run made the stack, and the process that runs it.
BENCH_TAGS = {"bench_run": "sagellm:bench-run", "bench_process": "sagellm:bench-process"}


def default_stack_name(profile: str, model: str) -> str:
    """`sagellm-<profile>-<model>` (e.g. sagellm-max-throughput-llama-2-7b-hf)."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.split("/")[-1].lower()).strip("-")
    return f"sagellm-{profile}-{slug}"


def endpoint_stack(app: App) -> EndpointStack:
    """Build the EndpointStack the context asks for; every context key is read here.

    `profile`, `model` (required), `instance`, `region`, `profiles_dir`, `input_tokens`/`output_tokens`
    (the payload the token caps are sized for; default: the profile's), `stack_name` (default
    `sagellm-<profile>-<model>`; also the stack's construct id, so the CLI selects it by name),
    `bootstrapless=true` (no bootstrap stack needed), `bench_run`/`bench_process` (stack tags the bench sets).
    """
    from sagellm.profiles import resolve

    context: Callable[[str], str | None] = app.node.try_get_context
    profile, model = context("profile"), context("model")
    missing = [key for key, value in (("profile", profile), ("model", model)) if not value]
    if missing or profile is None or model is None:
        raise InputError([f"{key}: missing (cdk synth -c profile=<name> -c model=<Hugging Face id>; "
                          "`sagellm profiles list`)" for key in missing])
    profiles_dir = context("profiles_dir")
    plan = resolve(profile, model, context("instance"), payload=_payload(context),
                   region=context("region") or "us-east-1",
                   profiles_dir=Path(profiles_dir) if profiles_dir else None)
    name = context("stack_name") or default_stack_name(profile, model)
    bootstrapless = str(context("bootstrapless")).lower() == "true"
    stack = EndpointStack(app, name, plan=plan, stack_name=name,
                          synthesizer=BootstraplessSynthesizer() if bootstrapless else None)
    for key, tag in BENCH_TAGS.items():
        if value := context(key):
            Tags.of(stack).add(tag, value)
    return stack


def _payload(context: Callable[[str], str | None]) -> Payload | None:
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


def main() -> None:
    """Synthesize the app; bad context is one line per problem on stderr and exit 2, never a traceback."""
    from cdk_nag import AwsSolutionsChecks

    app = App()
    try:
        endpoint_stack(app)
    except InputError as error:
        for message in error.messages:
            print(f"sagellm: bad cdk context: {message}", file=sys.stderr)
        sys.exit(ExitStatus.BAD_INPUT)
    # Always on: a new AwsSolutions finding fails `cdk synth`; acknowledgements (with reasons) live in the constructs.
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


if __name__ == "__main__":
    main()

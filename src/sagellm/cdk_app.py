"""The CDK app: CDK context → one EndpointStack.

`cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…] [-c engine=vllm]` runs it through the
root app.py, resolving the profile; the bench runs it as `--app "<python> -m sagellm.cdk_app"` (so it never
executes an app found in the working directory) with `-c plan=<plan.json>`, the plan it already holds, which is
deployed as it is. Context keys: see `sagellm.cdk_context`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from sagellm.aws.node import use_bundled_node
from sagellm.cdk_context import read_context
from sagellm.errors import ExitStatus, InputError

if TYPE_CHECKING:  # aws_cdk starts jsii on import: only once the bundled Node is in place
    from aws_cdk import App

    from sagellm.stacks import EndpointStack

# Stack tags the bench adds (context key → tag): which run made the stack, and the process that runs it.
BENCH_TAGS = {"bench_run": "sagellm:bench-run", "bench_process": "sagellm:bench-process"}


def endpoint_stack(app: App) -> EndpointStack:
    """Build the EndpointStack the context asks for (InputError with one line per bad key).

    The stack's construct id is its name, so the CDK CLI selects it by name (`cdk deploy <name>`).
    """
    from aws_cdk import BootstraplessSynthesizer, Tags

    from sagellm import profiles
    from sagellm.stacks import EndpointStack
    ctx = read_context(app.node.try_get_context, app.node.get_all_context())
    plan = ctx.plan
    if plan is None:
        design = profiles.design_for(ctx.profile, ctx.model, ctx.instance, payload=ctx.payload, region=ctx.region,
                                     profiles_dir=ctx.profiles_dir, model_s3_uri=ctx.model_s3_uri, engine=ctx.engine)
        # resolve()'s check, with the fix spelled as context: a local folder's weights must be staged in S3.
        if errors := design.folder_errors(s3_option="-c model_s3_uri="):
            raise InputError(errors)
        plan = design.plan(ctx.hf_token_secret)
    stack = EndpointStack(app, ctx.stack_name, plan=plan, stack_name=ctx.stack_name,
                          synthesizer=BootstraplessSynthesizer() if ctx.bootstrapless else None)
    for key, tag in BENCH_TAGS.items():
        if value := app.node.try_get_context(key):
            Tags.of(stack).add(tag, str(value))
    return stack


def main() -> None:
    """Synthesize the app; bad context is one line per problem on stderr and exit 2, never a traceback."""
    use_bundled_node()  # before aws_cdk starts jsii: the bundled Node, without the end-of-life banner
    from aws_cdk import App, Validations
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

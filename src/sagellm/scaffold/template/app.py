"""SageMaker LLM endpoints from sagellm profiles, as a CDK app (written by `sagellm init`).

    cdk synth  -c profile=max-throughput -c model=tiiuae/falcon-7b
    cdk deploy -c profile=team -c model=tiiuae/falcon-7b [-c instance=ml.g5.12xlarge] [-c region=us-east-1]

sagellm's CDK app reads the context (profiles from ./profiles beside the standard ones), builds one stack
holding an `LlmEndpoint` (sagellm's construct), checks it with cdk-nag and synthesizes. Bad context is one
line per problem on stderr. No Node.js is needed on PATH: `main()` runs aws_cdk's jsii engine on the Node
that sagellm installs, chosen before aws_cdk is imported. Other context keys (hf_token_secret for gated
models, stack_name, …): see "Deploy with CDK" in sagellm's docs.
"""

from sagellm.cdk_app import main

main()

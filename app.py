"""CDK app: `cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]`.

Other context keys: `hf_token_secret` (Secrets Manager name or ARN of the Hugging Face token; gated models
need it), `profiles_dir` (a team's profile folder), `input_tokens`/`output_tokens` (the workload the
admission limit is sized for; default: the profile's payload), `stack_name` (default
`sagellm-<profile>-<model>`), `bootstrapless=true` (no bootstrap stack needed, e.g. for a local AWS),
`plan=<plan.json>` (a DeploymentPlan deployed as it is, instead of `profile` and `model`).
Wiring only: `sagellm.cdk_app` reads and checks the context (`sagellm.cdk_context`) and builds the stack.
"""

from sagellm.cdk_app import main

main()

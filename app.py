"""CDK app: `cdk deploy -c profile=<profile> -c model=<Hugging Face id> [-c instance=…] [-c region=…]`.

Wiring only: `sagellm.cdk_app` reads the context (every key is listed in `endpoint_stack`) and builds the stack.
"""

from sagellm.cdk_app import main

main()

"""A CDK app with alarms on an LLM endpoint: slow p90 model latency and any 5XX error, for the endpoint it
deploys and for one deployed elsewhere (by name).

    npx --no-install cdk synth --app "python examples/alarm_app.py" -c endpoint=prod-chat
"""

from __future__ import annotations

from aws_cdk import App, Stack
from aws_cdk import aws_cloudwatch as cloudwatch

from sagellm.constructs import LlmEndpoint
from sagellm.constructs.metrics import EndpointMetrics
from sagellm.profiles import resolve
from sagellm.stacks import EndpointStack

# SageMaker publishes ModelLatency in microseconds: 20 s at p90 for a 256-token answer is too slow.
SLOW_P90_US = 20_000_000


def alarms(stack: Stack, prefix: str, endpoint: EndpointMetrics) -> None:
    """A latency alarm (3 slow minutes in a row) and an error alarm (any 5XX in a minute)."""
    endpoint.metric_model_latency(statistic="p90").create_alarm(
        stack, f"{prefix}SlowModel", threshold=SLOW_P90_US, evaluation_periods=3,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description="p90 ModelLatency above 20 s for 3 minutes")
    endpoint.metric_errors("5XX").create_alarm(
        stack, f"{prefix}ServerErrors", threshold=0, evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description="the endpoint answered 5XX")


def build(app: App, existing_endpoint: str = "prod-chat") -> EndpointStack:
    """The endpoint stack with alarms on it, and on an endpoint deployed elsewhere."""
    # Llama 2 is gated on the Hub: the endpoint reads a token from this Secrets Manager secret.
    plan = resolve("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge", region="us-east-1",
                   hf_token_secret="prod/huggingface/token")
    stack = EndpointStack(app, "Endpoint", plan=plan, stack_name="sagellm-alarms")
    alarms(stack, "Llm", stack.endpoint)
    alarms(stack, "Existing", LlmEndpoint.from_endpoint_name(stack, "Existing", existing_endpoint))
    return stack


if __name__ == "__main__":
    app = App()
    build(app, app.node.try_get_context("endpoint") or "prod-chat")
    app.synth()

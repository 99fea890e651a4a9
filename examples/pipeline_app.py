"""A CDK Pipelines app that benches the LLM endpoint its stage deploys before anything is promoted.

    cdk synth --app "python examples/pipeline_app.py" -c connection_arn=arn:aws:codeconnections:… \
        -c repository=my-org/llm-service -c account=123456789012

The `Staging` stage deploys an LlmEndpoint; its `post` step (BenchStep) runs
`sagellm bench --target sagemaker --endpoint-name <that endpoint> --thresholds examples/gates.yaml` in
CodeBuild, publishes junit.xml to a report group, and fails (blocking the `Production` stage) on a non-zero
exit. Nothing is deployed or deleted by the bench.
"""

from __future__ import annotations

from aws_cdk import App, Environment, Stack, Stage, pipelines
from constructs import Construct

from sagellm import BenchStep, LlmEndpoint
from sagellm.profiles import resolve

MODEL, INSTANCE = "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge"
TOKEN_SECRET = "prod/huggingface/token"  # Secrets Manager secret holding a Hub token with access to the (gated) model


class LlmStage(Stage):
    """One stack holding the team's endpoint (in a real app: with its VPC, KMS key and role)."""

    def __init__(self, scope: Construct, id: str, *, env: Environment) -> None:
        super().__init__(scope, id, env=env)
        stack = Stack(self, "Llm")
        plan = resolve("max-throughput", MODEL, INSTANCE, region=env.region or "us-east-1",
                       hf_token_secret=TOKEN_SECRET)
        self.endpoint = LlmEndpoint(stack, "Chat", plan=plan)


class PipelineStack(Stack):
    """Source → synth → Staging (deploy, then bench and gate) → Production."""

    def __init__(self, scope: Construct, id: str, *, connection_arn: str, repository: str, env: Environment) -> None:
        super().__init__(scope, id, env=env)
        source = pipelines.CodePipelineSource.connection(repository, "main", connection_arn=connection_arn)
        synth = ["npm ci", "pip install .", "npx cdk synth --app 'python examples/pipeline_app.py'"]
        pipeline = pipelines.CodePipeline(self, "Pipeline",
                                          synth=pipelines.ShellStep("Synth", input=source, commands=synth))
        staging = LlmStage(self, "Staging", env=env)
        bench = BenchStep(self, "Bench", endpoint=staging.endpoint, thresholds="examples/gates.yaml", input=source,
                          bench_args=["--concurrency", "1,2,4,8,16"])
        pipeline.add_stage(staging, post=[bench])
        pipeline.add_stage(LlmStage(self, "Production", env=env))


def build(app: App) -> PipelineStack:
    """The pipeline stack, configured from context (placeholders when absent, enough to synthesize)."""
    context = app.node.try_get_context
    env = Environment(account=context("account") or "111111111111", region=context("region") or "us-east-1")
    return PipelineStack(app, "LlmPipeline", env=env, repository=context("repository") or "my-org/llm-service",
                         connection_arn=context("connection_arn") or "arn:aws:codeconnections:us-east-1:"
                         "111111111111:connection/00000000-0000-0000-0000-000000000000")


if __name__ == "__main__":
    app = App()
    build(app)
    app.synth()

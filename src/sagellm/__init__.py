"""sagellm: deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""

from sagellm.aws.node import node_for_jsii

__version__ = "0.3.0"

# Any sagellm import made before aws_cdk's (which starts jsii's Node) lets a user's own CDK app and its tests run
# with no Node.js installed: jsii then runs the one sagellm installs.
node_for_jsii()


# The constructs (sagellm.constructs), re-exported lazily: `import sagellm` does not import aws_cdk (the CLI stays fast).
__all__ = ["BenchStep", "ILlmEndpoint", "LlmComponent", "LlmEndpoint"]


def __getattr__(name: str) -> object:
    """`from sagellm import LlmEndpoint, LlmComponent, ILlmEndpoint, BenchStep`, importing aws_cdk only then."""
    if name in __all__:
        from sagellm import constructs

        return getattr(constructs, name)
    raise AttributeError(f"module 'sagellm' has no attribute {name!r}")

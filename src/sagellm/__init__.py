"""sagellm: deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`from sagellm import LlmEndpoint` without importing aws_cdk on `import sagellm` (the CLI stays fast)."""
    if name == "LlmEndpoint":
        from sagellm.constructs import LlmEndpoint

        return LlmEndpoint
    raise AttributeError(f"module 'sagellm' has no attribute {name!r}")

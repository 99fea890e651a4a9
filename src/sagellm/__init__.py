"""sagellm: deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""

__version__ = "0.3.0"


def __getattr__(name: str) -> object:
    """`from sagellm import LlmEndpoint, LlmComponent, BenchStep` without importing aws_cdk on `import sagellm` (the CLI stays
    fast)."""
    if name in ("LlmEndpoint", "LlmComponent", "BenchStep"):
        from sagellm import constructs

        return getattr(constructs, name)
    raise AttributeError(f"module 'sagellm' has no attribute {name!r}")

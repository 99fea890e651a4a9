"""sagellm: deploy, bench and predict LLM endpoints on Amazon SageMaker from named profiles."""

__version__ = "0.1.0"

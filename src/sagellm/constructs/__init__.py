"""CDK constructs: LlmEndpoint and its parts (role, model, endpoint config, inference components, scaling)."""

from sagellm.constructs.llm_endpoint import LlmEndpoint

__all__ = ["LlmEndpoint"]

"""CDK constructs: LlmEndpoint and its parts (role, model, endpoint config, inference components, scaling),
LlmComponent (one more model on an endpoint, as an inference component of its own), and BenchStep, the CDK
Pipelines step that benches a stage's endpoint."""

from sagellm.constructs.bench_step import BenchStep
from sagellm.constructs.llm_component import LlmComponent
from sagellm.constructs.llm_endpoint import LlmEndpoint
from sagellm.constructs.metrics import ILlmEndpoint

__all__ = ["BenchStep", "ILlmEndpoint", "LlmComponent", "LlmEndpoint"]

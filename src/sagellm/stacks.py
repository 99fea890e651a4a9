"""EndpointStack: what app.py and the bench deploy."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Environment, Stack, Tags
from constructs import Construct

from sagellm.catalog import check_offered
from sagellm.constructs import LlmEndpoint
from sagellm.profiles.plan import VERSION_TAG, DeploymentPlan, component_output


class EndpointStack(Stack):
    """One LlmEndpoint (id `Llm`) with outputs `EndpointName` and `ComponentName<Name>` per inference component."""

    def __init__(self, scope: Construct, id: str, *, plan: DeploymentPlan, **stack_kwargs: Any) -> None:
        check_offered(plan.instance_type, plan.region, "plan.instance_type")  # SageMaker would refuse it there
        stack_kwargs.setdefault("env", Environment(region=plan.region))
        stack_kwargs.setdefault(
            "description", f"sagellm {plan.profile}: {plan.primary.model_id} on {plan.instance_type}"
        )
        super().__init__(scope, id, **stack_kwargs)
        # Stack tags reach every resource CloudFormation tags, so `sagellm cleanup` finds leftovers. Not the version:
        # CloudFormation re-tags every resource when a stack tag changes, and on an inference component that update
        # may set back the copies the scaler added (LlmEndpoint tags the endpoint with it instead).
        for key, value in plan.tags.items():
            if key != VERSION_TAG:
                Tags.of(self).add(key, value)
        self.endpoint = LlmEndpoint(self, "Llm", plan=plan)
        CfnOutput(
            self, "EndpointName", value=self.endpoint.endpoint_name, description="SageMaker endpoint name"
        )
        for model_name, component_name in self.endpoint.inference_component_names.items():
            CfnOutput(
                self,
                component_output(model_name),
                value=component_name,
                description=f"Inference component of model {model_name!r}",
            )

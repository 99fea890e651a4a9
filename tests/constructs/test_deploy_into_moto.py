"""Two endpoints serving the same model from one stack deploy through CloudFormation (the local AWS, which
refuses a second inference component of the same name as SageMaker does)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import BootstraplessSynthesizer, Stack
from aws_cdk.assertions import Template
from construct_plans import cdk_app, two_model_plan

from sagellm.aws.local import LocalAws
from sagellm.constructs import LlmEndpoint

pytestmark = pytest.mark.integration


def test_two_endpoints_of_one_model_in_one_stack_deploy_and_delete(server: LocalAws) -> None:
    server.reset()
    stack = Stack(cdk_app(), "Shared", stack_name="sagellm-shared", synthesizer=BootstraplessSynthesizer())
    chat = LlmEndpoint(stack, "Chat", plan=two_model_plan())
    batch = LlmEndpoint(stack, "Batch", plan=two_model_plan())
    template = json.dumps(Template.from_stack(stack).to_json())

    cfn = server.client("cloudformation")
    cfn.create_stack(StackName="sagellm-shared", TemplateBody=template, Capabilities=["CAPABILITY_IAM"])
    status = cfn.describe_stacks(StackName="sagellm-shared")["Stacks"][0]["StackStatus"]
    reasons = [e.get("ResourceStatusReason") for e in cfn.describe_stack_events(StackName="sagellm-shared")
               ["StackEvents"] if "FAILED" in e["ResourceStatus"]]
    assert status == "CREATE_COMPLETE", reasons

    sagemaker = server.client("sagemaker")
    deployed = {c["InferenceComponentName"] for c in sagemaker.list_inference_components()["InferenceComponents"]}
    assert deployed == {*chat.inference_component_names.values(), *batch.inference_component_names.values()}
    assert len(deployed) == 4 and len(sagemaker.list_endpoints()["Endpoints"]) == 2

    cfn.delete_stack(StackName="sagellm-shared")
    assert server.leftovers() == {}

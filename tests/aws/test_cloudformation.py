"""Deleting a bench run's stack by name: only the stack that carries this run's tag, and only when it exists."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sagellm.aws import cloudformation
from sagellm.aws.local import LocalAws
from sagellm.errors import TargetError

TEMPLATE = json.dumps({"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}})


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    return server


def create(aws: LocalAws, name: str, **tags: str) -> None:
    aws.client("cloudformation").create_stack(
        StackName=name, TemplateBody=TEMPLATE, Tags=[{"Key": k, "Value": v} for k, v in tags.items()])


def live(aws: LocalAws) -> list[str]:
    return [s["StackName"] for s in aws.client("cloudformation").describe_stacks()["Stacks"]
            if s["StackStatus"] != "DELETE_COMPLETE"]


@pytest.mark.slow
def test_deletes_the_stack_of_this_run(aws: LocalAws) -> None:
    create(aws, "sagellm-bench-x-r1", **{"sagellm:bench-run": "r1"})

    assert cloudformation.delete_run_stack(aws.client("cloudformation"), "sagellm-bench-x-r1", "r1") is True

    assert live(aws) == []


def test_a_stack_that_was_never_created_is_reported_not_destroyed(aws: LocalAws) -> None:
    assert cloudformation.delete_run_stack(aws.client("cloudformation"), "sagellm-bench-x-r1", "r1") is False


@pytest.mark.parametrize("tags", [{"sagellm:bench-run": "other-run"}, {"sagellm:profile": "max-throughput"}, {}])
def test_refuses_a_stack_of_that_name_that_is_not_this_runs(aws: LocalAws, tags: dict[str, str]) -> None:
    create(aws, "sagellm-bench-x-r1", **tags)

    with pytest.raises(TargetError, match="not this run's 'r1': not deleting it"):
        cloudformation.delete_run_stack(aws.client("cloudformation"), "sagellm-bench-x-r1", "r1")

    assert live(aws) == ["sagellm-bench-x-r1"]


# ------------------------------------------------------------------------------------------ faults a real account has
# Stubbed with botocore's Stubber, which checks every request and reply against CloudFormation's service model.

STACK = {"StackName": "sagellm-bench-x-r1", "StackId": "arn:aws:cloudformation:eu-west-1:1:stack/sagellm-bench-x-r1/1"}
CLEANUP = "sagellm cleanup --region eu-west-1 --older-than 0s --yes"


def stubbed() -> tuple[Any, Stubber]:
    cfn = boto3.client("cloudformation", region_name="eu-west-1", aws_access_key_id="k", aws_secret_access_key="s")
    return cfn, Stubber(cfn)


def described(status: str, reason: str = "") -> dict[str, Any]:
    stack = {**STACK, "StackStatus": status, "CreationTime": datetime(2026, 11, 29, tzinfo=UTC)}
    return {"Stacks": [stack | ({"StackStatusReason": reason} if reason else {})]}


def gone(stubber: Stubber) -> None:
    stubber.add_client_error("describe_stacks", "ValidationError", f"Stack with id {STACK['StackId']} does not exist")


def test_throttled_status_calls_do_not_end_the_wait() -> None:
    cfn, stubber = stubbed()
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    stubber.add_client_error("describe_stacks", "Throttling", "Rate exceeded")
    stubber.add_response("describe_stacks", described("DELETE_IN_PROGRESS"))
    stubber.add_client_error("describe_stacks", "Throttling", "Rate exceeded")
    gone(stubber)
    slept: list[float] = []

    with stubber:
        cloudformation.delete_stack(cfn, STACK, wait_s=60, sleep=slept.append)

    stubber.assert_no_pending_responses()
    assert slept == [cloudformation.DELETE_POLL_S] * 3


def test_a_delete_failed_stack_is_deleted_once_more() -> None:
    cfn, stubber = stubbed()
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    stubber.add_response("describe_stacks", described("DELETE_FAILED", "Endpoint is Updating"))
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    gone(stubber)

    with stubber:
        cloudformation.delete_stack(cfn, STACK, wait_s=60, sleep=lambda _: None)

    stubber.assert_no_pending_responses()


def test_a_stack_that_stays_delete_failed_is_named_with_what_it_holds_and_the_command() -> None:
    cfn, stubber = stubbed()
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    stubber.add_response("describe_stacks", described("DELETE_FAILED", "Endpoint is Updating"))
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    stubber.add_response("describe_stacks", described("DELETE_FAILED", "Endpoint is Updating"))
    stubber.add_response("list_stack_resources", {"StackResourceSummaries": [
        {"LogicalResourceId": "ChatEndpoint", "ResourceType": "AWS::SageMaker::Endpoint",
         "ResourceStatus": "DELETE_FAILED", "LastUpdatedTimestamp": datetime(2026, 11, 29, tzinfo=UTC)},
        {"LogicalResourceId": "ChatRole", "ResourceType": "AWS::IAM::Role",
         "ResourceStatus": "DELETE_COMPLETE", "LastUpdatedTimestamp": datetime(2026, 11, 29, tzinfo=UTC)}]})

    with stubber, pytest.raises(TargetError) as raised:
        cloudformation.delete_stack(cfn, STACK, wait_s=60, sleep=lambda _: None)

    assert str(raised.value) == (
        "deleting stack sagellm-bench-x-r1 in eu-west-1 failed: the stack is DELETE_FAILED: Endpoint is Updating; "
        f"left: ChatEndpoint (AWS::SageMaker::Endpoint); delete with `{CLEANUP}` or "
        "`aws cloudformation delete-stack --stack-name sagellm-bench-x-r1 --region eu-west-1`")


def test_a_deletion_past_its_time_names_the_stack_still_there() -> None:
    cfn, stubber = stubbed()
    stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    for _ in range(3):
        stubber.add_response("describe_stacks", described("DELETE_IN_PROGRESS"))
    stubber.add_client_error("list_stack_resources", "ValidationError", "cannot list")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with stubber, pytest.raises(TargetError, match=r"still DELETE_IN_PROGRESS after 10 s; left: the stack; delete "):
        cloudformation.delete_stack(cfn, STACK, wait_s=10, sleep=sleep, clock=lambda: now[0])


@pytest.mark.parametrize("call", ["delete_stack", "describe_stacks"])
def test_credentials_that_expire_while_deleting_say_so_and_name_the_command(call: str) -> None:
    cfn, stubber = stubbed()
    if call == "describe_stacks":
        stubber.add_response("delete_stack", {}, {"StackName": STACK["StackId"]})
    stubber.add_client_error(call, "ExpiredToken", "The security token included in the request is expired")

    with stubber, pytest.raises(cloudformation.CredentialsExpired) as raised:
        cloudformation.delete_stack(cfn, STACK, wait_s=60, sleep=lambda _: None)

    message = str(raised.value)
    assert message.startswith("deleting stack sagellm-bench-x-r1 in eu-west-1 failed: the AWS credentials expired")
    assert f"renew the credentials, then delete with `{CLEANUP}`" in message

"""CloudFormation calls shared by deploy, teardown and cleanup, configured from a process environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sagellm.errors import TargetError

BENCH_RUN_TAG = "sagellm:bench-run"
BENCH_PROCESS_TAG = "sagellm:bench-process"
DELETE_POLL_S = 5


def session(env: Mapping[str, str]) -> boto3.session.Session:
    """A boto3 session configured like a child process with this environment (credentials, profile, region)."""
    return boto3.session.Session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        profile_name=env.get("AWS_PROFILE"),
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
    )


def client(env: Mapping[str, str], service: str = "cloudformation") -> Any:
    """A client for `service` as a child process with this environment would reach it."""
    url = env.get(f"AWS_ENDPOINT_URL_{service.upper().replace('-', '_')}") or env.get("AWS_ENDPOINT_URL")
    return session(env).client(service, endpoint_url=url)  # type: ignore[call-overload]


def tags(stack: dict[str, Any]) -> dict[str, str]:
    """A DescribeStacks entry's tags as a dict."""
    return {tag["Key"]: tag["Value"] for tag in stack.get("Tags", [])}


def describe(cfn: Any, name: str) -> dict[str, Any] | None:
    """The live stack of that name or id, or None when there is none."""
    try:
        stack: dict[str, Any] = cfn.describe_stacks(StackName=name)["Stacks"][0]
    except ClientError as error:
        if "does not exist" in str(error):
            return None
        raise
    return None if stack["StackStatus"] == "DELETE_COMPLETE" else stack


def delete_stack(cfn: Any, stack: dict[str, Any], wait_s: float) -> None:
    """Delete a described stack and wait; TargetError naming what is left when it fails."""
    start_delete(cfn, stack)
    wait_deleted(cfn, stack, wait_s)


def start_delete(cfn: Any, stack: dict[str, Any]) -> None:
    """Ask CloudFormation to delete a described stack (by id: a name could be reused meanwhile)."""
    try:
        cfn.delete_stack(StackName=stack["StackId"])
    except (ClientError, BotoCoreError) as error:
        raise _delete_failed(cfn, stack, error) from None


def wait_deleted(cfn: Any, stack: dict[str, Any], wait_s: float) -> None:
    """Wait until a stack being deleted is gone; TargetError naming what is left when it is not."""
    try:
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=stack["StackId"],
            WaiterConfig={"Delay": DELETE_POLL_S, "MaxAttempts": max(1, int(wait_s // DELETE_POLL_S))},
        )
    except (ClientError, BotoCoreError) as error:  # WaiterError is a BotoCoreError
        raise _delete_failed(cfn, stack, error) from None


def _delete_failed(cfn: Any, stack: dict[str, Any], error: Exception) -> TargetError:
    name = stack["StackName"]
    left = remaining_resources(cfn, stack["StackId"])
    return TargetError(
        f"deleting stack {name} failed: {error}; left: {', '.join(left) or 'the stack'}; "
        f"delete with `sagellm cleanup` or `aws cloudformation delete-stack --stack-name {name}`"
    )


def delete_run_stack(cfn: Any, name: str, run: str, wait_s: float = 3600) -> bool:
    """Delete the stack `name` if it is the one bench run `run` created; False when there is no such stack.

    A stack of that name without this run's tag is someone else's: TargetError, nothing deleted."""
    stack = describe(cfn, name)
    if stack is None:
        return False
    owner = tags(stack).get(BENCH_RUN_TAG)
    if owner != run:
        raise TargetError(f"stack {name} carries {BENCH_RUN_TAG}={owner!r}, not this run's {run!r}: not deleting it")
    delete_stack(cfn, stack, wait_s)
    return True


def remaining_resources(cfn: Any, stack: str) -> list[str]:
    """`LogicalId (Type)` of each resource the stack still holds; empty when the stack is gone."""
    try:
        pages = cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
        return [
            f"{r['LogicalResourceId']} ({r['ResourceType']})"
            for page in pages
            for r in page["StackResourceSummaries"]
            if r.get("ResourceStatus") != "DELETE_COMPLETE"
        ]
    except (ClientError, BotoCoreError):  # the stack is gone, or the control plane cannot say
        return []

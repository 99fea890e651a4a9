"""CloudFormation calls shared by deploy, teardown and cleanup, configured from a process environment."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    TokenRetrievalError,
    UnauthorizedSSOTokenError,
)
from botocore.retries.standard import ThrottledRetryableChecker

from sagellm.aws.account import EXPIRED_CREDENTIALS, client_of
from sagellm.errors import TargetError

BENCH_RUN_TAG = "sagellm:bench-run"
BENCH_PROCESS_TAG = "sagellm:bench-process"
DELETE_POLL_S = 5


def client(env: Mapping[str, str], service: str = "cloudformation") -> Any:
    """A client for `service` as a child process with this environment would reach it (throttling retried)."""
    return client_of(env, service)


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


def delete_stack(cfn: Any, stack: dict[str, Any], wait_s: float, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
    """Delete a described stack and wait; TargetError naming what is left when it fails."""
    start_delete(cfn, stack)
    wait_deleted(cfn, stack, wait_s, sleep=sleep, clock=clock)


def start_delete(cfn: Any, stack: dict[str, Any]) -> None:
    """Ask CloudFormation to delete a described stack (by id: a name could be reused meanwhile)."""
    try:
        cfn.delete_stack(StackName=stack["StackId"])
    except (ClientError, BotoCoreError) as error:
        raise _delete_failed(cfn, stack, error) from None


def wait_deleted(cfn: Any, stack: dict[str, Any], wait_s: float, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
    """Wait until a stack being deleted is gone; TargetError naming what is left when it is not.

    Polled by hand, not with botocore's waiter: the waiter gives up on the first throttled DescribeStacks (a busy
    account at teardown), where the deletion itself goes on. A DELETE_FAILED stack is asked once more (a
    resource that was still busy often deletes on the second try) before what is left is named."""
    deadline, retried = clock() + wait_s, False
    while True:
        try:
            status, reason = _status(cfn, stack["StackId"])
        except ClientError as error:
            if not _throttled(error):
                raise _delete_failed(cfn, stack, error) from None
            status, reason = "throttled", ""
        except BotoCoreError as error:
            raise _delete_failed(cfn, stack, error) from None
        if status in (None, "DELETE_COMPLETE"):
            return
        if status == "DELETE_FAILED":
            if retried:
                raise _delete_failed(cfn, stack, f"the stack is DELETE_FAILED: {reason}")
            retried = True
            start_delete(cfn, stack)
            continue
        if clock() >= deadline:
            raise _delete_failed(cfn, stack, f"the stack is still {status} after {wait_s:.0f} s")
        sleep(DELETE_POLL_S)


def _status(cfn: Any, stack_id: str) -> tuple[str | None, str]:
    """A stack's status and its reason; None when it is gone."""
    try:
        [stack] = cfn.describe_stacks(StackName=stack_id)["Stacks"]
    except ClientError as error:
        if "does not exist" in str(error):
            return None, ""
        raise
    return stack["StackStatus"], stack.get("StackStatusReason", "")


def _throttled(error: ClientError) -> bool:
    """Whether CloudFormation refused the call for its rate (botocore's own list of throttling codes)."""
    return error.response.get("Error", {}).get("Code") in ThrottledRetryableChecker._THROTTLED_ERROR_CODES


class CredentialsExpired(TargetError):
    """The credentials ran out while deleting: renewed ones can finish the job."""


def _delete_failed(cfn: Any, stack: dict[str, Any], error: Exception | str) -> TargetError:
    """One line: why the delete failed, what is left, in which region, and the command that deletes it."""
    name, region = stack["StackName"], cfn.meta.region_name
    cleanup = (f"delete with `sagellm cleanup --region {region} --older-than 0s --yes` or "
               f"`aws cloudformation delete-stack --stack-name {name} --region {region}`")
    if _expired(error):
        return CredentialsExpired(f"deleting stack {name} in {region} failed: the AWS credentials expired "
                                  f"({error}); left: the stack and everything in it; renew the credentials, then "
                                  f"{cleanup}")
    left = remaining_resources(cfn, stack["StackId"])
    return TargetError(f"deleting stack {name} in {region} failed: {error}; left: "
                       f"{', '.join(left) or 'the stack'}; {cleanup}")


def _expired(error: Exception | str) -> bool:
    """Whether an error says the credentials ran out (an expired session token, or an SSO login past its end)."""
    if isinstance(error, ClientError):
        return error.response.get("Error", {}).get("Code") in EXPIRED_CREDENTIALS
    return isinstance(error, (NoCredentialsError, TokenRetrievalError, UnauthorizedSSOTokenError))


def delete_run_stack(cfn: Any, name: str, run: str, wait_s: float = 3600) -> bool:
    """Delete the stack `name` if it is the one bench run `run` created; False when there is no such stack.

    A stack of that name without this run's tag is someone else's: TargetError, nothing deleted."""
    try:
        stack = describe(cfn, name)
    except (ClientError, BotoCoreError) as error:  # e.g. the credentials ran out during the run
        raise _delete_failed(cfn, {"StackName": name, "StackId": name}, error) from None
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

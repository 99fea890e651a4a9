"""Find and delete the stacks bench runs left behind: whole stacks, through CloudFormation, never anything else.

A stack is a bench leftover only when it carries `sagellm:bench-run` (which only the bench sets), is older
than the age limit, and the bench that made it is not running on this machine. Stacks a person or a pipeline
deployed (`cdk deploy -c profile=…`, a team's own stack with `LlmEndpoint`) carry other `sagellm:*` tags but
never that one, so they are never listed. Bench stacks are found with the Resource Groups Tagging API.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sagellm.aws import cloudformation
from sagellm.aws.cloudformation import BENCH_PROCESS_TAG, BENCH_RUN_TAG
from sagellm.errors import TargetError


@dataclass(frozen=True)
class BenchStack:
    """A stack a bench run created."""

    name: str
    stack_id: str
    run: str
    created: datetime
    process: str | None = None  # `host:pid` of the bench that created it

    def __str__(self) -> str:
        return f"stack {self.name} (run {self.run}, created {self.created:%Y-%m-%d %H:%M} UTC)"


@dataclass
class Survey:
    """What cleanup found: leftovers to delete, bench stacks it keeps (and why), listings it could not read."""

    leftovers: list[BenchStack] = field(default_factory=list)
    kept: list[tuple[BenchStack, str]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def this_process() -> str:
    """The `sagellm:bench-process` value of this process: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def find_leftovers(session: boto3.session.Session, older_than_s: float, *, endpoint_url: str | None = None,
                   now: datetime | None = None) -> Survey:
    """Every bench-run stack, sorted into leftovers (older than `older_than_s`, its bench not running here)
    and kept ones; a stack that cannot be read is reported in `unreadable` and skipped."""
    tagging = session.client("resourcegroupstaggingapi", endpoint_url=endpoint_url)
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=older_than_s)
    try:
        pages = tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": BENCH_RUN_TAG}], ResourceTypeFilters=["cloudformation:stack"])
        arns = [item["ResourceARN"] for page in pages for item in page["ResourceTagMappingList"]]
    except (ClientError, BotoCoreError) as error:
        raise TargetError(f"could not list bench stacks (tag {BENCH_RUN_TAG}): {error}") from None
    survey = Survey()
    for arn in arns:
        try:
            stack = _bench_stack(cfn, arn)
        except (ClientError, BotoCoreError, KeyError, TypeError, ValueError) as error:
            survey.unreadable.append(f"{arn}: {type(error).__name__}: {error}")
            continue
        if stack is None:
            continue
        reason = _in_use(stack, cutoff)
        if reason:
            survey.kept.append((stack, reason))
        else:
            survey.leftovers.append(stack)
    survey.leftovers.sort(key=lambda s: s.created)
    return survey


def _bench_stack(cfn: Any, arn: str) -> BenchStack | None:
    """The live stack behind a listed ARN, or None when it is gone or (on a second look) carries no run tag."""
    stack = cloudformation.describe(cfn, arn)
    if stack is None:
        return None
    tags = cloudformation.tags(stack)
    if not tags.get(BENCH_RUN_TAG):  # the listing said so; only what the stack itself says counts
        return None
    created = stack["CreationTime"]
    if not isinstance(created, datetime):
        raise TypeError(f"CreationTime {created!r} is not a time")
    return BenchStack(stack["StackName"], stack["StackId"], tags[BENCH_RUN_TAG], created.astimezone(UTC),
                      tags.get(BENCH_PROCESS_TAG))


def _in_use(stack: BenchStack, cutoff: datetime) -> str | None:
    """Why a bench stack is not a leftover (yet), or None when it is one."""
    if stack.process:
        host, _, pid = stack.process.rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and _alive(int(pid)):
            return f"its bench is still running (process {pid} on this machine)"
    if stack.created > cutoff:
        return "younger than the age limit (--older-than)"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def delete_leftovers(session: boto3.session.Session, stacks: list[BenchStack], *, endpoint_url: str | None = None,
                     wait_s: float = 3600) -> list[str]:
    """Delete whole stacks through CloudFormation (all started, then each awaited); one line per failure."""
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    described = [{"StackId": s.stack_id, "StackName": s.name} for s in stacks]
    failures, started = [], []
    for stack in described:
        try:
            cloudformation.start_delete(cfn, stack)
            started.append(stack)
        except TargetError as error:
            failures.append(str(error))
    for stack in started:
        try:
            cloudformation.wait_deleted(cfn, stack, wait_s)
        except TargetError as error:
            failures.append(str(error))
    return failures

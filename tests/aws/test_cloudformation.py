"""Deleting a bench run's stack by name: only the stack that carries this run's tag, and only when it exists."""

from __future__ import annotations

import json

import pytest

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

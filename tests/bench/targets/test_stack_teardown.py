"""Teardown of the sagemaker target's own stack in the faults a real account has: nothing deployed, credentials
that run out midway, a caller's environment that changes during the run. CloudFormation is stubbed with
botocore's Stubber (requests and replies checked against its service model)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from bench_helpers import INSTANCE, MODEL
from sagellm.aws import cloudformation
from sagellm.aws.account import Account
from sagellm.bench.targets.stack import SageMakerTarget
from sagellm.profiles import resolve

RUN = "r1"
ACCOUNT = Account("111122223333", "eu-west-1", {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                                                "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1"})
EXPIRED = ("ExpiredToken", "The security token included in the request is expired")


@pytest.fixture
def target(tmp_path: Path) -> SageMakerTarget:
    return SageMakerTarget(resolve("max-throughput", MODEL, INSTANCE, region="eu-west-1"), ACCOUNT, tmp_path, RUN,
                           "h:1")


def stack(target: SageMakerTarget) -> dict[str, Any]:
    return {"StackName": target.stack, "StackId": f"arn:aws:cloudformation:eu-west-1:1:stack/{target.stack}/1",
            "StackStatus": "CREATE_COMPLETE", "CreationTime": datetime(2026, 11, 29, tzinfo=UTC),
            "Tags": [{"Key": cloudformation.BENCH_RUN_TAG, "Value": RUN}]}


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Stubber]]:
    """The CloudFormation clients teardown makes, one per call, each stubbed in order (and checked used up)."""
    made: list[Stubber] = []
    regions: list[str] = []

    def client(env: dict[str, str], service: str = "cloudformation") -> Any:
        regions.append(env["AWS_REGION"])
        cfn = boto3.client(service, region_name=env["AWS_REGION"], aws_access_key_id="k", aws_secret_access_key="s")
        stubber = Stubber(cfn)
        made.append(stubber)
        scripted = script.pop(0)
        scripted(stubber)
        stubber.activate()
        return cfn

    script: list[Any] = []
    monkeypatch.setattr(cloudformation, "client", client)
    yield script  # type: ignore[misc]
    for stubber in made:
        stubber.assert_no_pending_responses()
    assert set(regions) <= {"eu-west-1"}


def test_a_target_that_never_started_deploying_names_no_stack(target: SageMakerTarget) -> None:
    torn = target.teardown()

    assert (torn.status, torn.detail, torn.leftovers) == ("not-applicable", "nothing was deployed", [])
    assert target.may_be_left() == []


def test_credentials_renewed_while_tearing_down_finish_the_delete(target: SageMakerTarget, clients: list[Any]) -> None:
    described = stack(target)

    def expires(stubber: Stubber) -> None:
        stubber.add_response("describe_stacks", {"Stacks": [described]})
        stubber.add_client_error("delete_stack", *EXPIRED)

    def renewed(stubber: Stubber) -> None:
        stubber.add_response("describe_stacks", {"Stacks": [described]})
        stubber.add_response("delete_stack", {}, {"StackName": described["StackId"]})
        stubber.add_client_error("describe_stacks", "ValidationError", "Stack with id x does not exist")

    clients.extend([expires, renewed])
    target.deploying = True

    torn = target.teardown()

    assert (torn.status, torn.detail) == ("destroyed", f"stack {target.stack} deleted")


def test_credentials_that_stay_expired_name_the_stack_and_the_cleanup_command(
        target: SageMakerTarget, clients: list[Any]) -> None:
    def expired(stubber: Stubber) -> None:
        stubber.add_client_error("describe_stacks", *EXPIRED)

    clients.extend([expired, expired])
    target.deploying = True

    torn = target.teardown()

    assert torn.status == "failed" and torn.leftovers == [f"stack {target.stack}"]
    assert torn.detail.startswith(f"deleting stack {target.stack} in eu-west-1 failed: the AWS credentials expired")
    assert torn.detail.endswith("renew the credentials, then delete with `sagellm cleanup --region eu-west-1 "
                                f"--older-than 0s --yes` or `aws cloudformation delete-stack --stack-name "
                                f"{target.stack} --region eu-west-1`")


def test_the_region_resolved_before_deploying_holds_when_the_environment_changes(
        target: SageMakerTarget, clients: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-west-2")  # e.g. a shell profile sourced by a wrapper meanwhile
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")

    def gone(stubber: Stubber) -> None:
        stubber.add_client_error("describe_stacks", "ValidationError", "Stack with id x does not exist")

    clients.append(gone)
    target.deploying = True

    torn = target.teardown()  # the fixture checks every client was made in eu-west-1

    assert torn.status == "not-applicable" and "does not exist" in torn.detail
    assert target._env()["AWS_REGION"] == target._env()["AWS_DEFAULT_REGION"] == "eu-west-1"

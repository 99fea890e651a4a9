"""Cleanup considers bench-run stacks only, keeps the ones still in use, and deletes whole stacks."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.models import CloudFormationBackend

from sagellm.aws.cleanup import delete_leftovers, find_leftovers, this_process
from sagellm.aws.local import LocalAws

# Each test drives the moto server (one per module): over a second each, so `make test-fast` leaves them out.
pytestmark = pytest.mark.slow

ROLE = "arn:aws:iam::123456789012:role/sagellm-test"
PROFILE_TAGS = {"sagellm:profile": "max-throughput", "sagellm:model": "meta-llama/Llama-2-7b-hf",
                "sagellm:version": "0.1.0"}
LATER = datetime.now(UTC) + timedelta(hours=2)  # "now" for a cleanup run two hours after the stacks were made


def model_template() -> str:
    """A stack holding one tagged SageMaker model (as every sagellm stack's resources are tagged)."""
    tags = [{"Key": k, "Value": v} for k, v in PROFILE_TAGS.items()]
    return json.dumps({"Resources": {"Model": {"Type": "AWS::SageMaker::Model", "Properties": {
        "ExecutionRoleArn": ROLE, "PrimaryContainer": {"Image": "tgi"}, "Tags": tags}}}})


def create(aws: LocalAws, name: str, tags: dict[str, str]) -> None:
    aws.client("cloudformation").create_stack(
        StackName=name, TemplateBody=model_template(), Tags=[{"Key": k, "Value": v} for k, v in tags.items()])


def live_stacks(aws: LocalAws) -> list[str]:
    return sorted(s["StackName"] for s in aws.client("cloudformation").describe_stacks()["Stacks"]
                  if s["StackStatus"] != "DELETE_COMPLETE")


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    # A bench killed on another machine, a bench running here and now, a `cdk deploy -c profile=…` stack and a
    # team's own stack (both carry every sagellm:* tag but the bench's), and a stack nobody tagged.
    create(server, "sagellm-bench-max-throughput-dead", PROFILE_TAGS | {
        "sagellm:bench-run": "dead", "sagellm:bench-process": "ci-runner-7:4242"})
    create(server, "sagellm-bench-max-throughput-live", PROFILE_TAGS | {
        "sagellm:bench-run": "live", "sagellm:bench-process": this_process()})
    create(server, "sagellm-max-throughput-llama-2-7b-hf", PROFILE_TAGS)
    create(server, "team-prod-llama", PROFILE_TAGS | {"team": "search"})
    create(server, "someone-elses", {})
    # A model outside any stack, tagged like sagellm's: cleanup never deletes single resources.
    server.client("sagemaker").create_model(
        ModelName="loose-model", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": "tgi"},
        Tags=[{"Key": k, "Value": v} for k, v in PROFILE_TAGS.items()])
    return server


def names(stacks: list[Any]) -> list[str]:
    return [s.name for s in stacks]


def test_only_bench_run_stacks_are_considered_and_a_running_bench_keeps_its_stack(aws: LocalAws) -> None:
    survey = find_leftovers(aws.session(), 3600, endpoint_url=aws.endpoint_url, now=LATER)

    assert names(survey.leftovers) == ["sagellm-bench-max-throughput-dead"]
    [(kept, reason)] = survey.kept
    assert kept.name == "sagellm-bench-max-throughput-live"
    assert reason == f"its bench is still running (process {os.getpid()} on this machine)"
    assert survey.unreadable == []
    dead = survey.leftovers[0]
    assert (dead.run, dead.process) == ("dead", "ci-runner-7:4242")


def test_a_stack_younger_than_the_age_limit_is_kept(aws: LocalAws) -> None:
    survey = find_leftovers(aws.session(), 3600, endpoint_url=aws.endpoint_url)

    assert survey.leftovers == []
    assert {(s.name, why) for s, why in survey.kept} == {
        ("sagellm-bench-max-throughput-dead", "younger than the age limit (--older-than)"),
        ("sagellm-bench-max-throughput-live", (f"its bench is still running (process {os.getpid()} on this "
                                              "machine)")),
    }


def test_a_bench_process_of_the_same_pid_on_another_machine_does_not_keep_a_stack(aws: LocalAws) -> None:
    create(aws, "sagellm-bench-elsewhere", {"sagellm:bench-run": "x",
                                            "sagellm:bench-process": f"not-{socket.gethostname()}:{os.getpid()}"})

    survey = find_leftovers(aws.session(), 0, endpoint_url=aws.endpoint_url, now=LATER)

    assert "sagellm-bench-elsewhere" in names(survey.leftovers)


def test_one_stack_that_cannot_be_read_is_reported_and_the_rest_still_found(
        aws: LocalAws, monkeypatch: pytest.MonkeyPatch) -> None:
    describe = CloudFormationBackend.describe_stacks

    def broken_for_one(self: CloudFormationBackend, name_or_stack_id: str | None = None) -> Any:
        if name_or_stack_id and describe(self, name_or_stack_id)[0].name.endswith("throughput-dead"):
            raise ValidationError(name_or_stack_id, message="Injected: describe failed")
        return describe(self, name_or_stack_id)

    monkeypatch.setattr(CloudFormationBackend, "describe_stacks", broken_for_one)
    create(aws, "sagellm-bench-second-dead", {"sagellm:bench-run": "second"})

    survey = find_leftovers(aws.session(), 0, endpoint_url=aws.endpoint_url, now=LATER)

    assert names(survey.leftovers) == ["sagellm-bench-second-dead"]
    [line] = survey.unreadable
    assert ":stack/sagellm-bench-max-throughput-dead/" in line and "Injected: describe failed" in line


def test_deletes_whole_leftover_stacks_and_nothing_else(aws: LocalAws) -> None:
    survey = find_leftovers(aws.session(), 3600, endpoint_url=aws.endpoint_url, now=LATER)

    assert delete_leftovers(aws.session(), survey.leftovers, endpoint_url=aws.endpoint_url) == []

    assert live_stacks(aws) == ["sagellm-bench-max-throughput-live", "sagellm-max-throughput-llama-2-7b-hf",
                                "someone-elses", "team-prod-llama"]
    models = {m["ModelName"].split("-Model-")[0] for m in aws.client("sagemaker").list_models()["Models"]}
    assert models == {"loose-model", *live_stacks(aws)}  # the loose one, and the one of each remaining stack
    # Deleting again (a second cleanup racing the first) reports nothing: gone counts as deleted.
    assert delete_leftovers(aws.session(), survey.leftovers, endpoint_url=aws.endpoint_url) == []

"""Find and delete what sagellm deployments left behind, by the `sagellm:*` tags every stack carries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

# resolve() puts sagellm:profile, sagellm:model and sagellm:version on every plan; the stack tags every
# resource with them. Any `sagellm:` key marks a resource as ours.
TAG_PREFIX = "sagellm:"

# Deletion order: stacks first (CloudFormation deletes what it owns), then orphans, dependants first.
KINDS = ("stack", "scalable-target", "inference-component", "endpoint", "endpoint-config", "model")


@dataclass(frozen=True)
class Leftover:
    """A sagellm resource still in the account."""

    kind: str  # one of KINDS
    name: str  # stack name, SageMaker name, or scalable-target resource id
    created: datetime | None
    scalable_dimension: str = ""  # scalable targets only

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def find_leftovers(
    session: boto3.session.Session, older_than_s: float = 0, *, endpoint_url: str | None = None
) -> list[Leftover]:
    """Every sagellm-tagged stack created at least `older_than_s` ago, and every such inference component,
    endpoint, endpoint config and model outside those stacks (orphans), plus the scalable targets on those
    endpoints and components; in deletion order."""
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    sm = session.client("sagemaker", endpoint_url=endpoint_url)
    aas = session.client("application-autoscaling", endpoint_url=endpoint_url)
    cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)

    found = [
        Leftover("stack", s["StackName"], s["CreationTime"])
        for s in _items(cfn, "describe_stacks", "Stacks")
        if s["StackStatus"] != "DELETE_COMPLETE" and _ours(s.get("Tags", [])) and s["CreationTime"] <= cutoff
    ]
    # What those stacks hold goes with them; listing it again would only repeat the stack.
    in_stacks = {
        r.get("PhysicalResourceId", "")
        for stack in found
        for r in _items(cfn, "list_stack_resources", "StackResourceSummaries", StackName=stack.name)
    }
    for kind, operation, key, name_key, arn_key in (
        (
            "inference-component",
            "list_inference_components",
            "InferenceComponents",
            "InferenceComponentName",
            "InferenceComponentArn",
        ),
        ("endpoint", "list_endpoints", "Endpoints", "EndpointName", "EndpointArn"),
        (
            "endpoint-config",
            "list_endpoint_configs",
            "EndpointConfigs",
            "EndpointConfigName",
            "EndpointConfigArn",
        ),
        ("model", "list_models", "Models", "ModelName", "ModelArn"),
    ):
        for item in _items(sm, operation, key):
            if item["CreationTime"] > cutoff or item[arn_key] in in_stacks or item[name_key] in in_stacks:
                continue
            if _ours(sm.list_tags(ResourceArn=item[arn_key]).get("Tags", [])):
                found.append(Leftover(kind, item[name_key], item["CreationTime"]))

    # Scalable targets are attributed through the endpoint or component they scale (moto keeps no tags
    # on them).
    scaled = {f"endpoint/{x.name}/" for x in found if x.kind == "endpoint"} | {
        f"inference-component/{x.name}/" for x in found if x.kind == "inference-component"
    }
    for target in _items(aas, "describe_scalable_targets", "ScalableTargets", ServiceNamespace="sagemaker"):
        resource = target["ResourceId"] + "/"
        if any(resource.startswith(prefix) for prefix in scaled):
            found.append(
                Leftover(
                    "scalable-target",
                    target["ResourceId"],
                    _utc(target["CreationTime"]),
                    target["ScalableDimension"],
                )
            )
    return sorted(found, key=lambda x: KINDS.index(x.kind))


def delete_leftovers(
    session: boto3.session.Session,
    leftovers: list[Leftover],
    *,
    endpoint_url: str | None = None,
    wait_s: float = 3600,
) -> list[str]:
    """Delete `leftovers` (stacks first, waiting for each); returns one line per failure, empty when all
    are gone.

    A resource already gone (e.g. deleted with its stack) counts as deleted."""
    cfn = session.client("cloudformation", endpoint_url=endpoint_url)
    sm = session.client("sagemaker", endpoint_url=endpoint_url)
    aas = session.client("application-autoscaling", endpoint_url=endpoint_url)
    deleters = {
        # Deregistering a target deletes its scaling policies too.
        "scalable-target": lambda x: aas.deregister_scalable_target(
            ServiceNamespace="sagemaker", ResourceId=x.name, ScalableDimension=x.scalable_dimension
        ),
        "inference-component": lambda x: sm.delete_inference_component(InferenceComponentName=x.name),
        "endpoint": lambda x: sm.delete_endpoint(EndpointName=x.name),
        "endpoint-config": lambda x: sm.delete_endpoint_config(EndpointConfigName=x.name),
        "model": lambda x: sm.delete_model(ModelName=x.name),
    }
    failures = []
    for leftover in sorted(leftovers, key=lambda x: KINDS.index(x.kind)):
        try:
            if leftover.kind == "stack":
                _delete_stack(cfn, leftover.name, wait_s)
            else:
                deleters[leftover.kind](leftover)
        except (ClientError, BotoCoreError) as error:  # WaiterError is a BotoCoreError
            if not _already_gone(error):
                failures.append(f"{leftover}: {error}")
    return failures


def _delete_stack(cfn: Any, name: str, wait_s: float) -> None:
    stack_id = cfn.describe_stacks(StackName=name)["Stacks"][0]["StackId"]  # ids stay valid after deletion
    cfn.delete_stack(StackName=stack_id)
    delay = 5
    cfn.get_waiter("stack_delete_complete").wait(
        StackName=stack_id, WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(wait_s // delay))}
    )


def _items(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    return [item for page in client.get_paginator(operation).paginate(**kwargs) for item in page[key]]


def _ours(tags: list[dict[str, str]]) -> bool:
    return any(tag["Key"].startswith(TAG_PREFIX) for tag in tags)


def _utc(value: datetime | float) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)


def _already_gone(error: Exception) -> bool:
    message = str(error)
    return any(text in message for text in ("Could not find", "does not exist", "No scalable target found"))

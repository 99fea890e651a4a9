"""Regions: their partition and DNS suffix, and the SageMaker resource types CloudFormation lacks in some."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from sagellm.errors import InputError

MODEL = "AWS::SageMaker::Model"
ENDPOINT_CONFIG = "AWS::SageMaker::EndpointConfig"
ENDPOINT = "AWS::SageMaker::Endpoint"
INFERENCE_COMPONENT = "AWS::SageMaker::InferenceComponent"

# The SageMaker resource types CloudFormation's resource specification lacks per region, from cfn-lint 1.44.8
# (`cfnlint/data/schemas/providers/<region>.json`, the per-region CloudFormation registry schemas it ships;
# tests/catalog/test_regions.py re-derives this from the installed cfn-lint). Regions cfn-lint has no data for
# (ISO, eusc, eu-isoe: it copies us-east-1's list there) are not listed: nothing is known to be missing.
_MISSING_TYPES: dict[str, tuple[str, ...]] = {
    **{region: (INFERENCE_COMPONENT,) for region in (
        "af-south-1", "ap-east-1", "ap-east-2", "ap-northeast-3", "ap-south-2", "ap-southeast-4", "ap-southeast-5",
        "ap-southeast-6", "ap-southeast-7", "ca-west-1", "cn-north-1", "cn-northwest-1", "eu-central-2",
        "eu-south-1", "eu-south-2", "eu-west-3", "il-central-1", "mx-central-1", "us-gov-west-1", "us-west-1",
    )},
    "me-central-1": (ENDPOINT, ENDPOINT_CONFIG, MODEL),
    "us-gov-east-1": (ENDPOINT, ENDPOINT_CONFIG, MODEL, INFERENCE_COMPONENT),
}


@dataclass(frozen=True)
class Partition:
    """An AWS partition: the name ARNs carry and the DNS suffix of its service hosts."""

    name: str  # aws, aws-cn, aws-us-gov, aws-iso, …
    dns_suffix: str  # amazonaws.com, amazonaws.com.cn, c2s.ic.gov, …


@cache
def _botocore_partitions(data: str) -> list[dict[str, Any]]:
    """The partitions of botocore's `data/<data>` (partitions.json, endpoints.json), read without importing
    botocore (seconds on a busy machine; `sagellm plan` stays quick)."""
    spec = find_spec("botocore")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        path = Path(root) / "data" / data
        if path.is_file():
            partitions: list[dict[str, Any]] = json.loads(path.read_text())["partitions"]
            return partitions
    raise InputError(f"region: botocore's {data} is missing (pip install botocore)")


def _partitions() -> list[dict[str, Any]]:
    """botocore's partitions data (`botocore/data/partitions.json`)."""
    return _botocore_partitions("partitions.json")


@cache
def sagemaker_regions() -> tuple[str, ...]:
    """The regions of every partition that have a SageMaker endpoint, by botocore's endpoint data: what
    `boto3.Session().get_available_regions("sagemaker", partition)` lists for each partition."""
    return tuple(name for p in _botocore_partitions("endpoints.json")
                 for name, endpoint in p["services"].get("api.sagemaker", {}).get("endpoints", {}).items()
                 if name in p["regions"] and not endpoint.get("deprecated"))


def check_region(region: str, where: str = "--region") -> str:
    """`region` when SageMaker is offered there; an InputError naming `where` and the closest regions if not."""
    known = sagemaker_regions()
    if region in known:
        return region
    close = difflib.get_close_matches(region.lower(), known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "use a region such as us-east-1"
    raise InputError(f"{where}: {region!r} is not a region with SageMaker in botocore's endpoint data; {hint} "
                     "(a region newer than the installed botocore needs pip install -U botocore)")


def find_partition(region: str) -> Partition | None:
    """The partition `region` belongs to (by botocore's region list, then its region pattern), or None."""
    partitions = _partitions()
    found = next((p for p in partitions if region in p["regions"]), None) or next(
        (p for p in partitions if re.match(p["regionRegex"], region)), None
    )
    return Partition(found["id"], found["outputs"]["dnsSuffix"]) if found is not None else None


def partition(region: str, where: str = "region") -> Partition:
    """The partition of `region`; an InputError naming `where` when no partition knows the region."""
    found = find_partition(region)
    if found is None:
        raise InputError(f"{where}: {region!r} belongs to no AWS partition botocore knows; use a region such as "
                         "us-east-1")
    return found


def endpoint_types(inference_components: bool) -> tuple[str, ...]:
    """The SageMaker resource types an endpoint of that kind is made of."""
    return (MODEL, ENDPOINT_CONFIG, ENDPOINT, *((INFERENCE_COMPONENT,) if inference_components else ()))


def missing_types_errors(region: str, types: tuple[str, ...], where: str = "region") -> list[str]:
    """One line per resource type CloudFormation does not offer in `region`."""
    missing = [t for t in types if t in _MISSING_TYPES.get(region, ())]
    if not missing:
        return []
    fix = ("use endpoint_kind: instance (a profile without inference components) or a region such as us-east-1"
           if missing == [INFERENCE_COMPONENT] else "use a region such as us-east-1")
    return [f"{where}: CloudFormation offers no {', '.join(missing)} in {region}; {fix}"]

"""Regions: partitions from botocore, and the resource-type table checked against cfn-lint's own data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import cfnlint
import pytest

from sagellm.catalog.regions import (
    _MISSING_TYPES,
    ENDPOINT,
    INFERENCE_COMPONENT,
    Partition,
    endpoint_types,
    find_partition,
    missing_types_errors,
    partition,
    sagemaker_regions,
)
from sagellm.errors import InputError

SAGEMAKER_TYPES = endpoint_types(inference_components=True)
PROVIDERS = Path(cfnlint.__file__).parent / "data" / "schemas" / "providers"


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("us-east-1", Partition("aws", "amazonaws.com")),
        ("us-gov-west-1", Partition("aws-us-gov", "amazonaws.com")),
        ("cn-north-1", Partition("aws-cn", "amazonaws.com.cn")),
        ("us-iso-east-1", Partition("aws-iso", "c2s.ic.gov")),
        ("us-isob-east-1", Partition("aws-iso-b", "sc2s.sgov.gov")),
        ("eusc-de-east-1", Partition("aws-eusc", "amazonaws.eu")),
        ("eu-west-9", Partition("aws", "amazonaws.com")),  # not launched yet: by botocore's region pattern
    ],
)
def test_partition_comes_from_botocore(region: str, expected: Partition) -> None:
    assert partition(region) == expected


def test_a_region_in_no_partition_is_one_line() -> None:
    assert find_partition("xx-north-9") is None
    with pytest.raises(InputError, match=r"^plan\.region: 'xx-north-9' belongs to no AWS partition"):
        partition("xx-north-9", "plan.region")


def test_missing_types_match_the_installed_cfn_lint() -> None:
    """The table is what cfn-lint's per-region schemas say (regions it copies from us-east-1 say nothing)."""
    us_east_1 = set(json.loads((PROVIDERS / "us-east-1.json").read_text()))
    derived = {}
    for path in sorted(PROVIDERS.glob("*-*-*.json")):
        types = set(json.loads(path.read_text()))
        if path.stem != "us-east-1" and types == us_east_1:
            continue  # no data of its own
        missing = tuple(t for t in (ENDPOINT, "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Model",
                                    INFERENCE_COMPONENT) if t not in types)
        if missing:
            derived[path.stem] = missing
    assert {r: set(t) for r, t in derived.items()} == {r: set(t) for r, t in _MISSING_TYPES.items()}


def test_missing_types_are_one_line_naming_region_and_type() -> None:
    assert missing_types_errors("eu-west-3", endpoint_types(False)) == []
    assert missing_types_errors("eu-west-3", SAGEMAKER_TYPES) == [
        ("region: CloudFormation offers no AWS::SageMaker::InferenceComponent in eu-west-3; use endpoint_kind: "
        "instance (a profile without inference components) or a region such as us-east-1")
    ]
    [line] = missing_types_errors("me-central-1", endpoint_types(False))
    assert line.startswith("region: CloudFormation offers no AWS::SageMaker::Model, ") and "me-central-1" in line


def test_the_sagemaker_regions_are_botocores_for_every_partition() -> None:
    session = boto3.session.Session()
    listed = [r for p in session.get_available_partitions() for r in session.get_available_regions("sagemaker", p)]

    assert sorted(sagemaker_regions()) == sorted(listed)
    assert {"us-east-1", "us-gov-west-1", "cn-north-1", "us-iso-east-1"} <= set(listed)


@pytest.mark.parametrize("command", [["instances"], ["plan", "--profile", "max-throughput", "--model",
                                                     "meta-llama/Llama-2-7b-hf"]])
@pytest.mark.slow
def test_an_unknown_region_is_exit_2_in_one_line_naming_close_ones(tmp_path: Path, command: list[str]) -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("sagellm")), *command, "--region", "eu-west-7"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        ("sagellm: error: --region: 'eu-west-7' is not a region with SageMaker in botocore's endpoint data; did you "
        "mean eu-west-3, eu-west-2, eu-west-1? (a region newer than the installed botocore needs pip install -U "
        "botocore)")]

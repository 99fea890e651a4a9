"""The SageMaker SDK's image URI tables (`sagemaker/core/image_uri_config/*.json`), read as data.

Importing the SDK costs seconds on `cdk synth`'s path; its tables are plain JSON.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from sagellm.catalog.regions import partition
from sagellm.errors import InputError


def version_key(version: str) -> tuple[int, ...]:
    """A version as numbers, for ordering ("3.3.6" → (3, 3, 6); a non-numeric part counts as 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.-]", version))


def _tables_dir() -> Path:
    """Where the SageMaker SDK keeps its image URI tables (found without importing the SDK)."""
    spec = find_spec("sagemaker")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(root) / "core" / "image_uri_config"
        if folder.is_dir():
            return folder
    raise InputError("container: the SageMaker SDK's image tables are missing (pip install sagemaker-core)")


@cache
def table(framework: str) -> dict[str, Any]:
    """The inference table of one framework (`huggingface-llm`, `djl-lmi`, …)."""
    data = json.loads((_tables_dir() / f"{framework}.json").read_text())
    return data.get("inference", data)


def versions(framework: str) -> list[str]:
    """The exact image versions of a framework, oldest first."""
    return sorted(table(framework)["versions"], key=version_key)


def alias(framework: str, version: str) -> str | None:
    """The exact version a short one ("3.3") stands for, if the table has the alias."""
    found: str | None = table(framework).get("version_aliases", {}).get(version)
    return found


def uri(framework: str, version: str, region: str) -> str:
    """The ECR image URI of exactly `version` in `region`, built from the SDK's tables as the SDK does."""
    config = table(framework)
    entry = config["versions"][version]
    registry = entry["registries"].get(region)
    if registry is None:
        raise InputError(f"region: {region!r}: no {framework} {version} image there (use a SageMaker region "
                         "such as us-east-1)")
    processor = (config.get("processors") or [None])[0]
    py = (entry.get("py_versions") or [None])[0]
    suffix = (entry.get("container_version") or {}).get(processor)
    tag = "-".join(p for p in (entry.get("tag_prefix", version), processor, py, suffix) if p)
    # The registry host's DNS suffix is the partition's (amazonaws.com.cn, c2s.ic.gov, ...), as the SDK builds it.
    domain = partition(region).dns_suffix
    return f"{registry}.dkr.ecr.{region}.{domain}/{entry['repository']}:{tag}"

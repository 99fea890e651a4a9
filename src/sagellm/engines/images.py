"""The SageMaker SDK's image URI tables (`sagemaker/core/image_uri_config/*.json`), shipped as package data.

sagellm/engines/data/ holds the tables of the frameworks its engines name, copied from the SDK by
scripts/refresh_image_tables.py (each file names the SDK version it came from): the SDK itself is no
dependency.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from sagellm.catalog.regions import partition
from sagellm.errors import InputError

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")  # an image manifest's digest, as ECR and Docker write it
COMPILED_SHAPES = "neuron-compiled.json"  # data/'s one file that is no image table (engines/tgi_neuron.py)
# The repositories whose tags the SDK gives the newest Neuron SDK version of the entry (`sdk2.26.1-` before the
# container version): sagemaker-core 2.27.0 image_uris.retrieve, for the ones sagellm's engines name.
SDK_VERSIONED = ("huggingface-vllm-inference-neuronx",)
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")  # Docker's tag grammar (ECR's too)


def version_key(version: str) -> tuple[int, ...]:
    """A version as numbers, for ordering ("3.3.6" → (3, 3, 6); a non-numeric part counts as 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.-]", version))


def frameworks() -> list[str]:
    """The image tables sagellm ships (data/*.json, the compiled-shape list aside)."""
    data = resources.files("sagellm.engines").joinpath("data")
    return sorted(f.name.removesuffix(".json") for f in data.iterdir()
                  if f.name.endswith(".json") and f.name != COMPILED_SHAPES)


@cache
def table(framework: str) -> dict[str, Any]:
    """The inference table of one framework (`huggingface-llm`, `djl-lmi`, …)."""
    try:
        text = resources.files("sagellm.engines").joinpath("data", f"{framework}.json").read_text()
    except FileNotFoundError:
        raise InputError(f"container: no {framework} image table in sagellm (known: {', '.join(frameworks())})") \
            from None
    data: dict[str, Any] = json.loads(text)
    return data


def versions(framework: str) -> list[str]:
    """The exact image versions of a framework, oldest first."""
    return sorted(table(framework)["versions"], key=version_key)


def regions(framework: str, version: str) -> list[str]:
    """The regions that hold exactly `version`'s image."""
    return sorted(table(framework)["versions"][version]["registries"])


def alias(framework: str, version: str) -> str | None:
    """The exact version a short one ("3.3") stands for, if the table has the alias."""
    found: str | None = table(framework).get("version_aliases", {}).get(version)
    return found


def tag(framework: str, version: str) -> str:
    """The image tag of exactly `version`, as the SDK builds it (the same in every region).

    A table with an `inference_tool` (Inferentia's `neuronx`) names it where others name the processor, as the
    SDK's `_format_tag` does for the tool its caller passes; an SDK_VERSIONED repository's tag carries its Neuron SDK.
    """
    config = table(framework)
    entry = config["versions"][version]
    processor = (config.get("processors") or [None])[0]
    py = (entry.get("py_versions") or [None])[0]
    suffix = (entry.get("container_version") or {}).get(processor)
    if entry["repository"] in SDK_VERSIONED:
        suffix = f"{max(entry['sdk_versions'], key=lambda v: version_key(v.removeprefix('sdk')))}-{suffix}"
    return "-".join(p for p in (entry.get("tag_prefix", version), config.get("inference_tool") or processor, py,
                                suffix) if p)


def cuda_major(framework: str, version: str) -> int | None:
    """The CUDA major version an image is built for, from its tag (`…-cu130-…` → 13); None: no CUDA tag."""
    found = re.search(r"-cu(\d+)\d(?:-|$)", tag(framework, version))
    return int(found.group(1)) if found else None


def pin_errors(framework: str, version: str, pin: str, where: str) -> list[str]:
    """A pin that is neither a digest nor a tag of exactly `version`'s image (the table's tag, or it + a patch).

    AWS re-pushes a Deep Learning Container's short tag with each patch release and adds a full tag per patch
    (`…-ubuntu22.04-v1.1`: "pin your version by adding the version tag", aws/deep-learning-containers
    available_images.md); a digest names one build for good.
    """
    if DIGEST.match(pin):
        return []
    short = tag(framework, version)
    if TAG.match(pin) and (pin == short or pin.startswith((f"{short}-", f"{short}."))):
        return []
    return [(f"{where}: {pin!r} is neither an image digest (sha256:<64 hex digits>) nor a tag of the {framework} "
             f"{version} image: use {short} with its patch suffix (such as {short}-v1.0), or a digest")]


def uri(framework: str, version: str, region: str, pin: str | None = None) -> str:
    """The ECR image URI of exactly `version` in `region`, built from the SDK's tables as the SDK does.

    `pin`: a full tag or digest of that image (see `pin_errors`) instead of the table's tag.
    """
    entry = table(framework)["versions"][version]
    registry = entry["registries"].get(region)
    if registry is None:
        raise InputError(f"region: {region!r}: no {framework} {version} image there (it is in "
                         f"{', '.join(regions(framework, version)[:3])}, …)")
    if pin is not None and (errors := pin_errors(framework, version, pin, "container.image_pin")):
        raise InputError(errors)
    reference = f"@{pin}" if pin is not None and DIGEST.match(pin) else f":{pin or tag(framework, version)}"
    # The registry host's DNS suffix is the partition's (amazonaws.com.cn, c2s.ic.gov, ...), as the SDK builds it.
    domain = partition(region).dns_suffix
    return f"{registry}.dkr.ecr.{region}.{domain}/{entry['repository']}{reference}"

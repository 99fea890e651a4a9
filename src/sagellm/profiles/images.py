"""Container image URIs from the SageMaker Python SDK's tables (no hand-kept ECR account ids)."""

from __future__ import annotations

from functools import cache

from sagellm.errors import InputError

FRAMEWORKS = {"tgi": "huggingface-llm", "tgi-neuron": "huggingface-llm-neuronx", "lmi": "djl-lmi"}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


@cache
def image_uri(container: str, region: str, version: str | None = None) -> str:
    """The image URI of a container ('tgi', 'tgi-neuron', 'lmi') in a region; newest version by default."""
    from sagemaker.core import image_uris  # lazy: ~1.3 s, kept off `sagellm plan`'s path

    framework = FRAMEWORKS[container]
    config = image_uris.config_for_framework(framework)
    scoped = config.get("inference", config)
    versions = sorted(scoped["versions"], key=_version_key)
    chosen = version or versions[-1]
    if chosen not in versions and chosen not in scoped.get("version_aliases", {}):
        raise InputError(f"container_version: {chosen!r} is not a known {framework} image version "
                         f"(newest: {', '.join(versions[-4:])})")
    try:
        return image_uris.retrieve(framework, region=region, version=chosen, image_scope="inference")
    except ValueError as exc:
        first = str(exc).split(". ")[0]
        raise InputError(f"region: {region!r}: {first} (use a SageMaker region such as us-east-1)") from None

"""The profile's `routing` field: SageMaker's strategies, prefix-aware with both of its settings (and only then),
KV-aware only on the vLLM image, each mistake in one line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sagellm.profiles.schema import Container, Profile, RoutingSpec
from sagellm.profiles.validate import profile_errors


def errors(routing: RoutingSpec, kind: str = "tgi") -> list[str]:
    profile = Profile(name="p", container=Container(kind=kind), routing=routing)
    return [e for e in profile_errors(profile, lambda field: f"p.yaml: {field}") if "routing" in e]


def test_prefix_aware_with_both_settings_and_the_others_without_them_are_valid() -> None:
    assert errors(RoutingSpec(strategy="prefix-aware", prefix_length=1024, concurrency_threshold=1)) == []
    assert errors(RoutingSpec(strategy="random")) == []
    assert errors(RoutingSpec(strategy="kv-aware"), kind="vllm") == []


def test_prefix_aware_needs_both_settings() -> None:
    assert errors(RoutingSpec(strategy="prefix-aware", prefix_length=2048)) == [
        ("p.yaml: routing.concurrency_threshold: prefix-aware routing needs it (SageMaker requires "
         "ConcurrencyThreshold)")]


def test_prefix_settings_only_with_prefix_aware() -> None:
    assert errors(RoutingSpec(strategy="random", prefix_length=2048)) == [
        "p.yaml: routing.prefix_length: only with strategy: prefix-aware; remove it"]


def test_kv_aware_only_on_the_vllm_image() -> None:
    assert errors(RoutingSpec(strategy="kv-aware"), kind="sglang") == [
        ("p.yaml: routing.strategy: kv-aware works only with the vLLM image, not sglang; use prefix-aware, or "
         "container.kind: vllm")]


@pytest.mark.parametrize("field, value", [("prefix_length", 1023), ("prefix_length", 65537),
                                          ("concurrency_threshold", 0), ("concurrency_threshold", 1025)])
def test_the_settings_keep_to_sagemakers_bounds(field: str, value: int) -> None:
    with pytest.raises(ValidationError):
        RoutingSpec(strategy="prefix-aware", **{field: value})  # type: ignore[arg-type]

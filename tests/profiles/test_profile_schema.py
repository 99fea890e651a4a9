"""The profile schema: frozen, extra keys forbidden, published as JSON Schema."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from pydantic import ValidationError

from sagellm.profiles.loader import STANDARD
from sagellm.profiles.schema import Profile, Serving


def test_json_schema_describes_every_section_of_a_profile() -> None:
    schema = Profile.model_json_schema()
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    for key in ("serving", "components", "autoscaling", "payload", "instance_type", "endpoint_kind", "extends",
                "container", "hf_token_secret", "architecture", "tags"):
        assert key in schema["properties"], key
    serving = schema["$defs"]["Serving"]["properties"]
    for key in ("tensor_parallel", "max_input_tokens", "max_total_tokens", "max_batch_prefill_tokens",
                "max_batch_size", "max_concurrent_requests", "environment", "quantization"):
        assert key in serving, key


def test_json_schema_forbids_unknown_keys_so_editors_flag_typos() -> None:
    schema = Profile.model_json_schema()
    assert schema["additionalProperties"] is False
    assert all(d["additionalProperties"] is False for d in schema["$defs"].values())


def test_json_schema_is_a_valid_json_schema_that_accepts_the_standard_profiles() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = Profile.model_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    folder = resources.files("sagellm.profiles").joinpath("standard")
    for name in STANDARD:
        validator.validate(yaml.safe_load(folder.joinpath(f"{name}.yaml").read_text()))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"name": "x", "serving": {"max_concurent_requests": 8}})


def test_serving_fields_take_auto_or_an_integer() -> None:
    assert Serving(max_concurrent_requests="auto").max_concurrent_requests == "auto"
    assert Serving(max_concurrent_requests=8).max_concurrent_requests == 8
    with pytest.raises(ValidationError):
        Serving(max_concurrent_requests="many")


def test_profile_is_frozen() -> None:
    p = Profile(name="x")
    with pytest.raises(ValidationError):
        p.name = "y"  # type: ignore[misc]


def test_profile_rejects_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Profile.model_validate({"name": "x", "instance": "ml.g5.2xlarge"})


def test_model_source_takes_an_s3_prefix_only() -> None:
    profile = Profile.model_validate({"name": "x", "model_source": {"s3_uri": "s3://team-models/llama/"}})
    assert profile.model_source is not None and profile.model_source.s3_uri == "s3://team-models/llama/"
    with pytest.raises(ValidationError, match="model_source.s3_uri"):
        Profile.model_validate({"name": "x", "model_source": {"s3_uri": "s3://team-models/llama.tar.gz"}})


@pytest.mark.parametrize("name", STANDARD)
def test_each_standard_profile_ships_and_validates(name: str) -> None:
    text = resources.files("sagellm.profiles").joinpath("standard", f"{name}.yaml").read_text()
    assert Profile.model_validate(yaml.safe_load(text)).name == name

"""--engine (`engine=` of resolve and design_for, `-c engine=`): a profile served on another registered engine."""

from __future__ import annotations

import json

import pytest

from sagellm.engines import ENGINES
from sagellm.errors import InputError
from sagellm.profiles import design_for, resolve
from sagellm.profiles.schema import Container, Profile

LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


def test_an_engine_given_replaces_the_profiles_kind_at_its_own_pinned_version(write, team_dir) -> None:
    tgi = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge")
    lmi = resolve("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", engine="lmi")
    assert (tgi.container, lmi.container, lmi.container_version) == ("tgi", "lmi", ENGINES["lmi"].pinned)
    assert lmi.primary.image_uri == ENGINES["lmi"].image_uri(ENGINES["lmi"].pinned, "us-east-1")
    assert "OPTION_MAX_MODEL_LEN" in lmi.environment and "MAX_TOTAL_TOKENS" not in lmi.environment
    # A profile's version and image pin are its own kind's: another engine runs its pinned image.
    write("old.yaml", "name: old\nextends: max-throughput\ncontainer: {kind: tgi, version: 3.3.4}\n")
    assert resolve("old", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir, engine="lmi").container_version \
        == ENGINES["lmi"].pinned
    # The profile's own kind given again changes nothing.
    assert resolve("old", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir, engine="tgi").container_version \
        == "3.3.4"


def test_an_unknown_engine_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(InputError) as exc:
        design_for("max-throughput", LLAMA2_7B, "ml.g5.12xlarge", engine="nope")
    assert exc.value.messages == [f"--engine: unknown engine 'nope' (known: {', '.join(ENGINES)})"]


def test_an_engine_without_an_inferentia_image_is_named_as_the_option() -> None:
    with pytest.raises(InputError) as exc:
        design_for("max-throughput", "meta-llama/Llama-3.1-8B", "ml.inf2.xlarge", engine="lmi")
    assert any(m.startswith("engine: lmi has no image for ml.inf2.xlarge (Inferentia)") for m in exc.value.messages)


def test_the_kinds_are_the_registry_an_enum_in_the_json_schema_and_a_bad_one_names_them() -> None:
    schema = Profile.model_json_schema()["$defs"]["Container"]["properties"]["kind"]
    assert (schema["type"], schema["enum"], schema["default"]) == ("string", list(ENGINES), "tgi")
    with pytest.raises(ValueError, match=rf"'nope' is not an engine sagellm knows \(known: {', '.join(ENGINES)}\)"):
        Container(kind="nope")
    assert json.loads(Container(kind="lmi").model_dump_json())["kind"] == "lmi"

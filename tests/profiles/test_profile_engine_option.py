"""--engine (`engine=` of resolve and design_for, `-c engine=`): a profile served on another registered engine."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from sagellm.engines import ENGINES
from sagellm.errors import InputError
from sagellm.profiles import design_for, resolve
from sagellm.profiles.loader import all_sources
from sagellm.profiles.schema import Container, Profile, Quantization
from sagellm.profiles.validate import validate_profile

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


# sagellm's quantizations each engine's server takes (each engine's own list, at the source its module names).
TAKES = {"tgi": {"gptq", "awq", "bitsandbytes", "eetq", "fp8"}, "lmi": {"gptq", "awq", "bitsandbytes", "fp8"},
         "vllm": {"gptq", "awq", "fp8"}, "sglang": {"gptq", "awq", "bitsandbytes", "fp8"},
         "vllm-neuronx": set()}  # optimum-neuron 0.4.4's serve has no quantization flag


@pytest.mark.parametrize("kind", list(ENGINES))
def test_a_quantization_the_engine_lacks_is_refused_and_those_it_takes_pass(kind: str, write, team_dir) -> None:
    assert set(TAKES) == set(ENGINES)
    for quant in get_args(Quantization)[1:]:
        path = write(f"{quant}.yaml", f"name: q-{quant}\nextends: max-throughput\ncontainer: {{kind: {kind}}}\n"
                                      f"serving: {{quantization: {quant}}}\n")
        errors = validate_profile(f"q-{quant}", all_sources(team_dir))
        if quant in TAKES[kind]:
            assert errors == [], (kind, quant)
            continue
        engine = ENGINES[kind]
        variable = next((v.names[0] for v in engine.variables if v.sets == "quantization"),
                        "it has no quantization setting")
        takes = ", ".join(q for q in get_args(Quantization) if q == "none" or q in TAKES[kind])
        assert errors == [(f"{path}:4: serving.quantization: {quant!r} is not a quantization {engine.label} "
                          f"{engine.pinned} takes ({path}:3: container.kind: {kind}); of sagellm's it takes {takes} "
                          f"({variable}): use one of those, or another engine (docs/containers.md)")], (kind, quant)


def test_an_engine_given_on_the_command_line_that_lacks_the_profiles_quantization_is_named_as_the_option(
        write, team_dir) -> None:
    path = write("eetq.yaml", "name: eetq\nextends: max-throughput\nserving: {quantization: eetq}\n")
    assert resolve("eetq", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir).environment["HF_MODEL_QUANTIZE"] == "eetq"
    with pytest.raises(InputError) as exc:
        design_for("eetq", LLAMA2_7B, "ml.g5.12xlarge", profiles_dir=team_dir, engine="sglang")
    assert exc.value.messages == [
        (f"{path}:3: serving.quantization: 'eetq' is not a quantization SGLang 0.5.20 takes (engine: sglang); of "
        "sagellm's it takes none, gptq, awq, bitsandbytes, fp8 (SM_SGLANG_QUANTIZATION): use one of those, or "
        "another engine (docs/containers.md)")]


def test_an_extra_models_quantization_is_checked_against_the_engine_too(write, team_dir) -> None:
    path = write("extra.yaml", """\
        name: extra
        extends: replicas
        container: {kind: vllm}
        components:
          extra_models:
            - {model: meta-llama/Llama-2-7b-hf, quantization: bitsandbytes}
        """)
    errors = validate_profile("extra", all_sources(team_dir))
    assert len(errors) == 1 and errors[0].startswith(
        f"{path}:6: components.extra_models.0.quantization: 'bitsandbytes' is not a quantization vLLM 0.30.0 takes")

"""Pinned containers: the exact image of a version, the generation it belongs to, what its server reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B

from sagellm.errors import InputError
from sagellm.profiles import resolve
from sagellm.profiles.containers import (
    FRAMEWORKS,
    PINNED,
    _table,
    environment_errors,
    generation,
    image_uri,
    version_errors,
)

REGIONS = ("us-east-1", "cn-north-1")


@pytest.mark.integration  # the SDK takes ~1 s per lookup
@pytest.mark.parametrize("kind", ["tgi", "lmi"])
def test_image_uri_is_what_the_sagemaker_sdk_returns_for_every_modelled_version(kind: str) -> None:
    from sagemaker.core import image_uris  # the tables' owner, imported here only to cross-check

    framework = FRAMEWORKS[kind]
    checked = 0
    modelled = [v for v in _table(framework)["versions"] if not version_errors(kind, v, "")]
    for version in modelled:
        for region in REGIONS:
            try:
                want = image_uris.retrieve(framework, region=region, version=version, image_scope="inference")
            except ValueError:
                continue  # not published there
            assert image_uri(kind, version, region) == want, (version, region)
            checked += 1
    assert checked >= 2 * len(modelled) - 2 and len(modelled) >= 5


def test_neuron_image_is_the_pinned_optimum_neuron_build_of_tgi_3_3_6() -> None:
    from sagemaker.core import image_uris

    want = image_uris.retrieve("huggingface-llm-neuronx", region="us-east-1", version="0.3.0",
                               image_scope="inference")
    assert image_uri("tgi", PINNED["tgi"], "us-east-1", neuron=True) == want
    assert "optimum3.3.6" in want


def test_default_plan_pins_tgi_3_3_6_and_records_it() -> None:
    plan = resolve("max-throughput", LLAMA2_7B, "ml.g5.2xlarge")
    assert (plan.container, plan.container_version) == ("tgi", "3.3.6")
    assert plan.primary.image_uri == ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:"
                                      "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04")


def test_a_pinned_older_tgi_gets_its_own_image_and_generation(write, team_dir: Path) -> None:
    write("old.yaml", """
        name: old
        extends: min-latency
        container: {kind: tgi, version: 2.4.0}
        """)
    plan = resolve("old", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert plan.container_version == "2.4.0"
    assert plan.primary.image_uri.endswith(":2.4.0-tgi2.4.0-gpu-py311-cu124-ubuntu22.04-v2.2")
    # TGI 2 does not chunk prefills by default: MAX_BATCH_SIZE alone holds the batch at one sequence.
    assert plan.environment["MAX_BATCH_SIZE"] == "1" and "PREFILL_CHUNKING" not in plan.environment


def test_generations() -> None:
    assert [generation("tgi", v) for v in ("3.3.6", "3.0.1", "2.4.0", None)] == ["tgi3", "tgi3", "tgi2", "tgi3"]
    assert generation("lmi", "0.35.0") == "lmi"


def test_version_must_be_exact_and_modelled() -> None:
    assert version_errors("tgi", "3.3", "p.yaml:3: container.version") == [
        "p.yaml:3: container.version: '3.3' is not an exact huggingface-llm image version (use the exact version 3.3.6)"
    ]
    assert version_errors("tgi", "1.4.5", "container.version") == [
        ("container.version: '1.4.5': sagellm models tgi 2.0.0 and newer (pinned default: 3.3.6); see "
        "docs/containers.md")
    ]
    [unknown] = version_errors("lmi", "9.9.9", "container.version")
    assert unknown.startswith("container.version: '9.9.9' is not an exact djl-lmi image version (known: ")
    assert version_errors("lmi", "0.35.0", "container.version") == []


def test_unknown_version_in_a_profile_names_its_line(write, team_dir: Path) -> None:
    path = write("v.yaml", """
        name: v
        extends: max-throughput
        container:
          kind: tgi
          version: 3.3.9
        """)
    with pytest.raises(InputError) as exc:
        resolve("v", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    [msg] = exc.value.messages
    assert msg.startswith(f"{path}:5: container.version: '3.3.9' is not an exact huggingface-llm image version")


def test_environment_holds_only_what_the_pinned_server_reads() -> None:
    where = "serving.environment.{}".format
    assert environment_errors("tgi", "3.3.6", {"MAX_WAITING_TOKEN": "30", "CUDA_GRAPHS": "0"}, where) == [
        "serving.environment.MAX_WAITING_TOKEN: TGI 3.3.6 does not read it; did you mean MAX_WAITING_TOKENS?"
    ]
    assert environment_errors("lmi", "0.35.0", {"OPTION_GPU_MEMORY_UTILIZATION": "0.85", "MAX_INPUT_TOKENS": "1"},
                              where) == [
        ("serving.environment.MAX_INPUT_TOKENS: LMI 0.35.0 does not read it (it reads HF_MODEL_ID, "
        "TENSOR_PARALLEL_DEGREE, OPTION_* and SERVING_*); see docs/containers.md")
    ]


def test_lmi_on_inferentia_is_refused(write, team_dir: Path) -> None:
    path = write("l.yaml", "name: l\nextends: max-throughput\ncontainer: {kind: lmi}\n")
    with pytest.raises(InputError) as exc:
        resolve("l", LLAMA2_7B, "ml.inf2.48xlarge", profiles_dir=team_dir)
    assert (f"{path}:3: container.kind: lmi has no image for ml.inf2.48xlarge (Inferentia); use container: "
            "{kind: tgi} (optimum-neuron) or a GPU instance type") in exc.value.messages


def test_resolving_a_plan_never_imports_the_sagemaker_sdk() -> None:
    # The SDK costs seconds to import; `cdk synth` and `sagellm plan` only read its JSON tables.
    code = ("import sys; from sagellm.profiles import resolve; "
            "resolve('max-throughput', 'llama2-7b', 'ml.g5.2xlarge'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sagemaker'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

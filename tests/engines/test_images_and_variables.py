"""Pinned images (the SDK's tables, per region and partition), exact versions, what each server reads."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sagellm.engines import ENGINES, images
from sagellm.engines.lmi import LMI
from sagellm.engines.tgi import TGI
from sagellm.engines.tgi_neuron import TGI_NEURON
from sagellm.errors import InputError

REGIONS = ("us-east-1", "cn-north-1")


@pytest.mark.integration  # the SDK takes ~1 s per lookup
@pytest.mark.parametrize("kind", ["tgi", "lmi"])
def test_image_uri_is_what_the_sagemaker_sdk_returns_for_every_modelled_version(kind: str) -> None:
    # The tables' owner (the dev extra installs it), imported only to cross-check the shipped copies.
    image_uris = pytest.importorskip("sagemaker.core.image_uris")

    engine = ENGINES[kind]
    framework = engine.framework
    checked = 0
    modelled = [v for v in images.table(framework)["versions"] if not engine.version_errors(v, "")]
    for version in modelled:
        for region in REGIONS:
            try:
                want = image_uris.retrieve(framework, region=region, version=version, image_scope="inference")
            except ValueError:
                continue  # not published there
            assert engine.image_uri(version, region) == want, (version, region)
            checked += 1
    assert checked >= 2 * len(modelled) - 2 and len(modelled) >= 5


@pytest.mark.integration
def test_neuron_image_is_the_pinned_optimum_neuron_build_of_tgi_3_3_6() -> None:
    image_uris = pytest.importorskip("sagemaker.core.image_uris")

    # As the Hugging Face SDK asks for it (get_huggingface_llm_image_uri("huggingface-neuronx")): the tool names
    # the tag's processor part.
    want = image_uris.retrieve("huggingface-llm-neuronx", region="us-east-1", version="0.3.0",
                               image_scope="inference", inference_tool="neuronx")
    assert TGI_NEURON.image_uri(TGI.pinned, "us-east-1") == want
    assert want.endswith(":2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04")


def test_neuron_image_is_the_optimum_neuron_build_of_the_pinned_tgi() -> None:
    # The SDK's tag for huggingface-llm-neuronx 0.3.0 in us-east-1 (what the integration test above checks), as
    # aws/deep-learning-containers and Hugging Face's SageMaker docs list it: `-neuronx-`, not the table's `-inf2-`.
    assert TGI_NEURON.image_uri(TGI.pinned, "us-east-1") == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:"
        "2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04")


def test_image_tables_are_read_without_the_sagemaker_sdk() -> None:
    # Blocking the SDK's import proves the shipped tables stand alone (a lean install has no SDK).
    code = ("import sys; sys.modules['sagemaker'] = None\n"
            "from sagellm.engines.tgi import TGI\nprint(TGI.image_uri(TGI.pinned, 'eu-west-1'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("763104351884.dkr.ecr.eu-west-1.amazonaws.com/huggingface-pytorch-tgi-inference:")


def test_version_must_be_exact_and_modelled() -> None:
    assert TGI.version_errors("3.3", "p.yaml:3: container.version") == [
        "p.yaml:3: container.version: '3.3' is not an exact huggingface-llm image version (use the exact version 3.3.6)"
    ]
    assert TGI.version_errors("1.4.5", "container.version") == [
        ("container.version: '1.4.5': sagellm models tgi 2.0.0 and newer (pinned default: 3.3.6); see "
        "docs/containers.md")
    ]
    [unknown] = LMI.version_errors("9.9.9", "container.version")
    assert unknown.startswith("container.version: '9.9.9' is not an exact djl-lmi image version (known: ")
    assert LMI.version_errors("0.35.0", "container.version") == []


def test_environment_holds_only_what_the_pinned_server_reads() -> None:
    where = "serving.environment.{}".format
    assert TGI.environment_errors("3.3.6", {"MAX_WAITING_TOKEN": "30", "CUDA_GRAPHS": "0"}, where) == [
        "serving.environment.MAX_WAITING_TOKEN: TGI 3.3.6 does not read it; did you mean MAX_WAITING_TOKENS?"
    ]
    assert LMI.environment_errors("0.35.0", {"OPTION_GPU_MEMORY_UTILIZATION": "0.85", "MAX_INPUT_TOKENS": "1"},
                              where) == [
        ("serving.environment.MAX_INPUT_TOKENS: LMI 0.35.0 does not read it (it reads HF_MODEL_ID, "
        "TENSOR_PARALLEL_DEGREE, OPTION_* and SERVING_*); see docs/containers.md")
    ]


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_an_image_is_pinned_by_its_full_tag_or_its_digest() -> None:
    short = "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"
    registry = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/huggingface-pytorch-tgi-inference"
    assert TGI.image_uri("3.3.6", "eu-west-1") == f"{registry}:{short}"
    assert TGI.image_uri("3.3.6", "eu-west-1", f"{short}-v1.1") == f"{registry}:{short}-v1.1"
    assert TGI.image_uri("3.3.6", "eu-west-1", DIGEST) == f"{registry}@{DIGEST}"
    # The Inferentia engine pins its own (optimum-neuron) image.
    assert TGI_NEURON.pin_errors("3.3.6", "2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04-v1.0", "pin") == []
    assert TGI_NEURON.pin_errors("3.3.6", "2.7.0-optimum3.3.6-inf2-py310-ubuntu22.04", "pin") != []


@pytest.mark.parametrize("pin", [
    "2.7.0-tgi3.3.4-gpu-py311-cu124-ubuntu22.04-v1.0",  # another server version
    "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04v1",  # not the tag plus a suffix
    "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04-v1/x",  # not a tag
    "sha256:abc",  # not a whole digest
    "latest",
])
def test_a_pin_of_another_image_is_refused_in_one_line(pin: str) -> None:
    [message] = TGI.pin_errors("3.3.6", pin, "p.yaml:4: container.image_pin")
    assert message == (
        f"p.yaml:4: container.image_pin: {pin!r} is neither an image digest (sha256:<64 hex digits>) nor a tag of "
        "the huggingface-llm 3.3.6 image: use 2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04 with its patch suffix "
        "(such as 2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04-v1.0), or a digest")
    with pytest.raises(InputError):
        TGI.image_uri("3.3.6", "us-east-1", pin)

"""An existing endpoint's description against what the bench was given: a contradiction names the field."""

from __future__ import annotations

import pytest

from sagellm.aws.endpoints import DeployedEndpoint
from sagellm.bench.targets.existing import reconcile
from sagellm.cli.options import as_flags as _as_flags
from sagellm.errors import InputError

DEPLOYED = DeployedEndpoint("prod-chat", "ml.g5.2xlarge", 1, {"HF_MODEL_ID": "meta-llama/Llama-2-7b-hf"},
                            {"sagellm:profile": "max-throughput"})


def test_what_is_not_given_is_read_from_the_endpoint() -> None:
    assert reconcile(DEPLOYED, None, "llama2-7b", None) == ("max-throughput", "llama2-7b")
    assert reconcile(DEPLOYED, None, None, "ml.g5.2xlarge") == ("max-throughput", "meta-llama/Llama-2-7b-hf")


def test_a_contradiction_names_the_field_and_the_cli_its_flag() -> None:
    with pytest.raises(InputError) as caught:
        reconcile(DEPLOYED, "min-cost", "mistralai/Mistral-7B-v0.1", "ml.g5.xlarge")
    assert caught.value.messages == [
        ("ServingSpec.profile: 'min-cost', but endpoint prod-chat was deployed with 'max-throughput' (its "
         "sagellm:profile tag); leave ServingSpec.profile out"),
        ("ServingSpec.model: 'mistralai/Mistral-7B-v0.1', but endpoint prod-chat serves 'meta-llama/Llama-2-7b-hf'; "
         "leave ServingSpec.model out"),
        ("ServingSpec.instance: 'ml.g5.xlarge', but endpoint prod-chat runs on 'ml.g5.2xlarge'; leave "
         "ServingSpec.instance out")]
    assert _as_flags(caught.value.messages)[1] == (
        "--model: 'mistralai/Mistral-7B-v0.1', but endpoint prod-chat serves 'meta-llama/Llama-2-7b-hf'; leave "
        "--model out")

"""A profile's pinned container: the plan records its version and image; a profile names its lines in errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B

from sagellm.engines.tgi_neuron import COMPILED_BATCH_SIZES
from sagellm.errors import InputError
from sagellm.profiles import resolve


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



@pytest.mark.parametrize("profile", ["max-throughput", "min-latency", "min-cost", "autoscale"])
@pytest.mark.parametrize("instance", ["ml.inf2.8xlarge", "ml.inf2.48xlarge"])
def test_an_inferentia_plan_asks_for_a_batch_size_the_neuron_cache_holds(profile: str, instance: str) -> None:
    # With all four of MAX_BATCH_SIZE, MAX_TOTAL_TOKENS, HF_NUM_CORES, HF_AUTO_CAST_TYPE set, TGI's neuron
    # entry point loads the compiled model of exactly that batch: the admission limit (256) has none.
    plan = resolve(profile, LLAMA2_7B, instance)
    batch = int(plan.environment["MAX_BATCH_SIZE"])
    assert batch in COMPILED_BATCH_SIZES
    assert batch <= int(plan.environment["MAX_CONCURRENT_REQUESTS"])  # the rest queue in TGI


def test_an_inferentia_batch_size_without_a_compiled_model_is_refused_in_one_line(write, team_dir: Path) -> None:
    path = write("b.yaml", "name: b\nextends: max-throughput\nserving:\n  max_batch_size: 256\n")
    with pytest.raises(InputError) as exc:
        resolve("b", LLAMA2_7B, "ml.inf2.8xlarge", profiles_dir=team_dir)
    assert f"{path}:4: serving.max_batch_size: 256 has no compiled model on Inferentia; use one of " \
           "1, 4, 8, 16, 32 or auto" in exc.value.messages

"""A profile's pinned container: the plan records its version and image; a profile names its lines in errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B

from sagellm.catalog import instances, models
from sagellm.engines import CompiledShape
from sagellm.engines.tgi_neuron import compiled_table
from sagellm.errors import InputError
from sagellm.planner import predict
from sagellm.profiles import design_for, resolve
from sagellm.profiles.loader import all_sources
from sagellm.profiles.validate import validate_profile

LLAMA31_8B = "meta-llama/Llama-3.1-8B"


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


def test_a_profile_pins_the_image_by_its_full_tag_or_digest(write, team_dir: Path) -> None:
    short = "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"
    write("full.yaml", f"name: full\nextends: max-throughput\ncontainer: {{image_pin: {short}-v1.1}}\n")
    plan = resolve("full", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert plan.primary.image_uri.endswith(f"/huggingface-pytorch-tgi-inference:{short}-v1.1")
    digest = "sha256:" + "ab" * 32
    write("digest.yaml", f"name: digest\nextends: max-throughput\ncontainer: {{image_pin: '{digest}'}}\n")
    plan = resolve("digest", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert plan.primary.image_uri.endswith(f"/huggingface-pytorch-tgi-inference@{digest}")


def test_a_pin_of_another_version_names_its_line(write, team_dir: Path) -> None:
    path = write("old.yaml", """
        name: old
        extends: max-throughput
        container:
          kind: tgi
          image_pin: 2.4.0-tgi2.4.0-gpu-py311-cu124-ubuntu22.04-v2.2
        """)
    with pytest.raises(InputError) as exc:
        resolve("old", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    [msg] = exc.value.messages
    assert msg.startswith(f"{path}:5: container.image_pin: '2.4.0-tgi2.4.0-gpu-py311-cu124-ubuntu22.04-v2.2' is "
                          "neither an image digest")


def test_profiles_validate_refuses_a_pin_of_another_image_without_resolving(write, team_dir: Path) -> None:
    path = write("p.yaml", "name: p\nextends: max-throughput\ncontainer: {image_pin: latest}\n")
    [msg] = validate_profile("p", all_sources(team_dir))
    assert msg.startswith(f"{path}:3: container.image_pin: 'latest' is neither an image digest")


@pytest.mark.parametrize(("pin", "instance"), [
    ("2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04-v1.0", "ml.g5.2xlarge"),  # the Inferentia image on a GPU
    ("2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04-v1.0", "ml.inf2.8xlarge"),  # the GPU image on Inferentia
])
def test_a_pin_must_be_of_the_image_the_instance_type_runs(write, team_dir: Path, pin: str, instance: str) -> None:
    write("p.yaml", f"name: p\nextends: max-throughput\ncontainer: {{image_pin: {pin}}}\n")
    with pytest.raises(InputError) as exc:
        resolve("p", LLAMA31_8B, instance, profiles_dir=team_dir)
    assert any(f"container.image_pin: {pin!r} is neither an image digest" in m for m in exc.value.messages)


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
            "{kind: tgi} (TGI (Neuron)) or {kind: vllm-neuronx} (vLLM (Neuron)) or a GPU instance type") in exc.value.messages


@pytest.mark.slow
def test_resolving_a_plan_never_imports_the_sagemaker_sdk() -> None:
    # The SDK costs seconds to import; `cdk synth` and `sagellm plan` only read its JSON tables.
    code = ("import sys; from sagellm.profiles import resolve; "
            "resolve('max-throughput', 'llama2-7b', 'ml.g5.2xlarge'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sagemaker'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"



NEURON_INSTANCES = [i for i in instances() if i.startswith("ml.inf2.")]


@pytest.mark.parametrize("instance", NEURON_INSTANCES)
def test_an_inferentia_plan_writes_a_shape_the_neuron_cache_holds_or_is_refused_in_one_line(instance: str) -> None:
    # With all six variables set, TGI's neuron entry point skips its lookup and the server exports exactly that
    # shape: batch, sequence length, cores and cast type must be one the cache has compiled for the model.
    planned = set()
    for model_id in models():
        try:
            plan = resolve("max-throughput", model_id, instance)
        except InputError as exc:
            # Not compiled for Inferentia, or too large for this instance's memory: one line either way.
            [message] = exc.messages
            assert "no compiled model" in message or "GB usable" in message, message
            continue
        env = plan.environment
        shape = CompiledShape(int(env["MAX_BATCH_SIZE"]), int(env["MAX_TOTAL_TOKENS"]), int(env["HF_NUM_CORES"]),
                              env["HF_AUTO_CAST_TYPE"])
        assert shape in compiled_table()[model_id], (model_id, shape)
        assert int(env["MAX_INPUT_TOKENS"]) < shape.sequence_length  # the entry point's compatibility check
        assert shape.batch_size <= int(env["MAX_CONCURRENT_REQUESTS"])  # the rest queue in TGI
        planned.add(model_id)
    assert planned <= set(compiled_table())
    if instance == "ml.inf2.48xlarge":
        assert planned == set(compiled_table())  # every compiled model is planned on the largest instance


@pytest.mark.parametrize("profile", ["max-throughput", "min-latency", "autoscale", "replicas"])
def test_each_standard_profile_plans_a_compiled_shape(profile: str) -> None:
    plan = resolve(profile, LLAMA31_8B, "ml.inf2.48xlarge")
    env = plan.environment
    shape = CompiledShape(int(env["MAX_BATCH_SIZE"]), int(env["MAX_TOTAL_TOKENS"]), int(env["HF_NUM_CORES"]), "bf16")
    assert shape in compiled_table()[LLAMA31_8B]


PINNED_UNCOMPILED = {
    "max_batch_size: 256": ("serving.max_batch_size: 256 has no compiled model on Inferentia (compiled: batch 4 × "
                            "4096 tokens on 8 cores (bf16); batch 8 × 4096"),
    "max_total_tokens: 8192": "serving.max_total_tokens: 8192 is not a compiled sequence length on Inferentia",
    "tensor_parallel: 2": ("serving.tensor_parallel: 2: meta-llama/Llama-3.1-8B has no compiled model for 4 "
                           "NeuronCores in the neuron cache (compiled: "),
}


@pytest.mark.parametrize(("line", "says"), PINNED_UNCOMPILED.items())
def test_a_pinned_shape_without_a_compiled_model_is_refused_in_one_line(write, team_dir: Path, line: str,
                                                                       says: str) -> None:
    path = write("b.yaml", f"name: b\nextends: max-throughput\nserving:\n  {line}\n")
    with pytest.raises(InputError) as exc:
        resolve("b", LLAMA31_8B, "ml.inf2.48xlarge", profiles_dir=team_dir)
    [message] = exc.value.messages
    assert message.startswith(f"{path}:4: {says}"), message


def test_a_model_the_neuron_cache_lacks_is_refused_naming_the_way_out() -> None:
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "Qwen/Qwen2.5-7B", "ml.inf2.8xlarge")
    [message] = exc.value.messages
    assert message.startswith("instance: Qwen/Qwen2.5-7B has no compiled model in the neuron cache of the pinned "
                              "Inferentia image") and "use a GPU instance type, or container kind vllm-neuronx" in message
    with pytest.raises(InputError) as exc:
        resolve("max-throughput", "meta-llama/Llama-3.1-70B", "ml.inf2.24xlarge")
    assert exc.value.messages == [
        ("instance: meta-llama/Llama-3.1-70B has no compiled model in the neuron cache that fits the 6 chip(s) of "
        "ml.inf2.24xlarge (compiled: batch 1 × 4096 tokens on 24 cores (bf16); batch 4 × 4096 tokens on 24 cores "
        "(bf16)); use tensor_parallel 12 on ml.inf2.48xlarge")]


def test_the_planner_holds_the_compiled_batch_of_whole_sequences() -> None:
    d = design_for("max-throughput", LLAMA31_8B, "ml.inf2.8xlarge")
    shape, copy = d.shape(), d.copies[0]
    assert (shape.max_batch_size, shape.batch_token_budget) == (copy.max_batch_size,
                                                                copy.max_batch_size * copy.max_total_tokens)
    # The predicted curve saturates at the compiled batch: beyond it requests queue and throughput stays flat.
    batch = copy.max_batch_size
    points = predict(shape, d.payload, (batch, 2 * batch, 4 * batch)).points
    assert [p.running_per_copy for p in points] == [batch] * 3
    assert [p.queued_per_copy for p in points] == [0, batch, 3 * batch]
    assert points[0].throughput_tokens_per_s == pytest.approx(points[-1].throughput_tokens_per_s)


def test_an_extra_model_on_inferentia_needs_a_compiled_shape_too(write, team_dir: Path) -> None:
    write("x.yaml", """
        name: x
        extends: replicas
        serving: {tensor_parallel: 1}
        components:
          copies: 1
          extra_models:
            - {model: meta-llama/Llama-3.2-3B, tensor_parallel: 1}
            - {model: Qwen/Qwen2.5-7B, tensor_parallel: 1}
        """)
    with pytest.raises(InputError) as exc:
        resolve("x", LLAMA31_8B, "ml.inf2.24xlarge", profiles_dir=team_dir)
    [message] = exc.value.messages
    assert "components.extra_models: [1] Qwen/Qwen2.5-7B has no compiled model for 2 NeuronCores" in message


def test_an_inferentia_plan_takes_a_pin_of_the_optimum_neuron_image(write, team_dir: Path) -> None:
    pin = "2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04-v1.0"
    write("p.yaml", f"name: p\nextends: max-throughput\ncontainer: {{image_pin: {pin}}}\n")
    plan = resolve("p", LLAMA31_8B, "ml.inf2.8xlarge", profiles_dir=team_dir)
    assert plan.primary.image_uri.endswith(f"/huggingface-pytorch-tgi-inference:{pin}")

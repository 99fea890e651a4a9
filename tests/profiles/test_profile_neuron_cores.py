"""Inferentia plans use the most NeuronCores the neuron cache holds a shape for, and say how many they use."""

from __future__ import annotations

import pytest

from sagellm.profiles import design_for

LLAMA31_8B = "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize(("profile", "model_id", "instance", "cores", "used"), [
    # Compiled for 2 and 8 cores: 8 of the 12 (4 chips need not divide the 6 of the instance), not 2.
    ("max-throughput", LLAMA31_8B, "ml.inf2.24xlarge", "8", "NeuronCores: 8 of the 12 of ml.inf2.24xlarge used"),
    ("autoscale", LLAMA31_8B, "ml.inf2.48xlarge", "8", "NeuronCores: 8 of the 24 of ml.inf2.48xlarge used"),
    ("max-throughput", "Qwen/Qwen2.5-14B", "ml.inf2.24xlarge", "8", "NeuronCores: 8 of the 12"),
    # Inference components put a copy on every compiled core group.
    ("replicas", LLAMA31_8B, "ml.inf2.24xlarge", "2", "NeuronCores: all 12 of ml.inf2.24xlarge used (6 × 2 cores)"),
    ("max-throughput", "meta-llama/Llama-3.1-70B", "ml.inf2.48xlarge", "24", "NeuronCores: all 24"),
])
def test_auto_takes_the_most_compiled_cores_and_the_plan_says_how_many(profile: str, model_id: str, instance: str,
                                                                       cores: str, used: str) -> None:
    design = design_for(profile, model_id, instance)
    assert design.environment["HF_NUM_CORES"] == cores
    assert design.notes[0].startswith(used)


def test_a_gpu_plan_has_no_core_note() -> None:
    assert design_for("max-throughput", LLAMA31_8B, "ml.g5.12xlarge").notes == ()

"""Every Inferentia plan gives the optimum-neuron image what its entry point needs to start: a model id in
`MODEL_ID` and the six shape variables of a configuration the neuron cache holds.

What the entry point needs is read from its source (TGI v3.3.6, `backends/neuron/tgi_entry_point.py` and
`server/text_generation_server/tgi_env.py`; the image's `entrypoint.sh` in awslabs/llm-hosting-container
`huggingface/pytorch/optimum/docker/3.3.6/Dockerfile`): with all six shape variables set it trusts them and looks
nothing up; without `MODEL_ID` it stops with "No model id provided". The upstream code itself is not kept here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sagellm.catalog import instances
from sagellm.engines.tgi_neuron import CORES_PER_CHIP, compiled_table
from sagellm.errors import InputError
from sagellm.profiles import DeploymentPlan, design_for

PROFILES = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")
SHAPE_VARIABLES = ("HF_NUM_CORES", "HF_AUTO_CAST_TYPE", "MAX_BATCH_SIZE", "MAX_TOTAL_TOKENS", "MAX_INPUT_TOKENS",
                   "MAX_BATCH_PREFILL_TOKENS")


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, DeploymentPlan, tuple[str, ...]]]:
    """Every plan the standard profiles give for a model the neuron cache holds, on every ml.inf2 type (the
    profile, the plan, the design's notes); the ones sagellm refuses are no plan."""
    profiles_dir: Path = tmp_path_factory.mktemp("no-team-profiles")
    out = []
    for model_id in compiled_table():
        for profile in PROFILES:
            for instance in (name for name, i in instances().items() if i.is_neuron):
                try:
                    design = design_for(profile, model_id, instance, profiles_dir=profiles_dir)
                except InputError:
                    continue
                out.append((profile, design.plan(), design.notes))
    return out


@pytest.mark.slow
def test_every_inferentia_plan_names_its_model_and_a_cached_shape(plans) -> None:
    assert len(plans) >= 100 and {p for p, _, _ in plans} == set(PROFILES)
    for profile, plan, _ in plans:
        cores = CORES_PER_CHIP * instances()[plan.instance_type].n_accelerators
        for m in plan.models:
            env, where = m.environment, (profile, m.model_id, plan.instance_type)
            assert env["MODEL_ID"] == env["HF_MODEL_ID"] == m.model_id, where
            assert all(env.get(v) for v in SHAPE_VARIABLES), where
            shape = (int(env["HF_NUM_CORES"]), int(env["MAX_BATCH_SIZE"]), int(env["MAX_TOTAL_TOKENS"]),
                     env["HF_AUTO_CAST_TYPE"])
            cached = {(s.num_cores, s.batch_size, s.sequence_length, s.auto_cast_type)
                      for s in compiled_table()[m.model_id]}
            assert shape in cached, where
            assert shape[0] <= cores, where  # the entry point asks only that the compiled cores be there


@pytest.mark.slow
def test_every_inferentia_plan_has_what_the_image_needs_around_it(plans) -> None:
    for profile, plan, notes in plans:
        # The SDK's -neuronx- tag, the maintainers' own timeout and AMI (awslabs/llm-hosting-container
        # tests/huggingface/sagemaker_dlc_test.py), and how many NeuronCores the plan uses.
        where = (profile, plan.primary.model_id, plan.instance_type)
        assert plan.primary.image_uri.endswith(":2.7.0-optimum3.3.6-neuronx-py310-ubuntu22.04"), where
        assert plan.startup_health_check_timeout_s >= 1800 and plan.model_data_download_timeout_s >= 1800, where
        assert plan.inference_ami_version == "al2-ami-sagemaker-inference-neuron-2", where
        assert notes and notes[0].startswith("NeuronCores: "), where

"""LMI (vLLM): the environment a plan's settings become, the limits it runs with, how it refuses."""

import json
from dataclasses import replace

from sagellm.engines import Settings
from sagellm.engines.lmi import LMI, VLLM_ASYNC

SETTINGS = Settings(model_id="meta-llama/Llama-2-7b-hf", version="0.38.0", tensor_parallel=2, quantization="awq",
                    max_input_tokens=3072, max_total_tokens=4096, max_batch_prefill_tokens=4096,
                    max_concurrent_requests=64, max_batch_size=None)


def test_environment_names_the_vllm_engine_and_its_limits_as_options() -> None:
    assert LMI.environment(SETTINGS) == {
        "HF_MODEL_ID": "meta-llama/Llama-2-7b-hf", **VLLM_ASYNC, "OPTION_TENSOR_PARALLEL_DEGREE": "2",
        "OPTION_MAX_MODEL_LEN": "4096", "OPTION_MAX_ROLLING_BATCH_SIZE": "64",
        "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS": "4096", "OPTION_QUANTIZE": "awq"}
    assert LMI.environment(replace(SETTINGS, max_batch_size=8))["OPTION_MAX_ROLLING_BATCH_SIZE"] == "8"


def test_it_queues_rather_than_refusing_and_runs_at_most_its_rolling_batch() -> None:
    limits = LMI.limits("0.35.0", {}, kv_tokens=10_000, context=4096)
    assert LMI.queues and limits.max_concurrent_requests is None
    assert (limits.max_total_tokens, limits.max_input_tokens, limits.max_batch_size) == (4096, 4095, 32)
    assert LMI.limits("0.35.0", {"OPTION_MAX_ROLLING_BATCH_SIZE": "8"}, 10_000, 4096).max_batch_size == 8


def test_validation_errors_are_400s_and_a_generate_body_without_a_length_gets_30_tokens() -> None:
    reply = LMI.error_reply(422, "validation", "too long")
    assert (reply.status, json.loads(reply.body)) == (400, {"error": "too long", "code": 400})
    assert LMI.stream_refusal(422, "validation", "too long") == reply  # refused before the stream starts
    assert LMI.default_max_new_tokens() == 30 and LMI.payload_limit({}) is None


def test_the_pin_is_the_newest_lmi_in_the_sdk_tables_and_its_cuda_13_image_names_the_cuda_13_ami() -> None:
    from sagellm.engines import images
    from sagellm.engines.tgi import TGI
    from sagellm.engines.tgi_neuron import TGI_NEURON

    assert LMI.pinned == images.versions("djl-lmi")[-1] == "0.38.0"
    assert images.tag("djl-lmi", LMI.pinned) == "0.38.0-lmi29.0.0-cu130"
    # botocore: al2023-ami-sagemaker-inference-gpu-4-1 carries NVIDIA driver 580 and CUDA 13.0; SageMaker's default
    # host (driver 535, CUDA 12.2) runs the CUDA 12 images, so they name no AMI.
    assert LMI.inference_ami("0.38.0") == LMI.inference_ami("0.36.0") == "al2023-ami-sagemaker-inference-gpu-4-1"
    assert LMI.inference_ami("0.35.0") is None and TGI.inference_ami(TGI.pinned) is None
    assert TGI_NEURON.inference_ami(TGI_NEURON.pinned) == "al2-ami-sagemaker-inference-neuron-2"


def test_the_pinned_lmi_reads_the_variables_a_plan_sets() -> None:
    # djl-serving 0.36.0-lmi27-dlc (the newest CUDA 13 source): OPTION_* are the vLLM handler's properties.
    env = LMI.environment(SETTINGS)
    assert LMI.environment_errors(LMI.pinned, env, lambda name: name) == []
    assert {"OPTION_MAX_ROLLING_BATCH_SIZE", "OPTION_MAX_MODEL_LEN", "OPTION_TENSOR_PARALLEL_DEGREE",
            "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS", "OPTION_QUANTIZE"} <= set(env)

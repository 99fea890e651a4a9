"""LMI (vLLM): the environment a plan's settings become, the limits it runs with, how it refuses."""

import json
from dataclasses import replace

from sagellm.engines import Settings
from sagellm.engines.lmi import LMI, VLLM_ASYNC

SETTINGS = Settings(model_id="meta-llama/Llama-2-7b-hf", version="0.35.0", tensor_parallel=2, quantization="awq",
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

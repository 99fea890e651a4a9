"""TGI on GPUs: the environment a plan's settings become, the limits it runs with, how it refuses."""

import json
from dataclasses import replace

import pytest

from sagellm.engines import Settings
from sagellm.engines.tgi import TGI
from sagellm.errors import InputError

SETTINGS = Settings(model_id="meta-llama/Llama-2-7b-hf", version="3.3.6", tensor_parallel=2, quantization="none",
                    max_input_tokens=3072, max_total_tokens=4096, max_batch_prefill_tokens=4096,
                    max_concurrent_requests=64, max_batch_size=None)


def test_environment_names_each_setting_once_through_the_sagemaker_entrypoint() -> None:
    assert TGI.environment(SETTINGS) == {
        "HF_MODEL_ID": "meta-llama/Llama-2-7b-hf", "SM_NUM_GPUS": "2", "MAX_INPUT_TOKENS": "3072",
        "MAX_TOTAL_TOKENS": "4096", "MAX_BATCH_PREFILL_TOKENS": "4096", "MAX_CONCURRENT_REQUESTS": "64"}
    assert TGI.environment(replace(SETTINGS, quantization="gptq"))["HF_MODEL_QUANTIZE"] == "gptq"


def test_a_batch_size_limit_turns_tgi_3_prefill_chunking_off() -> None:
    env = TGI.environment(replace(SETTINGS, max_batch_size=8))
    assert (env["MAX_BATCH_SIZE"], env["PREFILL_CHUNKING"]) == ("8", "0")
    older = TGI.environment(replace(SETTINGS, max_batch_size=8, version="2.4.0"))
    assert older["MAX_BATCH_SIZE"] == "8" and "PREFILL_CHUNKING" not in older  # TGI 2 does not chunk


def test_limits_take_the_launcher_defaults_of_the_version() -> None:
    tgi3 = TGI.limits("3.3.6", {}, kv_tokens=10_000, context=4096)
    assert (tgi3.max_input_tokens, tgi3.max_total_tokens, tgi3.max_batch_prefill_tokens) == (4095, 4096, 4096)
    assert (tgi3.max_concurrent_requests, tgi3.max_batch_size, tgi3.max_batch_total_tokens) == (128, None, 10_000)
    assert TGI.limits("3.3.6", {}, kv_tokens=2000, context=4096).max_total_tokens == 2000  # within the KV cache
    assert TGI.limits("2.4.0", {}, kv_tokens=10_000, context=4096).max_batch_prefill_tokens == 4095 + 50


def test_limits_honour_max_batch_size_only_without_chunking() -> None:
    assert TGI.limits("3.3.6", {"MAX_BATCH_SIZE": "4"}, 10_000, 4096).max_batch_size is None
    assert TGI.limits("3.3.6", {"MAX_BATCH_SIZE": "4", "PREFILL_CHUNKING": "0"}, 10_000, 4096).max_batch_size == 4
    assert TGI.limits("2.4.0", {"MAX_BATCH_SIZE": "4"}, 10_000, 4096).max_batch_size == 4


def test_a_variable_that_is_no_integer_is_named() -> None:
    with pytest.raises(InputError, match="environment: MAX_TOTAL_TOKENS: 'lots' is not an integer"):
        TGI.limits("3.3.6", {"MAX_TOTAL_TOKENS": "lots"}, 10_000, 4096)


def test_refusals_are_json_a_too_large_body_plain_text_and_a_refused_stream_an_event() -> None:
    busy = TGI.error_reply(429, "overloaded", "Model is overloaded")
    assert (busy.status, json.loads(busy.body)) == (429, {"error": "Model is overloaded", "error_type": "overloaded"})
    big = TGI.error_reply(413, "payload", "ignored")
    assert (big.status, big.content_type, big.body) == (413, "text/plain", TGI.payload_too_large.encode())
    stream = TGI.stream_refusal(429, "overloaded", "Model is overloaded")
    assert (stream.status, stream.content_type) == (200, "text/event-stream")
    assert stream.body == b'data:{"error":"Model is overloaded","error_type":"overloaded"}\n\n'
    assert TGI.payload_limit({}) == 2_000_000 and TGI.payload_limit({"PAYLOAD_LIMIT": "10"}) == 10

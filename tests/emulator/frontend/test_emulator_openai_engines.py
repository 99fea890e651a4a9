"""A vLLM or SGLang plan: the emulator speaks that image's SageMaker wire (OpenAI bodies on `/invocations`, OpenAI
SSE chunks inside SageMaker's PayloadParts), and the bench's sagemaker transport reads it token for token."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import boto3
from test_emulator_wire import SM, payload_parts

from emulator_helpers import LLAMA2_7B, plan, run, tgi_body
from sagellm.bench.client.transports import APIS, SageMakerTransport, invocation_body
from sagellm.emulator import Emulator, make_prompt
from sagellm.engines import ENGINES, Settings
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment

ENDPOINT = "sagellm-test"


def engine_plan(kind: str) -> DeploymentPlan:
    """One 7B model under the engine's own environment, as a plan sets it."""
    engine = ENGINES[kind]
    env = engine.environment(Settings(model_id=LLAMA2_7B, version=engine.pinned, tensor_parallel=1,
                                      quantization="none", max_input_tokens=4095, max_total_tokens=4096,
                                      max_batch_prefill_tokens=4096, max_concurrent_requests=8, max_batch_size=None))
    deployment = ModelDeployment(name="llama2-7b", model_id=LLAMA2_7B, image_uri=f"{kind}:emulated", tensor_parallel=1,
                                 environment=env, copy_count=1)
    return plan(deployment, container=kind, version=engine.pinned)


def test_a_vllm_plan_streams_openai_chunks_inside_payload_parts_and_refuses_a_generate_body() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[str, bytes, int, Any]:
        body = invocation_body(APIS["openai"], make_prompt(20), 3)
        async with s.post(f"{url}{SM}/invocations-response-stream", json=body) as r:
            content_type = r.headers["X-Amzn-SageMaker-Content-Type"]
            raw = b"".join(part.payload for part in payload_parts(await r.read()))
        async with s.post(f"{url}{SM}/invocations", json=tgi_body(20, 3)) as r:
            return content_type, raw, r.status, await r.json()
    content_type, raw, status, refused = run(engine_plan("vllm"), scenario)
    assert content_type == "text/event-stream"
    events = [line.removeprefix(b"data: ") for line in raw.split(b"\n\n") if line]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["text"] for c in chunks if c["choices"]] == [" the", " quick", " brown"]
    assert chunks[-1]["usage"]["completion_tokens"] == 3 and chunks[-1]["object"] == "text_completion"
    # vLLM's /invocations validates chat, then completions: a TGI body is neither (a 400, as SageMaker passes it).
    assert (status, refused["OriginalStatusCode"]) == (424, 400)
    assert json.loads(refused["OriginalMessage"])["error"]["code"] == 400


def test_an_sglang_plan_takes_only_chat_on_invocations_and_has_no_generate_route() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, int, int]:
        chat = invocation_body(APIS["chat"], make_prompt(20), 3)
        async with s.post(f"{url}/invocations", json={**chat, "stream": False}) as r:
            reply = await r.json()
        async with s.post(f"{url}/invocations", json=invocation_body(APIS["openai"], make_prompt(20), 3)) as r:
            completions = r.status
        async with s.post(f"{url}/generate", json=tgi_body(20, 3)) as r:
            return reply, completions, r.status
    reply, completions, generate = run(engine_plan("sglang"), scenario)
    assert reply["choices"][0]["message"]["content"] == " the quick brown"
    assert (completions, generate) == (400, 404)


def test_the_sagemaker_transport_reads_each_engines_stream_with_exact_tokens() -> None:
    credentials = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator, api: str) -> Any:
        transport = SageMakerTransport(ENDPOINT, "us-east-1", api=APIS[api], endpoint_url=url,
                                       boto_session=credentials)
        return await transport.send(s, make_prompt(30), 7)
    for kind in ("vllm", "sglang"):
        api = ENGINES[kind].sagemaker_api
        record = run(engine_plan(kind), lambda s, url, e, api=api: scenario(s, url, e, api))  # type: ignore[misc]
        assert record.ok, (kind, record.error)
        assert (record.output_tokens, record.input_tokens) == (7, 30), kind

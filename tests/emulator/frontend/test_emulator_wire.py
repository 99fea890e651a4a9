"""Wire fidelity: what a client of the pinned server (TGI 3.3.6, LMI 0.35, vLLM's OpenAI server) or of
SageMaker can tell apart, the emulator answers the same way (docs/containers.md has the sources)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from botocore.eventstream import EventStreamBuffer

from emulator_helpers import LLAMA2_7B, Events, model, plan, run, sse_events, tgi_body
from sagellm.emulator import Emulator, make_prompt
from sagellm.emulator.frontend.formats import generated_text

# The default endpoint name of a standalone emulator: sagellm-<profile> (the test plans' profile is "test").
ENDPOINT = "sagellm-test"
SM = f"/endpoints/{ENDPOINT}"


def payload_parts(raw: bytes) -> list[Any]:
    """The messages of an AWS event stream, decoded by botocore."""
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    return list(buffer)


# --- TGI: a refused stream is HTTP 200 with one SSE error event -----------------------------------


def test_a_refused_tgi_stream_is_http_200_with_an_error_event() -> None:
    p = plan(model(env={"MAX_CONCURRENT_REQUESTS": "1"}))

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[Any]:
        out = []
        for path, body in (("/generate_stream", tgi_body(3000, 5)), ("/invocations", tgi_body(3000, 5, stream=True))):
            async with s.post(f"{url}{path}", json=body) as r:
                out.append((r.status, r.headers["Content-Type"], await sse_events(r)))
        busy = asyncio.create_task(s.post(f"{url}/generate", json=tgi_body(10, 200)))
        await asyncio.sleep(0.05)
        async with s.post(f"{url}/generate_stream", json=tgi_body(10, 5)) as r:
            out.append((r.status, r.headers["Content-Type"], await sse_events(r)))
        (await busy).close()
        return out
    too_long, via_invocations, overloaded = run(p, scenario)
    for status, content_type, events in (too_long, via_invocations):
        assert (status, content_type) == (200, "text/event-stream")
        assert [e for _, e in events] == [{
            "error": "Input validation error: `inputs` tokens must be <= 2048. Given: 3000",
            "error_type": "validation"}]
    assert overloaded[0] == 200
    assert [e for _, e in overloaded[2]] == [{"error": "Model is overloaded", "error_type": "overloaded"}]


def test_a_refused_stream_reaches_a_sagemaker_caller_inside_a_payload_part() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[int, bytes]:
        async with s.post(f"{url}{SM}/invocations-response-stream", json=tgi_body(3000, 5, stream=True)) as r:
            return r.status, await r.read()
    status, raw = run(plan(), scenario)
    assert status == 200  # SageMaker passes the container's 200 on
    [part] = payload_parts(raw)
    assert part.headers[":event-type"] == "PayloadPart"
    assert part.payload == (b'data:{"error":"Input validation error: `inputs` tokens must be <= 2048. Given: 3000",'
                            b'"error_type":"validation"}\n\n')


def test_a_refused_plain_request_is_a_model_error_with_the_containers_status() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[int, str, Any]:
        async with s.post(f"{url}{SM}/invocations", json=tgi_body(3000, 5)) as r:
            return r.status, r.headers["x-amzn-ErrorType"], await r.json()
    status, error_type, body = run(plan(), scenario)
    assert (status, error_type.split(":")[0]) == (424, "ModelError")
    assert body["OriginalStatusCode"] == 422
    assert json.loads(body["OriginalMessage"]) == {
        "error": "Input validation error: `inputs` tokens must be <= 2048. Given: 3000", "error_type": "validation"}


# --- payload limits: SageMaker's 6 MiB, TGI's 2 MB --------------------------------------------------


def test_payload_limits_of_sagemaker_and_of_tgi() -> None:
    big = {"inputs": "x" * (6 * 1024 * 1024 + 1)}
    medium = {"inputs": "x" * 3_000_000}

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[int, str]]:
        out = []
        for path, body in ((f"{SM}/invocations", big), (f"{SM}/invocations-response-stream", big),
                           (f"{SM}/invocations", medium), ("/generate", medium)):
            async with s.post(f"{url}{path}", json=body) as r:
                out.append((r.status, await r.text()))
        return out
    (sm, sm_stream, container, tgi) = run(plan(), scenario)
    assert sm == sm_stream == (413, "HTTP content length exceeded 6291456 bytes.")
    # Under SageMaker's limit but over TGI's: TGI refuses, SageMaker wraps it as a ModelError.
    assert container[0] == 424
    assert json.loads(container[1])["OriginalStatusCode"] == 413
    assert json.loads(container[1])["OriginalMessage"] == "Failed to buffer the request body: length limit exceeded"
    assert tgi == (413, "Failed to buffer the request body: length limit exceeded")


# --- SageMaker routing ----------------------------------------------------------------------------


def test_only_the_endpoints_own_name_is_served() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[int, Any]]:
        out = []
        for name in (ENDPOINT, "another-endpoint"):
            async with s.post(f"{url}/endpoints/{name}/invocations", json=tgi_body(5, 2)) as r:
                out.append((r.status, r.headers.get("x-amzn-ErrorType", "").split(":")[0]))
        return out
    assert run(plan(), scenario, endpoint_name=ENDPOINT) == [(200, ""), (400, "ValidationError")]


def test_without_a_name_it_stands_in_for_any_endpoint_of_the_account() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[int]:
        out = []
        for name in (ENDPOINT, "prod-chat"):
            async with s.post(f"{url}/endpoints/{name}/invocations", json=tgi_body(5, 2)) as r:
                out.append(r.status)
        return out
    assert run(plan(), scenario) == [200, 200]


# --- OpenAI routes, in vLLM's shapes --------------------------------------------------------------


def test_openai_errors_have_vllms_shape() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[int, Any]]:
        out = []
        for path, body in (("/v1/completions", {"model": LLAMA2_7B, "prompt": make_prompt(3000), "max_tokens": 5}),
                           ("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user",
                                                                                     "content": "hi"}]})):
            async with s.post(f"{url}{path}", json=body) as r:
                out.append((r.status, await r.json()))
        return out
    too_long, unknown = run(plan(), scenario)
    assert too_long == (400, {"error": {
        "message": "Input validation error: `inputs` tokens must be <= 2048. Given: 3000",
        "type": "BadRequestError", "param": None, "code": 400}})
    assert unknown == (404, {"error": {"message": "The model `gpt-4` does not exist.", "type": "NotFoundError",
                                       "param": None, "code": 404}})


def test_chat_completions_plain_and_streamed_with_usage() -> None:
    messages = [{"role": "system", "content": make_prompt(10)}, {"role": "user", "content": make_prompt(20)}]

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, Events]:
        body = {"model": LLAMA2_7B, "messages": messages, "max_completion_tokens": 4}
        async with s.post(f"{url}/v1/chat/completions", json=body) as r:
            plain = await r.json()
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        async with s.post(f"{url}/v1/chat/completions", json=streamed) as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            return plain, await sse_events(r)
    plain, events = run(plan(), scenario)
    assert plain["object"] == "chat.completion" and plain["model"] == LLAMA2_7B
    assert plain["choices"] == [{"index": 0, "message": {"role": "assistant", "content": generated_text(4)},
                                 "logprobs": None, "finish_reason": "length"}]
    assert plain["usage"] == {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}
    assert events[-1][1] == "[DONE]"
    role, *tokens, usage = [e for _, e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in (role, *tokens, usage))
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"]["content"] for c in tokens) == generated_text(4)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, None, "length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4


def test_models_lists_the_served_model_with_its_context() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> Any:
        async with s.get(f"{url}/v1/models") as r:
            return await r.json()
    listing = run(plan(), scenario)
    assert listing["object"] == "list"
    [card] = listing["data"]
    assert (card["id"], card["object"], card["owned_by"], card["max_model_len"]) == (LLAMA2_7B, "model", "vllm", 4096)


def test_tgi_sagemaker_route_takes_a_chat_body_too() -> None:
    # TGI's /invocations accepts generate, chat and completions bodies (router/src/sagemaker.rs).
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> Any:
        body = {"messages": [{"role": "user", "content": make_prompt(5)}], "max_tokens": 3}
        async with s.post(f"{url}{SM}/invocations", json=body) as r:
            return await r.json()
    reply = run(plan(), scenario)
    assert reply["choices"][0]["message"]["content"] == generated_text(3)


# --- LMI plans: LMI's response format --------------------------------------------------------------


def lmi_plan() -> Any:
    env = {"OPTION_MAX_MODEL_LEN": "4096", "OPTION_MAX_ROLLING_BATCH_SIZE": "1"}
    return plan(model(env=env), container="lmi", version="0.35.0")


def test_lmi_answers_in_its_own_format_plain_and_as_json_lines() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, str, list[Any]]:
        async with s.post(f"{url}/invocations", json=tgi_body(20, 3)) as r:
            plain = await r.json()
        async with s.post(f"{url}{SM}/invocations-response-stream", json=tgi_body(20, 3, stream=True)) as r:
            content_type = r.headers["X-Amzn-SageMaker-Content-Type"]
            raw = b"".join(part.payload for part in payload_parts(await r.read()))
        return plain, content_type, [json.loads(line) for line in raw.splitlines()]
    plain, content_type, lines = run(lmi_plan(), scenario)
    # One object (TGI would send a list), details with the tokens.
    assert plain["generated_text"] == generated_text(3) and plain["details"]["generated_tokens"] == 3
    assert content_type == "application/jsonlines"
    assert [line["token"]["text"] for line in lines] == [generated_text(3)[:4], " quick", " brown"]
    assert [line["generated_text"] for line in lines] == [None, None, generated_text(3)]
    assert lines[-1]["details"]["generated_tokens"] == 3


def test_lmi_queues_instead_of_refusing_and_reports_errors_as_lmi_does() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, emulator: Emulator) -> tuple[list[int], Any, Any]:
        # Rolling batch of one: the second request waits for the first instead of getting a 429.
        both = [asyncio.create_task(s.post(f"{url}/invocations", json=tgi_body(10, 20))) for _ in range(2)]
        # Until both arrived and the batch took the first (a loaded machine may take a while to send them, and
        # to run the batch's step after they arrive: both are queued until then).
        for _ in range(500):
            await asyncio.sleep(0.01)
            stats = emulator.primary.stats()
            if stats["running"] == stats["queued"] == 1:
                break
        statuses = []
        for task in both:
            resp = await task
            statuses.append(resp.status)
            resp.close()
        async with s.post(f"{url}/invocations", json=tgi_body(5000, 5, stream=True)) as r:
            refused = (r.status, await r.json())
        return statuses, stats, refused
    statuses, stats, refused = run(lmi_plan(), scenario)
    assert statuses == [200, 200] and (stats["running"], stats["queued"]) == (1, 1)
    # Errors before inference: a 4xx status even when streaming, {"error", "code"}.
    assert refused == (400, {"error": "Input validation error: `inputs` tokens must be <= 4095. Given: 5000",
                             "code": 400})

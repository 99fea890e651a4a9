"""Transports against small fake TGI / OpenAI / SageMaker-runtime servers on loopback."""

from __future__ import annotations

import asyncio
import json
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import boto3
import pytest
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from sagellm.bench.client.responses import (
    INFERENCE_COMPONENT_HEADER,
    SseLines,
    StreamState,
    classify_http_error,
    classify_sagemaker_error,
    openai_event,
    tgi_plain_token,
)
from sagellm.bench.client.transports import CHAT, COMPLETIONS, TGI, HttpTransport, SageMakerTransport
from sagellm.clock import Clock
from sagellm.emulator import Emulator, make_prompt
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment
from sagellm.results.records import RequestRecord

CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
REGION = "us-east-1"


# ---------------------------------------------------------------------------------------------------
# Wire formats the fakes speak


def encode_event(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message (string headers only), as the SageMaker runtime sends it."""
    raw = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v.encode())) + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 12 + len(raw) + len(payload) + 4, len(raw))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def payload_part(data: bytes) -> bytes:
    return encode_event({":message-type": "event", ":event-type": "PayloadPart",
                         ":content-type": "application/octet-stream"}, data)


def exception_event(kind: str, message: str, error_code: str | None = None) -> bytes:
    body: dict[str, str] = {"Message": message}
    if error_code:
        body["ErrorCode"] = error_code
    return encode_event({":message-type": "exception", ":exception-type": kind,
                         ":content-type": "application/json"}, json.dumps(body).encode())


def tgi_sse(n_tokens: int, *, generated_tokens: int | None = None, input_length: int = 7,
            server_e2e_s: float | None = None) -> list[bytes]:
    """TGI /generate_stream events for n tokens; the last carries details."""
    events = []
    for i in range(n_tokens):
        last = i == n_tokens - 1
        event: dict[str, Any] = {"index": i + 1, "token": {"id": i, "text": f" t{i}", "logprob": -0.1,
                                                           "special": False},
                                 "generated_text": None, "details": None}
        if last:
            event["generated_text"] = "".join(f" t{j}" for j in range(n_tokens))
            event["details"] = {"finish_reason": "length", "seed": None, "input_length": input_length,
                                "generated_tokens": n_tokens if generated_tokens is None else generated_tokens}
            if server_e2e_s is not None:
                event["details"]["sagellm_server_e2e_s"] = server_e2e_s
                event["details"]["sagellm_server_ttft_s"] = server_e2e_s / 2
        events.append(b"data:" + json.dumps(event).encode() + b"\n\n")
    return events


def openai_sse(n_tokens: int, *, usage: bool) -> list[bytes]:
    events = []
    for i in range(n_tokens):
        chunk = {"id": "c", "object": "text_completion", "model": "m",
                 "choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    final: dict[str, Any] = {"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    events.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    if usage:
        u = {"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": n_tokens,
                                                 "total_tokens": 9 + n_tokens}}
        events.append(b"data: " + json.dumps(u).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def tgi_chat_sse(n_tokens: int) -> list[bytes]:
    """TGI's Messages API stream: a chat chunk per token, `usage` on the last one, then [DONE]."""
    events = []
    for i in range(n_tokens):
        last = i == n_tokens - 1
        chunk: dict[str, Any] = {"object": "chat.completion.chunk", "model": "tgi", "usage": None,
                                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": f" t{i}"},
                                              "finish_reason": "length" if last else None}]}
        if last:
            chunk["usage"] = {"prompt_tokens": 11, "completion_tokens": n_tokens, "total_tokens": 11 + n_tokens}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return [*events, b"data: [DONE]\n\n"]


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


# ---------------------------------------------------------------------------------------------------
# The fake server: the prompt names the scenario


class FakeEndpoint:
    """TGI, OpenAI and SageMaker-runtime routes whose behaviour the prompt selects."""

    def __init__(self, token_gap_s: float = 0.0):
        self.token_gap_s = token_gap_s
        self.attempts: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.signature_ok: list[bool] = []
        app = web.Application()
        app.router.add_post("/generate_stream", self.tgi)
        app.router.add_post("/v1/completions", self.openai)
        app.router.add_post("/endpoints/{name}/invocations-response-stream", self.sagemaker)
        self.runner = web.AppRunner(app)
        self.url = ""

    async def __aenter__(self) -> FakeEndpoint:  # noqa: PYI034
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()

    async def _stream(self, request: web.Request, pieces: list[bytes], content_type: str,
                      gap_s: float | None = None) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        await resp.prepare(request)
        try:
            for piece in pieces:
                await resp.write(piece)
                await asyncio.sleep(self.token_gap_s if gap_s is None else gap_s)
            await resp.write_eof()
        except ConnectionResetError:  # the client stopped reading (it saw an error event)
            pass
        return resp

    async def tgi(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        scenario, n = body["inputs"], body["parameters"]["max_new_tokens"]
        if scenario == "overloaded":
            return web.json_response({"error": "Model is overloaded", "error_type": "overloaded"}, status=429)
        if scenario == "validation":
            return web.json_response({"error": "Input validation error: `inputs` must have less than 10 "
                                               "tokens", "error_type": "validation"}, status=422)
        if scenario == "broken":
            return web.Response(status=500, text="Internal Server Error")
        if scenario == "slow":
            await asyncio.sleep(1)
        if scenario == "silent_after_headers":  # a hung server that sent its headers
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(1)
            return resp
        events = tgi_sse(n, server_e2e_s=0.5 if scenario == "server_timed" else None)
        if scenario == "split":  # every line cut into 5-byte pieces, each its own TCP write
            return await self._stream(request, cut(b"".join(events), 5), "text/event-stream", gap_s=0.001)
        if scenario == "midstream_error":
            error = b'data:{"error":"Request failed during generation: CUDA out of memory","error_type":"generation"}'
            events = [*events[:2], error + b"\n\n"]
        if scenario == "truncated":
            events = events[:-1]
        if scenario == "reported_count":  # the server's count wins over the number of events
            events = tgi_sse(n, generated_tokens=n + 3)
        return await self._stream(request, events, "text/event-stream")

    async def openai(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        events = openai_sse(body["max_tokens"], usage=body["prompt"] != "no_usage")
        if body["prompt"] == "cut":  # llama.cpp's server ends an interrupted stream with [DONE]
            events = [*events[:2], events[-1]]
        return await self._stream(request, events, "text/event-stream")

    def _check_signature(self, request: web.Request, body: bytes) -> bool:
        auth = request.headers.get("Authorization", "")
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";") if "SignedHeaders=" in auth else []
        headers = {name: request.headers[name] for name in signed if name != "host"}
        aws = AWSRequest(method="POST", url=f"http://{request.host}{request.path}", data=body, headers=headers)
        aws.context["timestamp"] = request.headers.get("X-Amz-Date", "")
        signer = SigV4Auth(CREDENTIALS, "sagemaker", REGION)
        expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
        return auth.endswith(f"Signature={expected}") and "/sagemaker/aws4_request" in auth

    async def sagemaker(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.signature_ok.append(self._check_signature(request, raw))
        body = json.loads(raw)
        self.requests.append({**body, "component": request.headers.get(INFERENCE_COMPONENT_HEADER)})
        if "messages" in body:  # TGI's /invocations takes a Messages API body too
            frames = b"".join(payload_part(part) for part in cut(b"".join(tgi_chat_sse(body["max_tokens"])), 41))
            return await self._stream(request, cut(frames, 97), "application/vnd.amazon.eventstream",
                                      gap_s=0.0005)
        scenario, n = body["inputs"], body["parameters"]["max_new_tokens"]
        self.attempts[scenario] = self.attempts.get(scenario, 0) + 1

        def error(status: int, code: str, payload: dict[str, Any]) -> web.Response:
            return web.json_response(payload, status=status, headers={"x-amzn-ErrorType": f"{code}:http://x/"})

        if scenario.startswith("throttle:") and self.attempts[scenario] <= int(scenario.split(":")[1]):
            return error(400, "ThrottlingException", {"message": "Rate exceeded"})
        if scenario == "overloaded":
            return error(424, "ModelError", {
                "Message": 'Received client error (429) from primary with message "{"error":"Model is '
                           'overloaded","error_type":"overloaded"}"',
                "OriginalStatusCode": 429, "OriginalMessage": '{"error":"Model is overloaded"}'})
        if scenario == "container_validation":
            return error(424, "ModelError", {"Message": "Received client error (422) from primary",
                                             "OriginalStatusCode": 422, "OriginalMessage": "too long"})
        if scenario == "validation":
            return error(400, "ValidationError", {"message": "Endpoint foo of account 1 not found."})
        if scenario == "timeout":
            return error(424, "ModelError", {
                "Message": "Received server error (0) from primary with message \"Your invocation timed out "
                           "while waiting for a response from container primary.\"", "OriginalStatusCode": 0})
        sse = b"".join(tgi_sse(n))
        # PayloadParts cut at 37 bytes (lines split across parts), frames cut at 97 bytes across writes.
        frames = b"".join(payload_part(part) for part in cut(sse, 37))
        head = sse[:sse.index(b"\n\n") + 20]  # one whole token event and part of the next
        if scenario == "model_stream_error":
            frames = payload_part(head) + exception_event(
                "ModelStreamError", "Your model response stream timed out", "ModelStreamError")
        elif scenario == "model_stream_error_other":
            frames = payload_part(head) + exception_event("ModelStreamError", "CUDA error", "424")
        elif scenario == "internal_failure":
            frames = payload_part(head) + exception_event("InternalStreamFailure", "internal failure")
        elif scenario == "truncated_frame":
            frames = frames[:-5]
        return await self._stream(request, cut(frames, 97), "application/vnd.amazon.eventstream",
                                  gap_s=0.0005)


async def with_endpoint(fn: Callable[[FakeEndpoint, aiohttp.ClientSession], Awaitable[Any]],
                        token_gap_s: float = 0.0) -> Any:
    async with FakeEndpoint(token_gap_s) as fake, aiohttp.ClientSession() as session:
        return await fn(fake, session)


def sagemaker_transport(fake: FakeEndpoint, **kwargs: Any) -> SageMakerTransport:
    boto_session = boto3.Session(aws_access_key_id=CREDENTIALS.access_key,
                                 aws_secret_access_key=CREDENTIALS.secret_key, region_name=REGION)
    return SageMakerTransport("my-endpoint", REGION, endpoint_url=fake.url, boto_session=boto_session,
                              base_backoff_s=0.001, max_backoff_s=0.002, **kwargs)


def send_tgi(prompt: str, n: int = 5, token_gap_s: float = 0.0, timeout_s: float = 10.0,
             first_byte_s: float = 60.0) -> RequestRecord:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> RequestRecord:
        transport = HttpTransport(fake.url, TGI, timeout_s=timeout_s, first_byte_s=first_byte_s)
        return await transport.send(session, prompt, n)
    return asyncio.run(with_endpoint(go, token_gap_s))


def send_sagemaker(prompt: str, n: int = 5, **kwargs: Any) -> tuple[RequestRecord, FakeEndpoint]:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> tuple[RequestRecord, FakeEndpoint]:
        return await sagemaker_transport(fake, **kwargs).send(session, prompt, n), fake
    return asyncio.run(with_endpoint(go))


def test_sagemaker_chat_sends_a_messages_body_and_reads_chat_chunks_inside_the_event_stream() -> None:
    out, fake = send_sagemaker("hello there", 6, api=CHAT)
    assert out.ok and out.error is None
    assert (out.output_tokens, out.input_tokens, len(out.token_gaps_s)) == (6, 11, 5)
    body = fake.requests[0]
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert (body["max_tokens"], body["stream"], body["stream_options"]) == (6, True, {"include_usage": True})
    assert fake.signature_ok == [True]


def test_chat_chunks_count_content_not_the_opening_role_chunk_nor_the_usage_chunk() -> None:
    st = StreamState(0.0)
    openai_event(st, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                   "finish_reason": None}]}, 1.0)
    assert st.events == 0 and st.record.ttft_s is None
    openai_event(st, {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}, 2.0)
    openai_event(st, {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]}, 2.5)
    openai_event(st, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}, 2.6)
    assert (st.events, st.record.ttft_s, st.record.token_gaps_s, st.output_tokens, st.input_tokens, st.done) == (
        2, 2.0, [0.5], 2, 5, True)


# ---------------------------------------------------------------------------------------------------
# SSE parsing


def test_sse_lines_yield_the_same_payloads_however_the_bytes_are_cut() -> None:
    stream = b"".join(tgi_sse(3)) + b": keep-alive comment\r\n\r\ndata: [DONE]\r\n"
    expected = SseLines().feed(stream + b"\n")
    assert len(expected) == 4 and expected[-1] == b"[DONE]"
    for size in range(1, 40):
        lines = SseLines()
        got = [payload for piece in cut(stream, size) for payload in lines.feed(piece)]
        got += lines.feed(b"\n")
        assert got == expected, size


def test_sse_lines_hold_back_an_incomplete_line() -> None:
    lines = SseLines()
    assert lines.feed(b'data:{"a":') == []
    assert lines.pending
    assert lines.feed(b"1}\n") == [b'{"a":1}']


# ---------------------------------------------------------------------------------------------------
# TGI


def test_tgi_stream_measures_ttft_itl_and_server_token_count() -> None:
    out = send_tgi("ok", n=6, token_gap_s=0.02)
    assert out.ok and out.error_kind is None and out.status == 200
    assert out.output_tokens == 6 and out.input_tokens == 7
    assert len(out.token_gaps_s) == 5
    assert all(gap >= 0.015 for gap in out.token_gaps_s)  # the server sleeps 20 ms between tokens
    assert out.ttft_s is not None and 0 < out.ttft_s < out.e2e_s
    assert out.e2e_s >= out.ttft_s + sum(out.token_gaps_s) - 1e-9


def test_tgi_stream_split_into_five_byte_writes_parses_every_token() -> None:
    out = send_tgi("split", n=8)
    assert out.ok, out.error
    assert out.output_tokens == 8 and len(out.token_gaps_s) == 7


def test_a_bare_tgi_token_event_is_recognised_without_decoding_and_nothing_else_is() -> None:
    *tokens, last = [event.removeprefix(b"data:").strip() for event in tgi_sse(3)]
    compact = json.dumps(json.loads(tokens[0]), separators=(",", ":")).encode()  # TGI's own (serde) spelling
    assert all(tgi_plain_token(t) for t in (*tokens, compact))
    assert not tgi_plain_token(last)  # details and the generated text: decoded
    assert not tgi_plain_token(b'{"error":"Request failed during generation","error_type":"generation"}')
    # A token whose text spells the keys is still a plain token; one whose details are present is not.
    tricky = {"index": 1, "token": {"id": 1, "text": '"details":{}', "special": False}, "generated_text": None,
              "details": None}
    assert tgi_plain_token(json.dumps(tricky).encode())
    assert not tgi_plain_token(json.dumps({**tricky, "details": {"generated_tokens": 1}}).encode())


def test_a_tgi_stream_read_for_its_reply_and_read_for_timings_count_the_same_tokens() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> tuple[RequestRecord, RequestRecord, list[str]]:
        transport = HttpTransport(fake.url, TGI)
        reply: list[str] = []
        return await transport.send(session, "ok", 6), await transport.send(session, "ok", 6, reply), reply

    fast, decoded, reply = asyncio.run(with_endpoint(go))
    assert fast.ok and decoded.ok
    assert (fast.output_tokens, len(fast.token_gaps_s)) == (decoded.output_tokens, len(decoded.token_gaps_s)) == (6, 5)
    assert reply == [f" t{i}" for i in range(6)]  # the reply needs each token's text: every event decoded


def test_tgi_output_tokens_come_from_details_not_from_counting_events() -> None:
    out = send_tgi("reported_count", n=4)
    assert out.ok and out.output_tokens == 7 and len(out.token_gaps_s) == 3


def test_tgi_reads_server_reported_timings_from_the_final_details() -> None:
    out = send_tgi("server_timed", n=3)
    assert out.server_e2e_s == 0.5 and out.server_ttft_s == 0.25


def test_tgi_sends_details_so_the_server_reports_its_count() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> dict[str, Any]:
        await HttpTransport(fake.url, TGI).send(session, "ok", 3)
        return fake.requests[0]
    body = asyncio.run(with_endpoint(go))
    assert body["parameters"] == {"max_new_tokens": 3, "details": True, "do_sample": False}


@pytest.mark.parametrize(("prompt", "kind", "status"), [
    ("overloaded", "overloaded", 429),
    ("validation", "validation", 422),
    ("broken", "other", 500),
    ("midstream_error", "other", 200),
    ("truncated", "other", 200),
])
def test_tgi_errors_map_to_their_kind(prompt: str, kind: str, status: int) -> None:
    out = send_tgi(prompt)
    assert not out.ok and out.error_kind == kind and out.status == status
    assert out.error and out.output_tokens == 0


def test_tgi_midstream_error_keeps_the_partial_timings() -> None:
    out = send_tgi("midstream_error", n=5)
    assert "CUDA out of memory" in (out.error or "")
    assert out.ttft_s is not None and len(out.token_gaps_s) == 1


@pytest.mark.slow
def test_client_timeout_is_a_timeout_error() -> None:
    cpu_wait = CpuWait()
    out = send_tgi("slow", timeout_s=0.2)
    assert not out.ok and out.error_kind == "timeout" and 0.15 < out.e2e_s
    # Given up on soon after the timeout, which only a process that got its CPU can tell.
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"a timeout taken after {out.e2e_s:.2f} s")
    assert out.e2e_s < 2


@pytest.mark.parametrize("prompt", ["slow", "silent_after_headers"])
@pytest.mark.slow
def test_no_first_byte_within_the_invocation_limit_is_a_timeout_that_says_so(prompt: str) -> None:
    out = send_tgi(prompt, first_byte_s=0.2)
    assert not out.ok and out.error_kind == "timeout" and out.ttft_s is None
    assert out.error == "no first byte within the invocation limit (0.2 s)"
    assert 0.2 <= out.e2e_s  # not before the limit (how much after is the scheduler's, not the transport's)


def test_a_stream_that_started_within_the_limit_may_outlast_it() -> None:
    # The limit is on the first byte: a stream that takes longer in all, within the client timeout, is whole.
    out = send_tgi("ok", n=5, token_gap_s=0.1, first_byte_s=0.2)
    assert out.ok and out.output_tokens == 5 and out.e2e_s > 0.4


def test_connection_refused_is_an_error_not_an_exception() -> None:
    async def go() -> RequestRecord:
        async with aiohttp.ClientSession() as session:
            return await HttpTransport("http://127.0.0.1:9", TGI).send(session, "ok", 3)
    out = asyncio.run(go())
    assert not out.ok and out.error_kind == "other" and out.status is None


# ---------------------------------------------------------------------------------------------------
# OpenAI-compatible


def test_openai_counts_tokens_from_usage_when_present() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> tuple[RequestRecord, dict[str, Any]]:
        return await HttpTransport(fake.url, COMPLETIONS, "m").send(session, "ok", 5), fake.requests[0]
    out, body = asyncio.run(with_endpoint(go))
    assert out.ok and out.output_tokens == 5 and out.input_tokens == 9 and len(out.token_gaps_s) == 4
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_openai_without_usage_counts_token_events() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> RequestRecord:
        return await HttpTransport(fake.url, COMPLETIONS, "m").send(session, "no_usage", 4)
    out = asyncio.run(with_endpoint(go))
    assert out.ok and out.output_tokens == 4 and out.input_tokens_by != "server"


def test_openai_stream_ended_by_done_before_any_finish_reason_is_a_cut_stream() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> RequestRecord:
        return await HttpTransport(fake.url, COMPLETIONS, "m").send(session, "cut", 8)
    out = asyncio.run(with_endpoint(go))
    assert not out.ok and out.error_kind == "other"
    assert out.error == "the server cut the stream: [DONE] after 2 token events and no finish_reason"
    assert out.output_tokens == 0 and out.ttft_s is not None  # the partial timing is kept


# ---------------------------------------------------------------------------------------------------
# SageMaker runtime (SigV4 + AWS event stream)


def test_sagemaker_stream_is_signed_and_parsed_across_split_frames_and_parts() -> None:
    out, fake = send_sagemaker("ok", n=9, inference_component="ic-llama")
    assert out.ok, out.error
    assert out.output_tokens == 9 and len(out.token_gaps_s) == 8 and out.retries == 0
    assert fake.signature_ok == [True]
    assert fake.requests[0]["component"] == "ic-llama"
    assert fake.requests[0]["stream"] is True and fake.requests[0]["parameters"]["details"] is True


def test_sagemaker_without_inference_component_sends_no_component_header() -> None:
    out, fake = send_sagemaker("ok")
    assert out.ok and fake.requests[0]["component"] is None


def test_sagemaker_bad_signature_would_be_detected_by_the_fake() -> None:
    # Guards the signature test above against a checker that always says yes.
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> list[bool]:
        transport = sagemaker_transport(fake)
        url, headers, body = transport._request("ok", 3)
        await session.post(url, data=body.replace(b"ok", b"ko"), headers=headers)
        return fake.signature_ok
    assert asyncio.run(with_endpoint(go)) == [False]


@pytest.mark.parametrize(("prompt", "kind"), [
    ("overloaded", "overloaded"),
    ("container_validation", "validation"),
    ("validation", "validation"),
    ("timeout", "timeout"),
    ("model_stream_error", "timeout"),
    ("model_stream_error_other", "other"),
    ("internal_failure", "other"),
    ("truncated_frame", "other"),
])
def test_sagemaker_errors_map_to_their_kind(prompt: str, kind: str) -> None:
    out, fake = send_sagemaker(prompt)
    assert not out.ok and out.error_kind == kind, out.error
    assert out.retries == 0 and fake.attempts[prompt] == 1


def test_sagemaker_exception_event_names_the_exception() -> None:
    out, _ = send_sagemaker("internal_failure")
    assert out.error is not None and out.error.startswith("InternalStreamFailure")
    assert out.ttft_s is not None  # tokens before the failure were timed


def test_sagemaker_throttling_is_retried_and_counted() -> None:
    out, fake = send_sagemaker("throttle:2")
    assert out.ok and out.retries == 2 and fake.attempts["throttle:2"] == 3


def test_sagemaker_throttling_gives_up_after_max_retries() -> None:
    out, fake = send_sagemaker("throttle:99", max_retries=3)
    assert not out.ok and out.error_kind == "throttled" and out.retries == 3
    assert fake.attempts["throttle:99"] == 4


def test_sagemaker_retry_wait_is_not_inside_the_measured_latency() -> None:
    async def go(fake: FakeEndpoint, session: aiohttp.ClientSession) -> tuple[RequestRecord, float, float]:
        transport = sagemaker_transport(fake)
        transport.base_backoff_s = transport.max_backoff_s = 0.5  # waits 0.25–0.5 s
        before = time.perf_counter()
        out = await transport.send(session, "throttle:1", 3)
        return out, before, time.perf_counter()
    out, before, after = asyncio.run(with_endpoint(go))
    assert out.ok and out.retries == 1
    assert out.start_s - before >= 0.25  # the timed attempt began after the backoff
    assert (after - before) - out.e2e_s >= 0.25  # and the backoff is not inside e2e


@pytest.mark.parametrize(("status", "code", "body", "kind"), [
    (400, "ThrottlingException:http://internal", '{"message":"Rate exceeded"}', "throttled"),
    (429, None, '{"message":"Rate exceeded"}', "throttled"),
    (429, "ModelNotReadyException", '{"message":"not ready"}', "other"),
    (424, "ModelError", '{"Message":"x","OriginalStatusCode":429}', "overloaded"),
    (424, "ModelError", '{"Message":"x","OriginalStatusCode":424,"OriginalMessage":"Model is overloaded"}',
     "overloaded"),
    (424, "ModelError", '{"Message":"x","OriginalStatusCode":400}', "validation"),
    (424, "ModelError", '{"Message":"x","OriginalStatusCode":500}', "other"),
    (400, "ValidationError", '{"message":"bad"}', "validation"),
    (500, "InternalFailure", '{"message":"oops"}', "other"),
    (503, "ServiceUnavailable", "<html>", "other"),
])
def test_sagemaker_error_classification(status: int, code: str | None, body: str, kind: str) -> None:
    assert classify_sagemaker_error(status, code, body)[0] == kind


def test_sagemaker_without_credentials_is_refused_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ValueError, match="no AWS credentials"):
        SageMakerTransport("e", REGION, endpoint_url="http://127.0.0.1:9", boto_session=boto3.Session())


@pytest.mark.slow
def test_sagemaker_default_host_is_the_regional_runtime() -> None:
    boto_session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b")
    transport = SageMakerTransport("ep", "eu-west-1", boto_session=boto_session)
    assert transport.url == "https://runtime.sagemaker.eu-west-1.amazonaws.com/endpoints/ep/invocations-response-stream"


@pytest.mark.parametrize(("status", "body", "kind"), [
    (400, '{"object":"error","message":"maximum context length","type":"BadRequestError","code":400}',
     "validation"),
    (429, '{"error":{"message":"Too many requests","type":"overloaded_error"}}', "overloaded"),
    (422, '{"error":"Input validation error","error_type":"validation"}', "validation"),
    (424, '{"error":"Request failed during generation","error_type":"generation"}', "other"),
    (504, "Gateway Timeout", "timeout"),
])
def test_http_error_classification(status: int, body: str, kind: str) -> None:
    assert classify_http_error(status, body)[0] == kind


# ---------------------------------------------------------------------------------------------------
# Against the real emulator (in-process, time compressed): field names and error shapes agree


def emulator_plan(env: dict[str, str]) -> DeploymentPlan:
    model = ModelDeployment(name="llama2-7b", model_id="meta-llama/Llama-2-7b-hf", image_uri="tgi:emulated",
                            tensor_parallel=1, environment={"MAX_INPUT_TOKENS": "64", "MAX_TOTAL_TOKENS": "128", **env})
    return DeploymentPlan(profile="test", region=REGION, container="tgi", instance_type="ml.g5.2xlarge",
                          initial_instance_count=1, endpoint_kind="instance", models=(model,),
                          startup_health_check_timeout_s=600, model_data_download_timeout_s=600,
                          input_tokens=16, output_tokens=16, tags={})


def against_emulator(make: Callable[[str], Any], prompts: list[str], n: int = 6,
                     env: dict[str, str] | None = None) -> list[RequestRecord]:
    async def main() -> list[RequestRecord]:
        emulator = Emulator(emulator_plan(env or {}), clock=Clock(0.05), endpoint_name="ep")
        async with emulator.listening() as url, aiohttp.ClientSession() as session:
            transport = make(url)
            return list(await asyncio.gather(*(transport.send(session, p, n) for p in prompts)))
    return asyncio.run(main())


def sagemaker_at(url: str) -> SageMakerTransport:
    boto_session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name=REGION)
    return SageMakerTransport("ep", REGION, endpoint_url=url, boto_session=boto_session)


@pytest.mark.parametrize("make", [
    pytest.param(lambda url: HttpTransport(url, TGI), id="tgi"),
    pytest.param(lambda url: HttpTransport(url, COMPLETIONS, "llama2-7b"), id="openai"),  # a name the emulator serves
    pytest.param(sagemaker_at, id="sagemaker"),
])
def test_each_transport_reads_the_emulators_stream_counts_and_timings(make: Callable[[str], Any]) -> None:
    [out] = against_emulator(make, [make_prompt(10)])
    assert out.ok, out.error
    assert out.output_tokens == 6 and out.input_tokens == 10 and len(out.token_gaps_s) == 5
    assert out.server_ttft_s is not None and out.server_e2e_s is not None
    assert 0 < out.server_e2e_s <= out.e2e_s and 0 < out.server_ttft_s <= (out.ttft_s or 0)
    assert out.server_arrived_s is not None and out.server_arrived_s > 0  # the arrival the engine saw


def test_sagemaker_against_the_emulator_maps_its_refusals() -> None:
    two = against_emulator(sagemaker_at, [make_prompt(10)] * 2, env={"MAX_CONCURRENT_REQUESTS": "1"})
    assert sorted(o.error_kind or "ok" for o in two) == ["ok", "overloaded"]
    [too_long] = against_emulator(sagemaker_at, [make_prompt(100)])  # over MAX_INPUT_TOKENS=64
    # TGI refuses a streamed request inside the stream (HTTP 200); SageMaker passes it on in a PayloadPart.
    assert too_long.error_kind == "validation" and too_long.status == 200, too_long.error

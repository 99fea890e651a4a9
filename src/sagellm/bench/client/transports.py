"""How one request reaches an endpoint: one client protocol, several transports, one stream parser.

Every transport POSTs a streaming request with aiohttp and turns whatever comes back into a
`RequestRecord` (it never raises, except on cancellation). The shared part is the timing and token accounting
(`StreamState`), the SSE line splitter and the error classification. A transport is a framing (plain
SSE over HTTP, or SageMaker's AWS event-stream messages wrapping the container's SSE lines) and an `Api`:
the request body and the stream events it reads — TGI's generate (`/generate_stream`), OpenAI completions
(`/v1/completions`) or chat (TGI's Messages API and OpenAI's `/v1/chat/completions`, one body and one
chunk format; on SageMaker TGI's `/invocations` takes the same body).

Definitions (all with `time.perf_counter()`, one clock read per received chunk):
- TTFT: start of the attempt → the chunk holding the first token event.
- token gaps: between later token events (events that arrive in the same chunk have a 0 gap); the
  per-request ITL, (e2e − TTFT) ÷ (output tokens − 1), is derived from the record (`RequestRecord.itl_s`).
- e2e: start of the attempt → the end of the stream.
- output tokens: the server's count (TGI `details.generated_tokens`, OpenAI `usage.completion_tokens`,
  asked for with `stream_options.include_usage`); only when the server reports none, the number of token
  events.
- first byte: a request that has heard nothing (no response, no stream byte) within `first_byte_s` (SageMaker's
  60 s invocation limit) ends as a `timeout` then, whatever its total timeout: the bench reads that on the
  first requests as a hung endpoint (`runner`).
- Retries (SageMaker throttling only) are counted in `retries`; the timings are those of the last
  attempt, and `start_s` is when the last attempt began, so the backoff wait is neither hidden inside the
  latency nor silently dropped: it shows as a gap between the request's start and the previous one.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from sagellm.bench.client.conversation import Prompt, as_text
from sagellm.bench.client.responses import (
    INFERENCE_COMPONENT_HEADER,
    EventStreamLines,
    Failed,
    SseLines,
    StreamState,
    classify_http_error,
    classify_sagemaker_error,
    openai_event,
    tgi_event,
    tgi_plain_token,
)
from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.results.records import RequestRecord
from sagellm.results.schema import ErrorKind

if TYPE_CHECKING:
    import boto3


# json.loads without its per-call encoding sniffing of bytes: the stream is UTF-8 (one event per token).
_decode = json.JSONDecoder().decode


class Transport(Protocol):
    """Sends one generation request and measures it; never raises (errors become `ok=False`)."""

    async def send(self, session: aiohttp.ClientSession, prompt: Prompt, max_new_tokens: int,
                   reply: list[str] | None = None) -> RequestRecord:
        """Send `prompt` (a text, or a conversation's messages), ask for `max_new_tokens`, and return what
        happened; the reply's text pieces are appended to `reply` where one is given (a conversation's history)."""
        ...


# ---------------------------------------------------------------------------------------------------
# The APIs: request body and stream events


def tgi_body(prompt: Prompt, max_new_tokens: int, model: str = "") -> dict[str, Any]:
    """TGI's generate body; `details` makes the last event carry the generated token count."""
    return {"inputs": as_text(prompt), "parameters": {"max_new_tokens": max_new_tokens, "details": True,
                                              "do_sample": False}}


def completions_body(prompt: Prompt, max_new_tokens: int, model: str) -> dict[str, Any]:
    """OpenAI's completions body; ignore_eos is vLLM's way to get exactly max_tokens (the published method
    discourages early stop)."""
    return {"model": model, "prompt": as_text(prompt), "max_tokens": max_new_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0, "ignore_eos": True}


def chat_body(prompt: Prompt, max_new_tokens: int, model: str) -> dict[str, Any]:
    """A chat body both TGI's Messages API and OpenAI-compatible servers accept: the prompt as one user
    message, or a conversation's messages (the server applies its chat template, and counts those tokens in
    `usage.prompt_tokens`)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    return {"model": model or "tgi", "messages": messages,
            "max_tokens": max_new_tokens, "stream": True, "stream_options": {"include_usage": True}}


@dataclass(frozen=True)
class Api:
    """What a request says and what its stream holds: the body, the route on a TGI/OpenAI server, the events."""

    name: str
    path: str
    body: Callable[[Prompt, int, str], dict[str, Any]]
    event: Callable[[StreamState, dict[str, Any], float], None]
    done_marker: bytes | None = None
    plain_token: Callable[[bytes], bool] | None = None  # an event that is only a token: counted, not decoded


TGI = Api("tgi", "/generate_stream", tgi_body, tgi_event, plain_token=tgi_plain_token)
COMPLETIONS = Api("openai", "/v1/completions", completions_body, openai_event, b"[DONE]")
CHAT = Api("chat", "/v1/chat/completions", chat_body, openai_event, b"[DONE]")
APIS = {api.name: api for api in (TGI, COMPLETIONS, CHAT)}


def invocation_body(api: Api, prompt: Prompt, max_new_tokens: int) -> dict[str, Any]:
    """What the sagemaker target sends to a container's `/invocations`: the API's body, streamed, naming no model.

    /invocations streams when the body says so: TGI's generate or Messages API (chat) body, vLLM's completions or
    chat, SGLang's chat; each server streams its own SSE lines, which SageMaker wraps in PayloadParts. A container
    serves one model, and `model` is optional in each of those bodies (vLLM answers 404 to a name it does not
    serve), so none is named.
    """
    body = {**api.body(prompt, max_new_tokens, ""), "stream": True}
    body.pop("model", None)
    return body


# ---------------------------------------------------------------------------------------------------
# The transports


class _StreamingTransport:
    """The request loop shared by every transport: POST, check the status, parse the stream, time it."""

    timeout_s: float
    first_byte_s: float
    api: Api
    max_retries = 0
    base_backoff_s = 0.0
    max_backoff_s = 0.0

    def _request(self, prompt: Prompt, max_new_tokens: int) -> tuple[str, dict[str, str], bytes]:
        raise NotImplementedError

    def _decoder(self) -> SseLines | EventStreamLines:
        return SseLines()

    def _http_error(self, resp: aiohttp.ClientResponse, body: str) -> tuple[ErrorKind, str]:
        return classify_http_error(resp.status, body)

    async def send(self, session: aiohttp.ClientSession, prompt: Prompt, max_new_tokens: int,
                   reply: list[str] | None = None) -> RequestRecord:
        """Send one request; retry only what `_http_error` calls `throttled`, at most `max_retries` times."""
        retries = 0
        while True:
            if reply is not None:
                reply.clear()  # the last attempt's reply
            out = await self._attempt(session, prompt, max_new_tokens, reply)
            if out.error_kind != "throttled" or retries >= self.max_retries:
                out.retries = retries
                return out
            retries += 1
            backoff = min(self.max_backoff_s, self.base_backoff_s * 2 ** (retries - 1))
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))

    async def _attempt(self, session: aiohttp.ClientSession, prompt: Prompt, max_new_tokens: int,
                       reply: list[str] | None = None) -> RequestRecord:
        try:
            url, headers, body = self._request(prompt, max_new_tokens)
        except Exception as exc:  # noqa: BLE001 - e.g. expired credentials while signing; send never raises
            now = time.perf_counter()
            return RequestRecord(ok=False, start_s=now, e2e_s=0.0, error_kind="other",
                                 error=f"could not build the request: {type(exc).__name__}: {exc}")
        t0 = time.perf_counter()
        st = StreamState(t0, reply)
        status: int | None = None
        first_byte = asyncio.timeout(self.first_byte_s)  # lifted once the response's first byte is in
        try:
            async with first_byte, session.post(url, data=body, headers=headers,
                                                timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
                status = resp.status
                if status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")
                    kind, message = self._http_error(resp, text)
                    raise Failed(kind, message, status)
                st.server_timings(resp.headers)
                decoder = self._decoder()
                event = self.api.event
                done_marker = self.api.done_marker
                plain = self.api.plain_token if reply is None else None  # a reply needs each token's text
                read = resp.content.readany
                chunk = await read()
                first_byte.reschedule(None)
                while chunk:
                    now = time.perf_counter()
                    for data in decoder.feed(chunk):
                        if plain is not None and plain(data):
                            st.token(now)
                            continue
                        if data == done_marker:
                            if not st.done:  # llama.cpp's server ends a stream it interrupts this way
                                raise Failed("other", f"the server cut the stream: [DONE] after {st.events} "
                                                      "token events and no finish_reason")
                            continue
                        try:
                            parsed = _decode(data.decode())
                        except ValueError:
                            raise Failed("other", f"unparseable stream event: {data[:200]!r}") from None
                        event(st, parsed, now)
                    chunk = await read()
                if isinstance(decoder, EventStreamLines):
                    decoder.close()
            end = time.perf_counter()
            if not st.done:
                raise Failed("other", f"stream ended before the final event after {st.events} token events")
        except Failed as failure:
            return self._failed(st, failure.kind, failure.message, failure.status or status)
        except TimeoutError:
            if first_byte.expired():
                return self._failed(st, "timeout", f"no first byte within the invocation limit "
                                                   f"({self.first_byte_s:g} s)", status)
            return self._failed(st, "timeout", f"no complete response within the client timeout "
                                               f"({self.timeout_s:g} s)", status)
        except aiohttp.ClientError as exc:
            return self._failed(st, "other", f"{type(exc).__name__}: {exc}", status)
        except Exception as exc:  # noqa: BLE001 - send never raises; cancellation still propagates
            return self._failed(st, "other", f"{type(exc).__name__}: {exc}", status)
        return st.finish(end, ok=True, status=status)

    @staticmethod
    def _failed(st: StreamState, kind: ErrorKind, message: str, status: int | None) -> RequestRecord:
        return st.finish(time.perf_counter(), ok=False, status=status, error_kind=kind, error=message)


class HttpTransport(_StreamingTransport):
    """A TGI or OpenAI-compatible server (vLLM, LMI, the emulator): server-sent events over HTTP."""

    def __init__(self, url: str, api: Api = TGI, model: str = "", *, timeout_s: float = 60.0,
                 first_byte_s: float = INVOCATION_TIMEOUT_S):
        self.url = url.rstrip("/") + api.path
        self.api = api
        self.model = model
        self.timeout_s = timeout_s
        self.first_byte_s = first_byte_s

    def _request(self, prompt: Prompt, max_new_tokens: int) -> tuple[str, dict[str, str], bytes]:
        body = json.dumps(self.api.body(prompt, max_new_tokens, self.model)).encode()
        return self.url, {"Content-Type": "application/json", "Accept": "text/event-stream"}, body


class SageMakerTransport(_StreamingTransport):
    """SageMaker runtime `InvokeEndpointWithResponseStream`, SigV4-signed, sent with aiohttp.

    boto3's own client is not used on the hot path: it drops unknown and truncated event-stream frames
    silently, retries 429/5xx inside the measured latency, and costs a thread per request. Throttling
    (the runtime's ThrottlingException) is retried up to `max_retries` times with jittered exponential
    backoff and counted; the timings are the last attempt's (see the module docstring).
    """

    def __init__(self, endpoint_name: str, region: str, *, api: Api = TGI, inference_component: str | None = None,
                 endpoint_url: str | None = None, boto_session: boto3.Session | None = None,
                 timeout_s: float = 70.0, first_byte_s: float = INVOCATION_TIMEOUT_S + 1.0, max_retries: int = 3,
                 base_backoff_s: float = 0.2, max_backoff_s: float = 2.0):
        import boto3 as _boto3

        session = boto_session or _boto3.Session(region_name=region)
        credentials = session.get_credentials()
        if credentials is None:
            raise ValueError("no AWS credentials found for the sagemaker target: configure a profile, "
                             "environment variables or an instance role")
        if endpoint_url is None:
            # botocore's resolver: the right partition, and AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME if set.
            endpoint_url = session.client("sagemaker-runtime", region_name=region).meta.endpoint_url
        self.url = f"{endpoint_url.rstrip('/')}/endpoints/{endpoint_name}/invocations-response-stream"
        self.region = region
        self.api = api
        self.inference_component = inference_component
        self._credentials = credentials
        # A little over SageMaker's 60 s invocation timeout, so the runtime's own error arrives first.
        self.timeout_s = timeout_s
        self.first_byte_s = first_byte_s
        self.max_retries = max_retries
        self.base_backoff_s = base_backoff_s
        self.max_backoff_s = max_backoff_s

    def _request(self, prompt: Prompt, max_new_tokens: int) -> tuple[str, dict[str, str], bytes]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        body = json.dumps(invocation_body(self.api, prompt, max_new_tokens)).encode()
        headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Accept": "application/json"}
        if self.inference_component:
            headers[INFERENCE_COMPONENT_HEADER] = self.inference_component
        request = AWSRequest(method="POST", url=self.url, data=body, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "sagemaker", self.region).add_auth(request)
        return self.url, dict(request.headers.items()), body

    def __getstate__(self) -> dict[str, Any]:
        """For a worker process: the credentials as they are now (refreshing ones hold a lock, unpicklable)."""
        from botocore.credentials import Credentials

        frozen = self._credentials.get_frozen_credentials()
        return {**self.__dict__, "_credentials": Credentials(frozen.access_key, frozen.secret_key, frozen.token)}

    def _decoder(self) -> EventStreamLines:
        return EventStreamLines()

    def _http_error(self, resp: aiohttp.ClientResponse, body: str) -> tuple[ErrorKind, str]:
        return classify_sagemaker_error(resp.status, resp.headers.get("x-amzn-ErrorType"), body)

"""The emulator's HTTP server: SageMaker runtime, TGI/LMI and OpenAI-compatible routes over the simulated copies.

What a client can tell apart is what the pinned server and SageMaker do on the wire (docs/containers.md; the
pinned server's reply and error formats are its engine's, sagellm.engines):
- SageMaker runtime: `POST /endpoints/{name}/invocations` and `…/invocations-response-stream` (AWS
  event-stream: each piece of the container's reply in a `PayloadPart`). An unknown endpoint name is a
  `ValidationError`; the `X-Amzn-SageMaker-Inference-Component` header must name a component exactly
  (required on inference-component endpoints, refused on others); a body over 6 MiB is refused with 413.
  The body goes to the container as SageMaker passes it to `/invocations`. Container errors come back
  as `ModelError` (HTTP 424, `OriginalStatusCode`/`OriginalMessage`); after 60 simulated seconds the
  invocation fails with a timeout (`ModelError`, or `ModelStreamError` once the stream has started).
- The container, TGI plans (TGI 3): `POST /generate`, `/generate_stream`, `/invocations` (generate,
  chat or completions bodies; `"stream": true` gives SSE); `GET /info`, `/health`, `/ping`. A streamed
  request that is refused (429, 422) is still HTTP 200, with one `data:{"error", "error_type"}` event; a body
  over TGI's 2 MB payload limit gets 413.
- The container, LMI plans (LMI 0.35, vLLM async): `/invocations` answers generate bodies in LMI's format —
  one JSON object, or JSON lines (`application/jsonlines`) when streamed; errors `{"error", "code"}`.
- OpenAI-compatible (vLLM's shapes): `POST /v1/completions`, `/v1/chat/completions` (SSE when streamed,
  a final usage chunk with `stream_options.include_usage`), `GET /v1/models`; errors
  `{"error": {"message", "type", "param", "code"}}`.
- `GET /metrics`: the emulator's own event-loop lag and counters (`?reset=1` clears the lag figures).
- `GET /autoscaling`: the simulated target tracking of a plan with autoscaling (`autoscaling` module):
  policy, simulated clock now, desired and in-service instances, events and metric datapoints.

Self-reported timings (from arrival to the first and to the last token on the engine's schedule), in one
clock: wall seconds, like the client's own timings; divide by the time scale for simulated seconds (the bench
reads the scale from `/info` on every target and converts; see `engine`):
`X-Sagellm-Server-Ttft-S` / `X-Sagellm-Server-E2e-S` headers on non-streamed replies;
`sagellm_server_ttft_s` / `sagellm_server_e2e_s` in the last stream event's `details` (TGI and LMI,
when `details` is asked for) or at the top of the last token chunk (OpenAI). Every reply carries
`X-Sagellm-Emulated: true` and `X-Sagellm-Time-Scale`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace

from aiohttp import web

from sagellm.catalog import models as catalog_models
from sagellm.emulator import eventstream, formats
from sagellm.emulator.autoscaling import Policy, TargetTracking
from sagellm.emulator.cloudwatch import Publisher
from sagellm.emulator.copies import (
    Cancelled,
    CopyEngine,
    InvocationTimeout,
    ModelServer,
    RequestError,
    Sequence,
)
from sagellm.emulator.formats import Ask
from sagellm.engines import ErrorReply
from sagellm.errors import InputError, TargetError
from sagellm.planner.constants import INVOCATION_TIMEOUT_S
from sagellm.profiles.plan import DeploymentPlan

IC_HEADER = "X-Amzn-SageMaker-Inference-Component"
SERVER_TTFT_HEADER = "X-Sagellm-Server-Ttft-S"
SERVER_E2E_HEADER = "X-Sagellm-Server-E2e-S"
SERVER_TTFT_DETAIL = "sagellm_server_ttft_s"
SERVER_E2E_DETAIL = "sagellm_server_e2e_s"
_SSE = "text/event-stream"
_JSON = "application/json"
# InvokeEndpoint[WithResponseStream]: the request body may hold at most 6 MiB (API reference, Body).
SAGEMAKER_MAX_PAYLOAD = 6 * 1024 * 1024
_ACCOUNT = "000000000000"
_VARIANT = "AllTraffic"
_SHUTDOWN = "the emulator is shutting down"
_TIMEOUT_MESSAGE = ("Your invocation timed out while waiting for a response from container primary. "
                    "Review the latency metrics for each container in Amazon CloudWatch, resolve the issue, "
                    "and try again.")
_STREAM_TIMEOUT_MESSAGE = ("Your model failed to finish sending the response within the timeout period "
                           "allowed by Amazon SageMaker (60 s): the invocation timed out.")


class _AwsError(Exception):
    """A SageMaker runtime error of its own (not the container's): status, error type, message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _aws_error(status: int, code: str, body: dict[str, object]) -> web.Response:
    headers = {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.sagemaker/",
               "x-amzn-RequestId": str(uuid.uuid4())}
    return web.json_response(body, status=status, headers=headers)


@dataclass(frozen=True)
class _Reply:
    """A whole container reply (an error, or a refused stream that is still HTTP 200)."""

    status: int
    content_type: str
    body: bytes


def _reply_of(refusal: ErrorReply) -> _Reply:
    return _Reply(refusal.status, refusal.content_type, refusal.body)


def _model_error(reply: _Reply) -> web.Response:
    """What SageMaker answers when the container returned an error status."""
    original = reply.body.decode("utf-8", "replace").strip()
    side = "client" if reply.status < 500 else "server"
    return _aws_error(424, "ModelError", {
        "ErrorCode": f"{side.upper()}_ERROR_FROM_MODEL",
        "Message": f"Received {side} error ({reply.status}) from primary with message \"{original}\".",
        "OriginalStatusCode": reply.status, "OriginalMessage": original})


def _too_large() -> web.Response:
    """SageMaker's own refusal of an oversized request body (no error type: boto3 reports `(413)`)."""
    return web.Response(status=413, text=f"HTTP content length exceeded {SAGEMAKER_MAX_PAYLOAD} bytes.",
                        headers={"x-amzn-RequestId": str(uuid.uuid4())})


def _timeout_error() -> web.Response:
    return _aws_error(424, "ModelError", {
        "ErrorCode": "INVOCATION_TIMEOUT",
        "Message": f"Received server error (0) from primary with message \"{_TIMEOUT_MESSAGE}\"."})


class _LoopLag:
    """How late the event loop wakes a periodic timer: the emulator's own distortion, for `/metrics`."""

    interval_s = 0.05

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the figures so far."""
        self.max_s = 0.0
        self.total_s = 0.0
        self.samples = 0

    async def run(self) -> None:
        """Sample forever."""
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, time.perf_counter() - t - self.interval_s)
            self.max_s = max(self.max_s, lag)
            self.total_s += lag
            self.samples += 1

    def snapshot(self) -> dict[str, float | int]:
        """Max and mean lag in seconds, and the number of samples."""
        return {"max": self.max_s, "avg": self.total_s / self.samples if self.samples else 0.0,
                "samples": self.samples}


class _Call:
    """One admitted request: the copy serving it, its sequence, and the server-side timings."""

    __slots__ = ("arrived_s", "ask", "copy", "e2e_s", "model", "seq", "ttft_s")

    def __init__(self, model: ModelServer, ask: Ask, arrived_s: float, deadline_s: float | None):
        self.model = model
        self.ask = ask
        self.arrived_s = arrived_s
        self.copy: CopyEngine
        self.seq: Sequence
        self.copy, self.seq = model.submit(ask.input_tokens, ask.max_new_tokens, deadline_s, arrived_s)
        self.ttft_s: float | None = None
        self.e2e_s: float | None = None

    def timings(self) -> dict[str, float]:
        """The emulator's own TTFT and e2e (schedule seconds), for details and final chunks."""
        out = {}
        if self.ttft_s is not None:
            out[SERVER_TTFT_DETAIL] = round(self.ttft_s, 6)
        if self.e2e_s is not None:
            out[SERVER_E2E_DETAIL] = round(self.e2e_s, 6)
        return out

    def timing_headers(self) -> dict[str, str]:
        """The same timings as response headers (non-streamed replies)."""
        return {SERVER_TTFT_HEADER: f"{self.ttft_s:.6f}", SERVER_E2E_HEADER: f"{self.e2e_s:.6f}"}

    async def finish(self) -> int:
        """Wait for the whole generation (non-streamed replies); stamp the timings."""
        async for _ in self.seq.progress():
            pass
        self.first_chunk()
        self.last_chunk()
        return self.seq.generated

    def first_chunk(self) -> None:
        """The first token is about to be written: stamp its time on the schedule."""
        if self.ttft_s is None and self.seq.first_token_s is not None:
            self.ttft_s = self.seq.first_token_s - self.arrived_s

    def last_chunk(self) -> None:
        """The last token is about to be written: stamp its time on the schedule."""
        if self.seq.last_token_s is not None:
            self.e2e_s = self.seq.last_token_s - self.arrived_s

    def close(self) -> None:
        """Free the copy's slot if the request ends early (client gone, timeout, error)."""
        self.copy.cancel(self.seq)


# The admitted call of a SageMaker invocation, for the CloudWatch publisher (`Emulator._counted`).
_CALL = web.RequestKey("sagellm_call", _Call)


def _details(call: _Call, n_tokens: int) -> dict[str, object] | None:
    """TGI's (and LMI's) `details` with the emulator's timings, when the request asked for details."""
    return formats.generate_details(n_tokens, call.ask.input_tokens, call.timings()) if call.ask.details else None


async def _token_events(call: _Call, token: Callable[[int], bytes], last: Callable[[int], bytes]
                        ) -> AsyncIterator[bytes]:
    """One event per token as the engine produces it; the last is rendered after stamping the e2e time."""
    sent = 0
    final = call.seq.max_new_tokens - 1
    async for n in call.seq.progress():
        call.first_chunk()
        for i in range(sent, n):
            if i < final:
                yield token(i)
            else:
                call.last_chunk()
                yield last(i)
        sent = n


async def _whole(call: _Call, render: Callable[[int], object]) -> AsyncIterator[bytes]:
    """A non-streamed reply: wait for every token, then render the body once."""
    n = await call.finish()
    yield json.dumps(render(n)).encode()


def _openai_id(api: str) -> str:
    return f"{'chatcmpl' if api == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"


async def _openai_sse(call: _Call, model_id: str) -> AsyncIterator[bytes]:
    """OpenAI stream chunks (a chat role chunk first), the usage chunk if asked for, then `[DONE]`."""
    api, request_id, created = call.ask.api, _openai_id(call.ask.api), int(time.time())
    if api == "chat":
        yield formats.openai_chunk(api, request_id, model_id, created, None)
    async for event in _token_events(
            call, lambda i: formats.openai_chunk(api, request_id, model_id, created, i),
            lambda i: formats.openai_chunk(api, request_id, model_id, created, i, last=True,
                                           timings=call.timings())):
        yield event
    if call.ask.include_usage:
        yield formats.openai_usage_chunk(api, request_id, model_id, created, call.seq.generated,
                                         call.ask.input_tokens)
    yield formats.OPENAI_DONE


class Emulator:
    """A local endpoint that behaves like `plan`: every model's copies, and the routes in front of them.

    `endpoint_name` is the one name the SageMaker routes answer to (without one they answer any name, and
    call themselves `sagellm-<profile>`);
    `component_names` maps each plan model to its deployed inference-component name (default: the plan's
    model names), the only names the component header may carry; `instance_startup_s` is how long a new
    instance takes to come into service when the simulated autoscaling adds one; with `cloudwatch_url` (the
    local AWS) it publishes the metrics SageMaker would publish.
    """

    def __init__(self, plan: DeploymentPlan, *, time_scale: float = 1.0, endpoint_name: str | None = None,
                 component_names: dict[str, str] | None = None, instance_startup_s: float | None = None,
                 cloudwatch_url: str | None = None):
        if not time_scale > 0:
            raise InputError(f"time_scale: {time_scale} must be > 0 (0.1 runs ten times faster)")
        self.plan = plan
        self.time_scale = time_scale
        self.endpoint_name = endpoint_name or f"sagellm-{plan.profile}"
        # Without a name it stands in for every endpoint of an account (`sagellm emulate` behind `local-aws`).
        self._any_endpoint = endpoint_name is None
        self.models = {m.name: ModelServer(plan, m, time_scale) for m in plan.models}
        names = component_names or {m.name: m.name for m in plan.models}
        self.component_names = {name: names.get(name, name) for name in self.models}
        self._by_component = {deployed: self.models[name] for name, deployed in self.component_names.items()}
        self.primary = self.models[plan.models[0].name]
        self.engine = self.primary.engine
        self.payload_limit = self.engine.payload_limit(plan.primary.environment)
        self.served = 0
        self._lag = _LoopLag()
        self._lag_task: asyncio.Task[None] | None = None
        self._headers = {"X-Sagellm-Emulated": "true", "X-Sagellm-Time-Scale": f"{time_scale:g}"}
        self.autoscaling = _target_tracking(plan, instance_startup_s)
        self._zero = time.perf_counter()  # the simulated clock's origin (reset when serving starts)
        self._scaling_task: asyncio.Task[None] | None = None
        # With a (local) CloudWatch to publish to: the metrics SageMaker would publish (see `cloudwatch`).
        self.publisher: Publisher | None = None
        if cloudwatch_url is not None:
            self.publisher = Publisher(cloudwatch_url, plan.region, self.endpoint_name, self.models,
                                       time_scale, plan.initial_instance_count,
                                       plan.endpoint_kind == "inference-component")
        self._publish_task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (engines start with `listening`)."""
        app = web.Application(middlewares=[self._errors], client_max_size=16 * 2**20)
        app.router.add_post("/endpoints/{name}/invocations", self._counted(self._sm_invocations))
        app.router.add_post("/endpoints/{name}/invocations-response-stream", self._counted(self._sm_stream))
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/generate_stream", self._generate_stream)
        app.router.add_post("/invocations", self._invocations)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models_list)
        app.router.add_get("/info", self._info)
        app.router.add_get("/health", self._ok)
        app.router.add_get("/ping", self._ok)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/autoscaling", self._autoscaling)
        app.router.add_post("/cloudwatch/flush", self._flush)
        return app

    @contextlib.asynccontextmanager
    async def listening(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on `host:port` (0: any free port) while the block runs; yields the base URL."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Without TCP_NODELAY Nagle's algorithm holds small token writes back by tens of ms (platform
        # notes). Accepted sockets inherit it on Linux; asyncio and aiohttp also set it per connection.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise TargetError(f"emulator: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.SockSite(runner, sock, backlog=1024).start()
            for model in self.models.values():
                model.start()
            self._lag_task = asyncio.get_running_loop().create_task(self._lag.run())
            self._zero = time.perf_counter()
            loop = asyncio.get_running_loop()
            if self.autoscaling is not None:
                self._scaling_task = loop.create_task(self._scale())
            if self.publisher is not None:
                self._publish_task = loop.create_task(self.publisher.run())
            bound = sock.getsockname()[1]
            yield f"http://[{host}]:{bound}" if family == socket.AF_INET6 else f"http://{host}:{bound}"
        finally:
            for task in (self._lag_task, self._scaling_task, self._publish_task):
                if task is not None:
                    task.cancel()
            for model in self.models.values():
                await model.stop()  # in-flight handlers end (Cancelled) before the connections close
            await runner.cleanup()
            sock.close()

    # -- errors, in each API's own shape --------------------------------------------------------------

    def _container_error(self, exc: RequestError) -> _Reply:
        """The pinned server's error reply (TGI `{"error", "error_type"}`, LMI `{"error", "code"}`)."""
        return _reply_of(self.engine.error_reply(exc.status, exc.error_type, exc.message))

    def _stream_refusal(self, exc: RequestError) -> _Reply:
        """A refused stream as the pinned server sends it (TGI: HTTP 200 and one SSE error event)."""
        return _reply_of(self.engine.stream_refusal(exc.status, exc.error_type, exc.message))

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Refusals in the shape of the API that was called."""
        openai = request.path.startswith("/v1/")
        try:
            return await handler(request)
        except RequestError as exc:
            if openai:
                status = {422: 400}.get(exc.status, exc.status)
                return web.json_response(formats.openai_error(status, exc.message), status=status,
                                         headers=self._headers)
            reply = self._container_error(exc)
            return web.Response(body=reply.body, status=reply.status, content_type=reply.content_type,
                                headers=self._headers)
        except Cancelled:
            if openai:
                return web.json_response(formats.openai_error(503, _SHUTDOWN), status=503)
            return web.json_response({"error": _SHUTDOWN, "error_type": "cancelled"}, status=503)
    # -- autoscaling ----------------------------------------------------------------------------------

    def simulated_now_s(self) -> float:
        """Simulated seconds since the emulator started serving."""
        return (time.perf_counter() - self._zero) / self.time_scale

    def _apply_scaling(self, now_s: float) -> None:
        assert self.autoscaling is not None
        if self.autoscaling.advance(now_s):
            self.primary.resize(self.autoscaling.in_service)

    async def _scale(self) -> None:
        """Run the scaling loop on the simulated clock: one tick per simulated second."""
        while True:
            self._apply_scaling(self.simulated_now_s())
            await asyncio.sleep(self.time_scale)

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        """An InvokeEndpoint call held by the variant, from arrival to its reply's end: it counts in the
        concurrent-requests metric the scaling policy tracks."""
        if self.autoscaling is None:
            yield
            return
        self._apply_scaling(self.simulated_now_s())
        self.autoscaling.started(self.simulated_now_s())
        try:
            yield
        finally:
            self._apply_scaling(self.simulated_now_s())
            self.autoscaling.finished(self.simulated_now_s())

    async def _autoscaling(self, request: web.Request) -> web.Response:
        if self.autoscaling is None:
            body: dict[str, object] = {"simulated": False, "now_s": self.simulated_now_s(),
                                       "why": "the plan has no autoscaling on an instance-based variant"}
        else:
            self._apply_scaling(self.simulated_now_s())
            body = {"simulated": True, **self.autoscaling.to_dict()}
        return web.json_response(body, headers=self._headers)

    # -- routing ------------------------------------------------------------------------------------

    def _model_for(self, request: web.Request, model_field: str | None = None) -> ModelServer:
        """Container routes: the component header if given (exactly), else OpenAI's `model`, else the first model."""
        name = request.headers.get(IC_HEADER)
        if name is not None:
            model = self._by_component.get(name)
            if model is None:
                raise RequestError(400, "validation", f"unknown inference component {name!r}: "
                                                      f"known: {', '.join(self._by_component)}")
            return model
        if model_field is None:
            return self.primary
        for key, model in self.models.items():  # served names: the model id, the plan's name, the alias
            known = catalog_models().get(model.deployment.model_id)
            if model_field in (key, model.deployment.model_id, known.alias if known else None):
                return model
        raise RequestError(404, "not_found", f"The model `{model_field}` does not exist.")

    def _sm_model(self, request: web.Request) -> ModelServer:
        """SageMaker routes: the endpoint name, then the inference-component header (SageMaker's order)."""
        name = request.match_info["name"]
        if name != self.endpoint_name and not self._any_endpoint:
            raise _AwsError(400, "ValidationError", f"Endpoint {name} of account {_ACCOUNT} not found.")
        component = request.headers.get(IC_HEADER)
        if self.plan.endpoint_kind == "inference-component":
            if component is None:
                raise _AwsError(400, "ValidationError",
                                "Inference Component Name header is required for endpoints to which you plan "
                                "to deploy inference components. Please include Inference Component Name "
                                "header or consider using SageMaker models.")
            model = self._by_component.get(component)
            if model is None:
                raise _AwsError(400, "ValidationError",
                                f"Inference Component {component} not found for endpoint {name} "
                                f"of account {_ACCOUNT}.")
            return model
        if component is not None:
            raise _AwsError(400, "ValidationError",
                            "Inference Component Name header is not allowed for endpoints to which you do "
                            "not plan to deploy inference components. Please remove the Inference Component "
                            "Name header and try again.")
        return self.primary

    def _admit(self, model: ModelServer, ask: Ask, arrived_s: float, *, sagemaker: bool) -> _Call:
        deadline = arrived_s + INVOCATION_TIMEOUT_S * self.time_scale if sagemaker else None
        default_new_tokens = self.engine.default_max_new_tokens()
        if default_new_tokens is not None and ask.api == "generate" and ask.max_new_tokens is None:
            ask = replace(ask, max_new_tokens=default_new_tokens)
        return _Call(model, ask, arrived_s, deadline)

    def _chunks(self, call: _Call, *, as_list: bool = True) -> tuple[str, AsyncIterator[bytes]]:
        """The reply of the pinned server to an admitted request: content type and body pieces."""
        ask = call.ask
        model_id = call.model.deployment.model_id
        if ask.api != "generate":
            if ask.stream:
                return _SSE, _openai_sse(call, model_id)
            return _JSON, _whole(call, lambda n: formats.openai_completion(
                ask.api, _openai_id(ask.api), model_id, int(time.time()), n, ask.input_tokens, call.timings()))
        engine = self.engine
        if ask.stream:
            return engine.stream_content_type, _token_events(
                call, lambda i: engine.stream_token(i, formats.token(i)),
                lambda i: engine.stream_last(i, formats.token(i), formats.generated_text(i + 1),
                                             _details(call, i + 1)))

        def body(n: int) -> object:
            details = _details(call, n)
            tokens = [formats.token(i) for i in range(n)] if details is not None else []
            return engine.generate_body(formats.generated_text(n), details, tokens, invocations=as_list)

        return _JSON, _whole(call, body)

    # -- plain HTTP replies (TGI, LMI, OpenAI) ----------------------------------------------------------

    async def _reply(self, request: web.Request, call: _Call, content_type: str,
                     chunks: AsyncIterator[bytes]) -> web.StreamResponse:
        """Streams written as the tokens come (chunked); JSON in one piece with the timing headers."""
        try:
            if content_type == _JSON:
                body = b"".join([c async for c in chunks])
                self.served += 1
                return web.Response(body=body, content_type=_JSON,
                                    headers={**self._headers, **call.timing_headers()})
            resp = web.StreamResponse(headers={**self._headers, "Cache-Control": "no-cache"})
            resp.content_type = content_type
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            try:
                async for chunk in chunks:
                    await resp.write(chunk)
            except Cancelled:
                await resp.write(formats.sse({"error": _SHUTDOWN, "error_type": "cancelled"}))
            except ConnectionResetError:
                return resp  # the client went away; `close` frees its slot
            await resp.write_eof()
            self.served += 1
            return resp
        finally:
            call.close()

    async def _serve(self, request: web.Request, ask: Ask, model: ModelServer, *, as_list: bool = True
                     ) -> web.StreamResponse:
        """Admit and answer on a container route; a refused stream is TGI's HTTP 200 with an error event."""
        arrived = time.perf_counter()
        try:
            call = self._admit(model, ask, arrived, sagemaker=False)
        except RequestError as exc:
            if not ask.stream or ask.api != "generate":
                raise
            reply = self._stream_refusal(exc)
            return web.Response(body=reply.body, status=reply.status, content_type=reply.content_type,
                                headers=self._headers)
        return await self._reply(request, call, *self._chunks(call, as_list=as_list))

    async def _read(self, request: web.Request) -> bytes:
        raw = await request.read()
        self._check_payload(raw)
        return raw

    def _check_payload(self, raw: bytes) -> None:
        """RequestError 413 for a body over the pinned server's payload limit."""
        if self.payload_limit is not None and len(raw) > self.payload_limit:
            raise RequestError(413, "payload", self.engine.payload_too_large)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        ask = replace(formats.parse_tgi(await self._read(request)), stream=False)
        return await self._serve(request, ask, self._model_for(request), as_list=False)

    async def _generate_stream(self, request: web.Request) -> web.StreamResponse:
        ask = replace(formats.parse_tgi(await self._read(request)), stream=True)
        return await self._serve(request, ask, self._model_for(request))

    async def _invocations(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse(await self._read(request))
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse_openai(await request.read())
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse_chat(await request.read())
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _models_list(self, request: web.Request) -> web.Response:
        """vLLM's `/v1/models`: one card per served model."""
        created = int(time.time())
        data: list[dict[str, object]] = [{"id": m.deployment.model_id, "object": "model", "created": created, "owned_by": "vllm",
                 "root": m.deployment.model_id, "parent": None, "max_model_len": m.limits.max_total_tokens,
                 "permission": []} for m in self.models.values()]
        return web.json_response({"object": "list", "data": data}, headers=self._headers)

    # -- SageMaker runtime ----------------------------------------------------------------------------

    def _sm_headers(self, content_type: str) -> dict[str, str]:
        return {**self._headers, "x-Amzn-Invoked-Production-Variant": _VARIANT,
                "x-amzn-RequestId": str(uuid.uuid4()), "Content-Type": content_type}

    async def _sm_call(self, request: web.Request) -> _Call | _Reply | web.Response:
        """Route and admit a SageMaker invocation; or the container's whole reply (an error, a refused
        stream); or what SageMaker itself answers instead."""
        arrived = time.perf_counter()
        try:
            model = self._sm_model(request)
        except _AwsError as exc:
            return _aws_error(exc.status, exc.code, {"message": exc.message})
        raw = await request.read()
        if len(raw) > SAGEMAKER_MAX_PAYLOAD:
            return _too_large()
        try:
            self._check_payload(raw)
            ask = formats.parse(raw)
        except RequestError as exc:
            return self._container_error(exc)
        try:
            call = self._admit(model, ask, arrived, sagemaker=True)
        except RequestError as exc:
            return self._stream_refusal(exc) if ask.stream and ask.api == "generate" else self._container_error(exc)
        request[_CALL] = call  # for the CloudWatch publisher (`_counted`)
        return call

    async def _sm_invocations(self, request: web.Request) -> web.StreamResponse:
        with self._in_flight():
            return await self._sm_invocation(request)

    async def _sm_invocation(self, request: web.Request) -> web.StreamResponse:
        call = await self._sm_call(request)
        if isinstance(call, web.Response):
            return call
        if isinstance(call, _Reply):
            if call.status != 200:
                return _model_error(call)
            return web.Response(body=call.body, headers=self._sm_headers(call.content_type))
        content_type, chunks = self._chunks(call)
        try:
            body = b"".join([c async for c in chunks])
        except InvocationTimeout:
            return _timeout_error()
        except Cancelled:
            return _aws_error(500, "InternalFailure", {"message": _SHUTDOWN})
        finally:
            call.close()
        self.served += 1
        return web.Response(body=body, headers={**self._sm_headers(content_type), **call.timing_headers()})

    async def _sm_stream(self, request: web.Request) -> web.StreamResponse:
        with self._in_flight():
            return await self._sm_streamed(request)

    async def _sm_streamed(self, request: web.Request) -> web.StreamResponse:
        call = await self._sm_call(request)
        if isinstance(call, web.Response):
            return call
        if isinstance(call, _Reply):
            if call.status != 200:
                return _model_error(call)
            # The container answered 200 (a refused TGI stream): SageMaker passes its body on as a PayloadPart.
            resp = web.StreamResponse(headers={**self._sm_headers("application/vnd.amazon.eventstream"),
                                               "X-Amzn-SageMaker-Content-Type": call.content_type})
            await resp.prepare(request)
            await resp.write(eventstream.payload_part(call.body))
            await resp.write_eof()
            return resp
        content_type, chunks = self._chunks(call)
        resp = web.StreamResponse(headers={**self._sm_headers("application/vnd.amazon.eventstream"),
                                           "X-Amzn-SageMaker-Content-Type": content_type})
        resp.enable_chunked_encoding()
        try:
            # Headers go out with the first piece, so an invocation that times out before any token is
            # a plain ModelError, as on SageMaker; later, the error arrives inside the stream.
            async for chunk in chunks:
                if not resp.prepared:
                    await resp.prepare(request)
                await resp.write(eventstream.payload_part(chunk))
        except InvocationTimeout:
            if not resp.prepared:
                return _timeout_error()
            await resp.write(eventstream.exception_event("ModelStreamError", _STREAM_TIMEOUT_MESSAGE,
                                                         "ModelInvocationTimeExceeded"))
        except Cancelled:
            if not resp.prepared:
                return _aws_error(500, "InternalFailure", {"message": _SHUTDOWN})
            await resp.write(eventstream.exception_event("InternalStreamFailure", _SHUTDOWN))
        except ConnectionResetError:
            return resp
        else:
            self.served += 1
        finally:
            call.close()
        await resp.write_eof()
        return resp

    def _counted(self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """A SageMaker route that tells the publisher about every invocation it answers."""
        async def counted(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            resp = await handler(request)
            if self.publisher is not None:
                call: _Call | None = request.get(_CALL)
                model = next((n for n, m in self.models.items() if call is not None and m is call.model), None)
                self.publisher.invocation(model, request.headers.get(IC_HEADER), resp.status,
                                          call.e2e_s if call is not None else None, time.perf_counter() - started)
            return resp
        return counted

    async def _flush(self, request: web.Request) -> web.Response:
        """Put what the publisher holds into CloudWatch now (the bench calls it before reading a level)."""
        if self.publisher is None:
            return web.json_response({"error": "no CloudWatch to publish to"}, status=404)
        try:
            await self.publisher.flush()
        except Exception as exc:  # noqa: BLE001 - answered to the bench, which reports it
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=502)
        return web.json_response({"flushed": True, "clock": self.publisher.clock()}, headers=self._headers)

    # -- information ----------------------------------------------------------------------------------

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(headers=self._headers)

    async def _info(self, request: web.Request) -> web.Response:
        model = self._model_for(request)
        lim = model.limits
        info = {
            "model_id": model.deployment.model_id, "model_sha": None, "model_dtype": "torch.float16",
            "model_device_type": "cuda", "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": lim.max_concurrent_requests, "max_best_of": 2, "max_stop_sequences": 4,
            "max_input_tokens": lim.max_input_tokens, "max_total_tokens": lim.max_total_tokens,
            "max_batch_total_tokens": lim.max_batch_total_tokens,
            "max_batch_prefill_tokens": lim.max_batch_prefill_tokens, "max_batch_size": lim.max_batch_size,
            "waiting_served_ratio": 0.3, "max_waiting_tokens": 20, "validation_workers": 2,
            "router": "sagellm-emulator", "version": "emulated", "sha": None, "docker_label": None,
            # Anything measured against this server is emulated, at this time compression.
            "emulated": True,
            "time_scale": self.time_scale,
            "sagellm": {
                "endpoint_name": self.endpoint_name, "endpoint_kind": self.plan.endpoint_kind,
                "profile": self.plan.profile, "container": self.plan.container,
                "container_version": self.plan.container_version, "component_names": self.component_names,
                "instance_type": self.plan.instance_type,
                "initial_instance_count": self.plan.initial_instance_count,
                "models": [{"name": name, "model_id": m.deployment.model_id, "copies": len(m.copies),
                            "tp_degree": m.deployment.tp_degree, "quantization": m.deployment.quantization}
                           for name, m in self.models.items()],
            },
        }
        return web.json_response(info, headers=self._headers)

    async def _metrics(self, request: web.Request) -> web.Response:
        models = {name: m.stats() for name, m in self.models.items()}
        body = {
            "emulated": True, "time_scale": self.time_scale, "pid": os.getpid(),
            "loop_lag_s": self._lag.snapshot(), "requests_served": self.served,
            "running": sum(len(c.running) for m in self.models.values() for c in m.copies),
            "queued": sum(len(c.queue) for m in self.models.values() for c in m.copies),
            "models": models,
        }
        if request.query.get("reset") in ("1", "true"):
            self._lag.reset()
            for m in self.models.values():
                for c in m.copies:
                    c.max_behind_s = 0.0
        return web.json_response(body, headers=self._headers)


def _target_tracking(plan: DeploymentPlan, instance_startup_s: float | None) -> TargetTracking | None:
    """The simulated scaling loop of an instance-based plan with autoscaling (None otherwise).

    Inference components scale copies on concurrent requests per copy; that loop is not simulated."""
    scaling = plan.scaling
    if scaling is None or plan.endpoint_kind != "instance":
        return None
    policy = Policy.of(scaling) if instance_startup_s is None else Policy.of(scaling, instance_startup_s)
    return TargetTracking(policy, in_service=plan.initial_instance_count)


async def serve_forever(emulator: Emulator, host: str, port: int, on_ready: Callable[[str], None],
                        parent_pid: int | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or until `parent_pid` is gone, for a child process)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def watch_parent() -> None:
        while os.getppid() == parent_pid:
            await asyncio.sleep(1.0)
        stop.set()

    async with emulator.listening(host, port) as url:
        watcher = loop.create_task(watch_parent()) if parent_pid is not None else None
        on_ready(url)
        await stop.wait()
        if watcher is not None:
            watcher.cancel()


def run_emulator(plan: DeploymentPlan, *, host: str = "127.0.0.1", port: int = 8080, time_scale: float = 1.0,
                 endpoint_name: str | None = None) -> None:
    """Serve `plan` as a local endpoint in the foreground until Ctrl-C (the `sagellm emulate` command)."""
    emulator = Emulator(plan, time_scale=time_scale, endpoint_name=endpoint_name)

    def banner(url: str) -> None:
        models = ", ".join(f"{m.name} ({m.model_id}, {len(emulator.models[m.name].copies)} copies)"
                           for m in plan.models)
        print(f"sagellm emulator (EMULATED, time scale {time_scale:g}) on {url}: endpoint "
              f"{emulator.endpoint_name}, {plan.instance_type} × {plan.initial_instance_count}, "
              f"{models}. Ctrl-C to stop.", file=sys.stderr, flush=True)

    asyncio.run(serve_forever(emulator, host, port, banner))

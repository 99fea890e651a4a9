"""The emulator's HTTP server: SageMaker runtime, TGI and OpenAI-compatible routes over the simulated copies.

Routes
- SageMaker runtime: `POST /endpoints/{name}/invocations` and `…/invocations-response-stream`
  (AWS event-stream: each piece of the container's reply in a `PayloadPart`). The body is TGI's generate
  body, passed to the model as SageMaker passes it to the container's `/invocations`: `"stream": true`
  makes the reply TGI's SSE lines. `X-Amzn-SageMaker-Inference-Component` picks the model. Container
  errors come back as `ModelError` (HTTP 424, with `OriginalStatusCode`/`OriginalMessage`); after 60
  simulated seconds the invocation fails with a timeout (`ModelError`, or `ModelStreamError` with
  `ModelInvocationTimeExceeded` once the stream has started).
- TGI: `POST /generate`, `/generate_stream`, `/invocations`; `GET /info`, `/health`, `/ping`.
- OpenAI-compatible: `POST /v1/completions` (`stream: true` for SSE; `usage` on the last chunk).
- `GET /metrics`: the emulator's own event-loop lag and counters (`?reset=1` clears the lag figures).

Self-reported timings (from arrival to the first and to the last token on the engine's schedule, the
simulated clock, in wall seconds: divide by the time scale for simulated seconds; see `engine`):
`X-Sagellm-Server-Ttft-S` / `X-Sagellm-Server-E2e-S` headers on non-streamed replies;
`sagellm_server_ttft_s` / `sagellm_server_e2e_s` in the last stream event's `details` (TGI, when
`details` is asked for) or at the top of the last chunk (OpenAI). Every reply carries
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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from aiohttp import web

from sagellm.emulator import eventstream, formats
from sagellm.emulator.cloudwatch import Publisher
from sagellm.emulator.engine import (
    Cancelled,
    CopyEngine,
    InvocationTimeout,
    ModelServer,
    RequestError,
    Sequence,
)
from sagellm.emulator.formats import Ask
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


def _model_error(error: RequestError) -> web.Response:
    """What SageMaker answers when the container returned an error status."""
    original = json.dumps({"error": error.message, "error_type": error.error_type})
    return _aws_error(424, "ModelError", {
        "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
        "Message": f"Received client error ({error.status}) from primary with message \"{original}\".",
        "OriginalStatusCode": error.status, "OriginalMessage": original})


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


def _details(call: _Call, n_tokens: int) -> dict[str, object] | None:
    """TGI's `details` with the emulator's timings, when the request asked for details."""
    return formats.tgi_details(n_tokens, call.ask.input_tokens, call.timings()) if call.ask.details else None


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


def _tgi_sse(call: _Call) -> AsyncIterator[bytes]:
    """TGI's `/generate_stream` events."""
    return _token_events(call, formats.tgi_stream_token,
                         lambda i: formats.tgi_stream_last(i, _details(call, i + 1)))


async def _tgi_json(call: _Call, as_list: bool) -> AsyncIterator[bytes]:
    """TGI's `/generate` reply (`/invocations` wraps it in a list, as TGI does for SageMaker)."""
    n = await call.finish()
    body = formats.tgi_generate(n, _details(call, n))
    yield json.dumps([body] if as_list else body).encode()


def _tgi_reply(call: _Call, as_list: bool) -> tuple[str, AsyncIterator[bytes]]:
    return (_SSE, _tgi_sse(call)) if call.ask.stream else (_JSON, _tgi_json(call, as_list))


async def _openai_sse(call: _Call, model_id: str) -> AsyncIterator[bytes]:
    """OpenAI completion chunks, then `[DONE]`."""
    request_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    events = _token_events(
        call, lambda i: formats.openai_chunk(request_id, model_id, created, i),
        lambda i: formats.openai_chunk(request_id, model_id, created, i, last=True,
                                       input_tokens=call.ask.input_tokens, timings=call.timings()))
    async for event in events:
        yield event
    yield formats.OPENAI_DONE


async def _openai_json(call: _Call, model_id: str) -> AsyncIterator[bytes]:
    n = await call.finish()
    body = formats.openai_completion(f"cmpl-{uuid.uuid4().hex}", model_id, int(time.time()), n,
                                     call.ask.input_tokens, call.timings())
    yield json.dumps(body).encode()


@web.middleware
async def _tgi_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """Refusals as TGI sends them: `{"error": ..., "error_type": ...}` with the status."""
    try:
        return await handler(request)
    except RequestError as exc:
        return web.json_response({"error": exc.message, "error_type": exc.error_type}, status=exc.status)
    except Cancelled:
        return web.json_response({"error": _SHUTDOWN, "error_type": "cancelled"}, status=503)


class Emulator:
    """A local endpoint that behaves like `plan`: every model's copies, and the routes in front of them."""

    def __init__(self, plan: DeploymentPlan, *, time_scale: float = 1.0, endpoint_name: str | None = None,
                 cloudwatch_url: str | None = None):
        if not time_scale > 0:
            raise InputError(f"time_scale: {time_scale} must be > 0 (0.1 runs ten times faster)")
        self.plan = plan
        self.time_scale = time_scale
        self.endpoint_name = endpoint_name  # None: answer to any endpoint name
        self.models = {m.name: ModelServer(plan, m, time_scale) for m in plan.models}
        self.primary = self.models[plan.models[0].name]
        self.served = 0
        self._lag = _LoopLag()
        self._lag_task: asyncio.Task[None] | None = None
        self._headers = {"X-Sagellm-Emulated": "true", "X-Sagellm-Time-Scale": f"{time_scale:g}"}
        # With a (local) CloudWatch to publish to: the metrics SageMaker would publish (see `cloudwatch`).
        self.publisher: Publisher | None = None
        if cloudwatch_url is not None:
            self.publisher = Publisher(cloudwatch_url, plan.region, endpoint_name or "emulator", self.models,
                                       time_scale, plan.initial_instance_count,
                                       plan.endpoint_kind == "inference-component")
        self._publish_task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """The aiohttp application (engines start with `listening`)."""
        app = web.Application(middlewares=[_tgi_errors], client_max_size=16 * 2**20)
        app.router.add_post("/endpoints/{name}/invocations", self._counted(self._sm_invocations))
        app.router.add_post("/endpoints/{name}/invocations-response-stream", self._counted(self._sm_stream))
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/generate_stream", self._generate_stream)
        app.router.add_post("/invocations", self._invocations)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/info", self._info)
        app.router.add_get("/health", self._ok)
        app.router.add_get("/ping", self._ok)
        app.router.add_get("/metrics", self._metrics)
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
            if self.publisher is not None:
                self._publish_task = asyncio.get_running_loop().create_task(self.publisher.run())
            bound = sock.getsockname()[1]
            yield f"http://[{host}]:{bound}" if family == socket.AF_INET6 else f"http://{host}:{bound}"
        finally:
            if self._lag_task is not None:
                self._lag_task.cancel()
            if self._publish_task is not None:
                self._publish_task.cancel()
            for model in self.models.values():
                await model.stop()  # in-flight handlers end (Cancelled) before the connections close
            await runner.cleanup()
            sock.close()

    # -- routing ------------------------------------------------------------------------------------

    def _component(self, name: str) -> ModelServer | None:
        """The model an inference-component name designates: its plan name, or `<stack>-<name>`."""
        if name in self.models:
            return self.models[name]
        hits = [key for key in self.models if name.endswith(f"-{key}")]
        return self.models[max(hits, key=len)] if hits else None

    def _model_for(self, request: web.Request) -> ModelServer:
        """TGI and OpenAI routes: the component header if given, else the first model."""
        name = request.headers.get(IC_HEADER)
        if name is None:
            return self.primary
        model = self._component(name)
        if model is None:
            raise RequestError(400, "validation", f"unknown inference component {name!r}: "
                                                  f"known: {', '.join(self.models)}")
        return model

    def _sm_model(self, request: web.Request) -> ModelServer:
        """SageMaker routes: the endpoint name, then the inference-component header (SageMaker's order)."""
        name = request.match_info["name"]
        if self.endpoint_name is not None and name != self.endpoint_name:
            raise _AwsError(400, "ValidationError", f"Endpoint {name} of account {_ACCOUNT} not found.")
        component = request.headers.get(IC_HEADER)
        if self.plan.endpoint_kind == "inference-component":
            if component is None:
                raise _AwsError(400, "ValidationError",
                                "Inference Component Name header is required for endpoints to which you plan "
                                "to deploy inference components. Please include Inference Component Name "
                                "header or consider using SageMaker models.")
            model = self._component(component)
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
        return _Call(model, ask, arrived_s, deadline)

    # -- plain HTTP replies (TGI, OpenAI) -------------------------------------------------------------

    async def _reply(self, request: web.Request, call: _Call, content_type: str,
                     chunks: AsyncIterator[bytes]) -> web.StreamResponse:
        """SSE written as the tokens come (chunked); JSON in one piece with the timing headers."""
        try:
            if content_type != _SSE:
                body = b"".join([c async for c in chunks])
                self.served += 1
                return web.Response(body=body, content_type=_JSON,
                                    headers={**self._headers, **call.timing_headers()})
            resp = web.StreamResponse(headers={**self._headers, "Cache-Control": "no-cache"})
            resp.content_type = _SSE
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

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        ask = formats.parse_tgi(await request.read())
        call = self._admit(self._model_for(request), replace(ask, stream=False), arrived, sagemaker=False)
        return await self._reply(request, call, _JSON, _tgi_json(call, as_list=False))

    async def _generate_stream(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        ask = formats.parse_tgi(await request.read())
        call = self._admit(self._model_for(request), replace(ask, stream=True), arrived, sagemaker=False)
        return await self._reply(request, call, _SSE, _tgi_sse(call))

    async def _invocations(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        ask = formats.parse_tgi(await request.read())
        call = self._admit(self._model_for(request), ask, arrived, sagemaker=False)
        return await self._reply(request, call, *_tgi_reply(call, as_list=True))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        ask = formats.parse_openai(await request.read())
        model = self._model_for(request)
        call = self._admit(model, ask, arrived, sagemaker=False)
        model_id = model.deployment.model_id
        if ask.stream:
            return await self._reply(request, call, _SSE, _openai_sse(call, model_id))
        return await self._reply(request, call, _JSON, _openai_json(call, model_id))

    # -- SageMaker runtime ----------------------------------------------------------------------------

    def _sm_headers(self, content_type: str) -> dict[str, str]:
        return {**self._headers, "x-Amzn-Invoked-Production-Variant": _VARIANT,
                "x-amzn-RequestId": str(uuid.uuid4()), "Content-Type": content_type}

    async def _sm_call(self, request: web.Request) -> _Call | web.Response:
        """Route and admit a SageMaker invocation, or the error SageMaker would answer instead."""
        arrived = time.perf_counter()
        try:
            model = self._sm_model(request)
        except _AwsError as exc:
            return _aws_error(exc.status, exc.code, {"message": exc.message})
        raw = await request.read()
        try:
            call = self._admit(model, formats.parse_tgi(raw), arrived, sagemaker=True)
        except RequestError as exc:
            return _model_error(exc)
        request["sagellm_call"] = call
        return call

    async def _sm_invocations(self, request: web.Request) -> web.StreamResponse:
        call = await self._sm_call(request)
        if isinstance(call, web.Response):
            return call
        content_type, chunks = _tgi_reply(call, as_list=True)
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
        call = await self._sm_call(request)
        if isinstance(call, web.Response):
            return call
        content_type, chunks = _tgi_reply(call, as_list=True)
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
                call: _Call | None = request.get("sagellm_call")
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
              f"{endpoint_name or '(any name)'}, {plan.instance_type} × {plan.initial_instance_count}, "
              f"{models}. Ctrl-C to stop.", file=sys.stderr, flush=True)

    asyncio.run(serve_forever(emulator, host, port, banner))

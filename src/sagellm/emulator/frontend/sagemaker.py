"""The SageMaker runtime in front of the container: `POST /endpoints/{name}/invocations` and
`…/invocations-response-stream` (AWS event-stream), the endpoint name and inference-component header checks,
SageMaker's own refusals (413, `ValidationError`), container errors as `ModelError`, the 60 s invocation timeout,
and what each invocation tells the CloudWatch publisher (`POST /cloudwatch/flush` puts it into CloudWatch now)."""

from __future__ import annotations

import time
import uuid

from aiohttp import web

from sagellm.emulator.frontend import eventstream, formats
from sagellm.emulator.frontend.calls import Call, Reply, reply_chunks
from sagellm.emulator.frontend.cloudwatch import Publisher
from sagellm.emulator.frontend.container import IC_HEADER, SHUTDOWN, Handler
from sagellm.emulator.frontend.endpoint import EmulatedEndpoint
from sagellm.emulator.serving.copies import Cancelled, InvocationTimeout, ModelServer, RequestError

# InvokeEndpoint[WithResponseStream]: the request body may hold at most 6 MiB (API reference, Body).
SAGEMAKER_MAX_PAYLOAD = 6 * 1024 * 1024
_ACCOUNT = "000000000000"
_VARIANT = "AllTraffic"
_EVENT_STREAM = "application/vnd.amazon.eventstream"
_TIMEOUT_MESSAGE = ("Your invocation timed out while waiting for a response from container primary. "
                    "Review the latency metrics for each container in Amazon CloudWatch, resolve the issue, "
                    "and try again.")
_STREAM_TIMEOUT_MESSAGE = ("Your model failed to finish sending the response within the timeout period "
                           "allowed by Amazon SageMaker (60 s): the invocation timed out.")
# InvokeEndpoint on a component with no copy (scaled to zero): SageMaker's ValidationError (HTTP 400), quoted in
# the AWS ML blog "Unlock cost savings with the new scale down to zero feature in SageMaker Inference" (2024-12-03).
NO_CAPACITY_MESSAGE = ("Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
                       "in-progress (if configured) or try to increase the capacity by invoking "
                       "UpdateInferenceComponentRuntimeConfig API.")
# The admitted call of an invocation, for the CloudWatch publisher (`SageMakerRuntime._counted`).
_CALL = web.RequestKey("sagellm_call", Call)
_NO_CAPACITY = web.RequestKey("sagellm_no_capacity", bool)  # refused: no copy (NoCapacityInvocationFailures)


class _AwsError(Exception):
    """A SageMaker runtime error of its own (not the container's): status, error type, message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _aws_error(status: int, code: str, body: dict[str, object]) -> web.Response:
    headers = {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.sagemaker/",
               "x-amzn-RequestId": str(uuid.uuid4())}
    return web.json_response(body, status=status, headers=headers)


def _model_error(reply: Reply) -> web.Response:
    """What SageMaker answers when the container returned an error status."""
    original = reply.body.decode("utf-8", "replace").strip()
    side = "client" if reply.status < 500 else "server"
    return _aws_error(424, "ModelError", {
        "ErrorCode": f"{side.upper()}_ERROR_FROM_MODEL",
        "Message": f"Received {side} error ({reply.status}) from primary with message \"{original}\".",
        "OriginalStatusCode": reply.status, "OriginalMessage": original})


def _passed_on(reply: Reply) -> Reply | web.Response:
    """The container's reply as SageMaker passes it on: an error status as a ModelError, a 200 as it is."""
    return reply if reply.status == 200 else _model_error(reply)


def _too_large() -> web.Response:
    """SageMaker's own refusal of an oversized request body (no error type: boto3 reports `(413)`)."""
    return web.Response(status=413, text=f"HTTP content length exceeded {SAGEMAKER_MAX_PAYLOAD} bytes.",
                        headers={"x-amzn-RequestId": str(uuid.uuid4())})


def _timeout_error() -> web.Response:
    return _aws_error(424, "ModelError", {
        "ErrorCode": "INVOCATION_TIMEOUT",
        "Message": f"Received server error (0) from primary with message \"{_TIMEOUT_MESSAGE}\"."})


class SageMakerRuntime:
    """The SageMaker runtime's routes to `endpoint`; with a `publisher`, the metrics SageMaker would publish."""

    def __init__(self, endpoint: EmulatedEndpoint, publisher: Publisher | None):
        self.endpoint = endpoint
        self.publisher = publisher

    def add_to(self, router: web.UrlDispatcher) -> None:
        """Register the runtime's routes and the publisher's flush."""
        router.add_post("/endpoints/{name}/invocations", self._counted(self._invocations))
        router.add_post("/endpoints/{name}/invocations-response-stream", self._counted(self._stream))
        router.add_post("/cloudwatch/flush", self._flush)

    def _headers(self, content_type: str) -> dict[str, str]:
        return {**self.endpoint.headers, "x-Amzn-Invoked-Production-Variant": _VARIANT,
                "x-amzn-RequestId": str(uuid.uuid4()), "Content-Type": content_type}

    def _model(self, request: web.Request) -> ModelServer:
        """The endpoint name, then the inference-component header (SageMaker's order)."""
        e = self.endpoint
        name = request.match_info["name"]
        if name != e.endpoint_name and not e.any_endpoint:
            raise _AwsError(400, "ValidationError", f"Endpoint {name} of account {_ACCOUNT} not found.")
        component = request.headers.get(IC_HEADER)
        if e.plan.endpoint_kind == "inference-component":
            if component is None:
                raise _AwsError(400, "ValidationError",
                                "Inference Component Name header is required for endpoints to which you plan "
                                "to deploy inference components. Please include Inference Component Name "
                                "header or consider using SageMaker models.")
            model = e.by_component.get(component)
            if model is None:
                raise _AwsError(400, "ValidationError",
                                f"Inference Component {component} not found for endpoint {name} "
                                f"of account {_ACCOUNT}.")
            if e.no_capacity(model):
                raise _AwsError(400, "ValidationError", NO_CAPACITY_MESSAGE)
            return model
        if component is not None:
            raise _AwsError(400, "ValidationError",
                            "Inference Component Name header is not allowed for endpoints to which you do "
                            "not plan to deploy inference components. Please remove the Inference Component "
                            "Name header and try again.")
        return e.primary

    async def _call(self, request: web.Request) -> Call | Reply | web.Response:
        """Route and admit an invocation; or the container's whole 200 reply (a refused stream); or what
        SageMaker itself answers instead (its own errors, a container error as a ModelError)."""
        arrived = time.perf_counter()
        try:
            model = self._model(request)
        except _AwsError as exc:
            request[_NO_CAPACITY] = exc.message == NO_CAPACITY_MESSAGE
            return _aws_error(exc.status, exc.code, {"message": exc.message})
        raw = await request.read()
        if len(raw) > SAGEMAKER_MAX_PAYLOAD:
            return _too_large()
        try:
            self.endpoint.check_payload(raw)
            ask = formats.parse(raw, self.endpoint.engine.invocations)
        except RequestError as exc:
            return _passed_on(self.endpoint.container_error(exc))
        try:
            call = self.endpoint.admit(model, ask, arrived, sagemaker=True, body=raw)
        except RequestError as exc:
            refused = ask.stream and ask.api == "generate"
            return _passed_on(self.endpoint.stream_refusal(exc) if refused else self.endpoint.container_error(exc))
        request[_CALL] = call  # for the CloudWatch publisher (`_counted`)
        return call

    async def _invocations(self, request: web.Request) -> web.StreamResponse:
        with self.endpoint.in_flight(request.headers.get(IC_HEADER)):
            return await self._invocation(request)

    async def _invocation(self, request: web.Request) -> web.StreamResponse:
        call = await self._call(request)
        if isinstance(call, web.Response):
            return call
        if isinstance(call, Reply):
            return web.Response(body=call.body, headers=self._headers(call.content_type))
        content_type, chunks = reply_chunks(call, self.endpoint.engine)
        try:
            body = b"".join([c async for c in chunks])
        except InvocationTimeout:
            return _timeout_error()
        except Cancelled:
            return _aws_error(500, "InternalFailure", {"message": SHUTDOWN})
        finally:
            call.close()
        self.endpoint.served += 1
        return web.Response(body=body, headers={**self._headers(content_type), **call.timing_headers()})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        with self.endpoint.in_flight(request.headers.get(IC_HEADER)):
            return await self._streamed(request)

    async def _streamed(self, request: web.Request) -> web.StreamResponse:
        call = await self._call(request)
        if isinstance(call, web.Response):
            return call
        if isinstance(call, Reply):
            # The container answered 200 (a refused TGI stream): SageMaker passes its body on as a PayloadPart.
            resp = web.StreamResponse(headers={**self._headers(_EVENT_STREAM),
                                               "X-Amzn-SageMaker-Content-Type": call.content_type})
            await resp.prepare(request)
            await resp.write(eventstream.payload_part(call.body))
            await resp.write_eof()
            return resp
        content_type, chunks = reply_chunks(call, self.endpoint.engine)
        resp = web.StreamResponse(headers={**self._headers(_EVENT_STREAM), **call.arrival_header(),
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
                return _aws_error(500, "InternalFailure", {"message": SHUTDOWN})
            await resp.write(eventstream.exception_event("InternalStreamFailure", SHUTDOWN))
        except ConnectionResetError:
            return resp
        else:
            self.endpoint.served += 1
        finally:
            call.close()
        await resp.write_eof()
        return resp

    # -- CloudWatch -----------------------------------------------------------------------------------

    def _counted(self, handler: Handler) -> Handler:
        """A route that tells the publisher about every invocation it answers."""
        async def counted(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            resp = await handler(request)
            if self.publisher is not None:
                call: Call | None = request.get(_CALL)
                model = next((n for n, m in self.endpoint.models.items() if call is not None and m is call.model),
                             None)
                self.publisher.invocation(model, request.headers.get(IC_HEADER), resp.status,
                                          call.e2e_s if call is not None else None, time.perf_counter() - started,
                                          no_capacity=request.get(_NO_CAPACITY, False))
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
        return web.json_response({"flushed": True, "clock": self.publisher.clock_info()}, headers=self.endpoint.headers)

"""The container's own routes, as the pinned server answers them: TGI/LMI (`/generate`, `/generate_stream`,
`/invocations`, `/info`, `/health`, `/ping`; vLLM and SGLang take only OpenAI bodies on `/invocations`) and
OpenAI-compatible (`/v1/completions`, `/v1/chat/completions`, `/v1/models`), with refusals in the shape of the API
that was called."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from aiohttp import web

from sagellm.emulator.frontend import formats
from sagellm.emulator.frontend.calls import JSON, Call, reply_chunks
from sagellm.emulator.frontend.endpoint import EmulatedEndpoint
from sagellm.emulator.frontend.formats import Ask
from sagellm.emulator.serving.copies import Cancelled, ModelServer, RequestError

IC_HEADER = "X-Amzn-SageMaker-Inference-Component"
SHUTDOWN = "the emulator is shutting down"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ContainerRoutes:
    """The routes of the pinned server in front of `endpoint`'s models."""

    def __init__(self, endpoint: EmulatedEndpoint):
        self.endpoint = endpoint

    def add_to(self, router: web.UrlDispatcher) -> None:
        """Register the container's routes."""
        router.add_post("/generate", self._generate)
        router.add_post("/generate_stream", self._generate_stream)
        router.add_post("/invocations", self._invocations)
        router.add_post("/v1/completions", self._completions)
        router.add_post("/v1/chat/completions", self._chat)
        router.add_get("/v1/models", self._models_list)
        router.add_get("/info", self._info)
        router.add_get("/health", self._ok)
        router.add_get("/ping", self._ok)

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refusals in the shape of the API that was called."""
        openai = request.path.startswith("/v1/")
        try:
            return await handler(request)
        except RequestError as exc:
            if openai:
                status = {422: 400}.get(exc.status, exc.status)
                return web.json_response(formats.openai_error(status, exc.message), status=status,
                                         headers=self.endpoint.headers)
            reply = self.endpoint.container_error(exc)
            return web.Response(body=reply.body, status=reply.status, content_type=reply.content_type,
                                headers=self.endpoint.headers)
        except Cancelled:
            if openai:
                return web.json_response(formats.openai_error(503, SHUTDOWN), status=503)
            return web.json_response({"error": SHUTDOWN, "error_type": "cancelled"}, status=503)

    # -- generation -----------------------------------------------------------------------------------

    def _model_for(self, request: web.Request, model_field: str | None = None) -> ModelServer:
        return self.endpoint.model_for(request.headers.get(IC_HEADER), model_field)

    async def _read(self, request: web.Request) -> bytes:
        raw = await request.read()
        self.endpoint.check_payload(raw)
        return raw

    def _has_generate(self) -> None:
        """vLLM's and SGLang's servers have no TGI generate route: FastAPI's 404."""
        if "generate" not in self.endpoint.engine.invocations:
            raise web.HTTPNotFound(text='{"detail":"Not Found"}', content_type="application/json")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        self._has_generate()
        ask = replace(formats.parse_tgi(await self._read(request)), stream=False)
        return await self._serve(request, ask, self._model_for(request), as_list=False)

    async def _generate_stream(self, request: web.Request) -> web.StreamResponse:
        self._has_generate()
        ask = replace(formats.parse_tgi(await self._read(request)), stream=True)
        return await self._serve(request, ask, self._model_for(request))

    async def _invocations(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse(await self._read(request), self.endpoint.engine.invocations)
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse_openai(await request.read())
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        ask = formats.parse_chat(await request.read())
        return await self._serve(request, ask, self._model_for(request, ask.model))

    async def _serve(self, request: web.Request, ask: Ask, model: ModelServer, *, as_list: bool = True
                     ) -> web.StreamResponse:
        """Admit and answer on a container route; a refused stream is TGI's HTTP 200 with an error event."""
        arrived = time.perf_counter()
        try:
            call = self.endpoint.admit(model, ask, arrived, sagemaker=False)
        except RequestError as exc:
            if not ask.stream or ask.api != "generate":
                raise
            reply = self.endpoint.stream_refusal(exc)
            return web.Response(body=reply.body, status=reply.status, content_type=reply.content_type,
                                headers=self.endpoint.headers)
        return await self._reply(request, call, *reply_chunks(call, self.endpoint.engine, as_list=as_list))

    async def _reply(self, request: web.Request, call: Call, content_type: str,
                     chunks: AsyncIterator[bytes]) -> web.StreamResponse:
        """Streams written as the tokens come (chunked); JSON in one piece with the timing headers."""
        try:
            if content_type == JSON:
                body = b"".join([c async for c in chunks])
                self.endpoint.served += 1
                return web.Response(body=body, content_type=JSON,
                                    headers={**self.endpoint.headers, **call.timing_headers()})
            resp = web.StreamResponse(headers={**self.endpoint.headers, **call.arrival_header(),
                                               "Cache-Control": "no-cache"})
            resp.content_type = content_type
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            try:
                async for chunk in chunks:
                    await resp.write(chunk)
            except Cancelled:
                await resp.write(formats.sse({"error": SHUTDOWN, "error_type": "cancelled"}))
            except ConnectionResetError:
                return resp  # the client went away; `close` frees its slot
            await resp.write_eof()
            self.endpoint.served += 1
            return resp
        finally:
            call.close()

    # -- information ----------------------------------------------------------------------------------

    async def _models_list(self, request: web.Request) -> web.Response:
        """vLLM's `/v1/models`: one card per served model."""
        created = int(time.time())
        data: list[dict[str, object]] = [{"id": m.deployment.model_id, "object": "model", "created": created, "owned_by": "vllm",
                 "root": m.deployment.model_id, "parent": None, "max_model_len": m.limits.max_total_tokens,
                 "permission": []} for m in self.endpoint.models.values()]
        return web.json_response({"object": "list", "data": data}, headers=self.endpoint.headers)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(headers=self.endpoint.headers)

    async def _info(self, request: web.Request) -> web.Response:
        e = self.endpoint
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
            "time_scale": e.clock.scale,
            "sagellm": {
                "endpoint_name": e.endpoint_name, "endpoint_kind": e.plan.endpoint_kind,
                "profile": e.plan.profile, "container": e.plan.container,
                "container_version": e.plan.container_version, "component_names": e.component_names,
                "instance_type": e.plan.instance_type,
                "initial_instance_count": e.plan.initial_instance_count,
                "models": [{"name": name, "model_id": m.deployment.model_id, "copies": len(m.copies),
                            "tensor_parallel": m.deployment.tensor_parallel, "quantization": m.deployment.quantization}
                           for name, m in e.models.items()],
            },
        }
        return web.json_response(info, headers=e.headers)

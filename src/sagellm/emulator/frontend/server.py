"""The emulator's HTTP server: SageMaker runtime, TGI/LMI and OpenAI-compatible routes over the simulated copies.

The server wires the parts and runs them: `endpoint` (the plan's models, admission, the simulated scaling),
`container` (the pinned server's routes), `sagemaker` (the runtime in front of it), `metrics` (what the emulator
says about itself), and `calls` (an admitted request and its reply, token by token).

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

Self-reported timings (from arrival at the emulator, before the engine's front-end latency, to the first and to
the last token on the engine's schedule), in one
clock: wall seconds, like the client's own timings; divide by the time scale for simulated seconds (the bench
reads the scale from `/info` on every target and converts; see `copies`):
`X-Sagellm-Server-Ttft-S` / `X-Sagellm-Server-E2e-S` headers on non-streamed replies;
`sagellm_server_ttft_s` / `sagellm_server_e2e_s` in the last stream event's `details` (TGI and LMI,
when `details` is asked for) or at the top of the last token chunk (OpenAI). Every reply carries
`X-Sagellm-Emulated: true` and `X-Sagellm-Time-Scale`; every admitted one `X-Sagellm-Server-Arrived-S`, when the
request arrived (seconds since the emulator began serving, on the copy's clock: the arrivals a prediction replays;
its engine saw each its front-end latency later, as `plan`'s simulation has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from sagellm.clock import REAL, Clock
from sagellm.emulator.frontend.cloudwatch import Publisher
from sagellm.emulator.frontend.container import ContainerRoutes
from sagellm.emulator.frontend.endpoint import EmulatedEndpoint
from sagellm.emulator.frontend.metrics import MetricsRoutes
from sagellm.emulator.frontend.sagemaker import SageMakerRuntime
from sagellm.errors import TargetError
from sagellm.profiles.plan import DeploymentPlan


class Emulator(EmulatedEndpoint):
    """A local endpoint that behaves like `plan`, served over HTTP: every model's copies and the routes in front
    of them (the arguments are `EmulatedEndpoint`'s); with `cloudwatch_url` (the local AWS) it publishes the metrics
    SageMaker would publish."""

    def __init__(self, plan: DeploymentPlan, *, clock: Clock = REAL, endpoint_name: str | None = None,
                 component_names: dict[str, str] | None = None, instance_startup_s: float | None = None,
                 cloudwatch_url: str | None = None):
        super().__init__(plan, clock=clock, endpoint_name=endpoint_name, component_names=component_names,
                         instance_startup_s=instance_startup_s)
        # With a (local) CloudWatch to publish to: the metrics SageMaker would publish (see `cloudwatch`).
        self.publisher: Publisher | None = None
        if cloudwatch_url is not None:
            self.publisher = Publisher(cloudwatch_url, plan.region, self.endpoint_name, self.models,
                                       clock, plan.initial_instance_count,
                                       plan.endpoint_kind == "inference-component")
        self._sagemaker = SageMakerRuntime(self, self.publisher)
        self._container = ContainerRoutes(self)
        self._metrics = MetricsRoutes(self)

    def app(self) -> web.Application:
        """The aiohttp application (engines start with `listening`)."""
        # A refusal a route raises is answered in the shape of the API that was called.
        app = web.Application(middlewares=[self._container.errors], client_max_size=16 * 2**20)
        self._sagemaker.add_to(app.router)
        self._container.add_to(app.router)
        self._metrics.add_to(app.router)
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
        tasks: list[asyncio.Task[None]] = []
        try:
            await web.SockSite(runner, sock, backlog=1024).start()
            for model in self.models.values():
                model.start()
            loop = asyncio.get_running_loop()
            tasks.append(loop.create_task(self._metrics.lag.run()))
            self.start_clock()
            if self.autoscaling is not None:
                tasks.append(loop.create_task(self.scale()))
            if self.publisher is not None:
                tasks.append(loop.create_task(self.publisher.run()))
            bound = sock.getsockname()[1]
            yield f"http://[{host}]:{bound}" if family == socket.AF_INET6 else f"http://{host}:{bound}"
        finally:
            for task in tasks:
                task.cancel()
            for model in self.models.values():
                await model.stop()  # in-flight handlers end (Cancelled) before the connections close
            await runner.cleanup()
            sock.close()


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


def run_emulator(plan: DeploymentPlan, *, host: str = "127.0.0.1", port: int = 8080, clock: Clock = REAL,
                 endpoint_name: str | None = None) -> None:
    """Serve `plan` as a local endpoint in the foreground until Ctrl-C (the `sagellm emulate` command)."""
    emulator = Emulator(plan, clock=clock, endpoint_name=endpoint_name)

    def banner(url: str) -> None:
        models = ", ".join(f"{m.name} ({m.model_id}, {len(emulator.models[m.name].copies)} copies)"
                           for m in plan.models)
        print(f"sagellm emulator (EMULATED, time scale {clock.scale:g}) on {url}: endpoint "
              f"{emulator.endpoint_name}, {plan.instance_type} × {plan.initial_instance_count}, "
              f"{models}. Ctrl-C to stop.", file=sys.stderr, flush=True)

    asyncio.run(serve_forever(emulator, host, port, banner))

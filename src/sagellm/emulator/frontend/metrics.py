"""What the emulator says about itself: `GET /metrics` (its event-loop lag, counters and per-model figures;
`?reset=1` clears the lag figures) and `GET /autoscaling` (the simulated target tracking: policy, simulated clock
now, desired and in-service instances, events and metric datapoints)."""

from __future__ import annotations

import os

from aiohttp import web

from sagellm.emulator.frontend.endpoint import EmulatedEndpoint
from sagellm.emulator.frontend.loop_lag import LoopLag


class MetricsRoutes:
    """`/metrics` and `/autoscaling` of `endpoint`; `lag` samples the event loop while serving."""

    def __init__(self, endpoint: EmulatedEndpoint):
        self.endpoint = endpoint
        self.lag = LoopLag()

    def add_to(self, router: web.UrlDispatcher) -> None:
        """Register the routes."""
        router.add_get("/metrics", self._metrics)
        router.add_get("/autoscaling", self._autoscaling)

    async def _metrics(self, request: web.Request) -> web.Response:
        e = self.endpoint
        models = {name: m.stats() for name, m in e.models.items()}
        body = {
            "emulated": True, "time_scale": e.clock.scale, "pid": os.getpid(),
            "loop_lag_s": self.lag.snapshot(), "requests_served": e.served,
            "running": sum(len(c.running) for m in e.models.values() for c in m.copies),
            "queued": sum(len(c.queue) for m in e.models.values() for c in m.copies),
            "models": models,
        }
        if request.query.get("reset") in ("1", "true"):
            self.lag.reset()
            for m in e.models.values():
                for c in m.copies:
                    c.max_behind_s = 0.0
        return web.json_response(body, headers=e.headers)

    async def _autoscaling(self, request: web.Request) -> web.Response:
        e = self.endpoint
        if e.autoscaling is None:
            body: dict[str, object] = {"simulated": False, "now_s": e.simulated_now_s(),
                                       "why": "the plan has no autoscaling"}
        else:
            e.apply_scaling()
            body = {"simulated": True, **e.autoscaling.to_dict()}
        return web.json_response(body, headers=e.headers)

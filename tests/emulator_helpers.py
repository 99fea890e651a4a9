"""Helpers of the emulator tests: hand-built plans, an in-process emulator per scenario, SSE parsing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from sagellm.clock import Clock
from sagellm.emulator import Emulator, make_prompt
from sagellm.planner import StepModel
from sagellm.profiles.plan import DeploymentPlan, ModelDeployment, served_shape

LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


TOKEN_CAPS = {"MAX_INPUT_TOKENS": "2048", "MAX_TOTAL_TOKENS": "4096"}


def model(name: str = "llama2-7b", env: dict[str, str] | None = None, *, model_id: str = LLAMA2_7B,
          tp: int = 1, copies: int = 1) -> ModelDeployment:
    """A model deployment: TGI token caps 2048/4096, plus `env`."""
    return ModelDeployment(name=name, model_id=model_id, image_uri="tgi:emulated", tensor_parallel=tp,
                           environment={**TOKEN_CAPS, **(env or {})}, copy_count=copies)


def plan(*models: ModelDeployment, instance: str = "ml.g5.2xlarge", kind: str = "instance",
         container: str = "tgi", instances: int = 1, version: str | None = None) -> DeploymentPlan:
    """A hand-built plan (one 7B model on ml.g5.2xlarge unless told otherwise; sagellm's pinned version)."""
    return DeploymentPlan.model_validate({
        "profile": "test", "region": "us-east-1", "container": container, "container_version": version,
        "instance_type": instance,
        "initial_instance_count": instances, "endpoint_kind": kind, "models": models or (model(),),
        "startup_health_check_timeout_s": 600, "model_data_download_timeout_s": 600,
        "input_tokens": 256, "output_tokens": 256, "tags": {}})


def steps_of(p: DeploymentPlan) -> StepModel:
    """The step model the emulator uses for the plan's first model."""
    shape, _, _ = served_shape(p, p.models[0])
    return StepModel(shape)


Events = list[tuple[float, Any]]
Scenario = Callable[[aiohttp.ClientSession, str, Emulator], Awaitable[Any]]


def run(p: DeploymentPlan, scenario: Scenario, *, time_scale: float = 0.1, endpoint_name: str | None = None) -> Any:
    """Serve `p` on a free loopback port for the length of `scenario`, then stop everything."""
    async def main() -> Any:
        emulator = Emulator(p, clock=Clock(time_scale), endpoint_name=endpoint_name)
        async with emulator.listening() as url, aiohttp.ClientSession() as session:
            return await scenario(session, url, emulator)
    return asyncio.run(main())


def tgi_body(n_in: int, n_out: int, **extra: Any) -> dict[str, Any]:
    return {"inputs": make_prompt(n_in), "parameters": {"max_new_tokens": n_out, "details": True}, **extra}


async def sse_events(resp: aiohttp.ClientResponse) -> list[tuple[float, Any]]:
    """Parse server-sent events by hand: (arrival time, JSON payload or the raw text) per `data:` line."""
    out: list[tuple[float, Any]] = []
    rest = b""
    async for chunk in resp.content.iter_any():
        now = time.perf_counter()
        rest += chunk
        *events, rest = rest.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    data = line[5:].strip()
                    out.append((now, data.decode() if data == b"[DONE]" else json.loads(data)))
    assert rest == b""
    return out

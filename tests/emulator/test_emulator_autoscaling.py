"""The emulator's simulated target tracking: SageMaker invocations in flight drive it, new capacity joins the
pool."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from sagellm.clock import Clock
from sagellm.emulator import Emulator, make_prompt
from sagellm.profiles.plan import DeploymentPlan

TIME_SCALE = 0.01  # a simulated minute is 0.6 s
SCALING = {"min_capacity": 1, "max_capacity": 2, "target_value": 1.0, "scale_out_cooldown_s": 60,
           "scale_in_cooldown_s": 300}


def scaling_plan(kind: str = "instance", scaling: dict[str, Any] | None = SCALING) -> DeploymentPlan:
    """Llama 2 7B on one ml.g5.2xlarge that may become two, on a target of one request in flight per
    instance."""
    model = {"name": "llama2-7b", "model_id": "meta-llama/Llama-2-7b-hf", "image_uri": "tgi:emulated",
             "tensor_parallel": 1, "environment": {"MAX_INPUT_TOKENS": "2048", "MAX_TOTAL_TOKENS": "4096"}}
    return DeploymentPlan.model_validate({
        "profile": "test", "region": "us-east-1", "container": "tgi", "instance_type": "ml.g5.2xlarge",
        "initial_instance_count": 1, "endpoint_kind": kind, "models": [model], "scaling": scaling,
        "startup_health_check_timeout_s": 600, "model_data_download_timeout_s": 600,
        "input_tokens": 256, "output_tokens": 256, "tags": {}})


def serve(p: DeploymentPlan, scenario: Any, **kw: Any) -> Any:
    """Serve `p` on a free loopback port for the length of `scenario(session, url, emulator)`."""
    async def main() -> Any:
        emulator = Emulator(p, clock=Clock(TIME_SCALE), endpoint_name="ep", **kw)  # the name invoked below
        async with emulator.listening() as url, aiohttp.ClientSession() as session:
            return await scenario(session, url, emulator)
    return asyncio.run(main())


async def state(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/autoscaling") as resp:
        assert resp.status == 200
        return dict(await resp.json())


async def keep_in_flight(session: aiohttp.ClientSession, url: str, streams: int, simulated_s: float) -> None:
    """`streams` invocations in flight back to back for `simulated_s` simulated seconds."""
    body = {"inputs": make_prompt(16), "parameters": {"max_new_tokens": 64}}
    loop = asyncio.get_running_loop()
    end = loop.time() + simulated_s * TIME_SCALE

    async def one_stream() -> None:
        while loop.time() < end:
            async with session.post(f"{url}/endpoints/ep/invocations", json=body) as resp:
                assert resp.status == 200
                await resp.read()

    await asyncio.gather(*(one_stream() for _ in range(streams)))


@pytest.mark.slow
def test_requests_in_flight_above_the_target_scale_out_and_a_second_instance_joins_the_pool() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        before = await state(session, url)
        await keep_in_flight(session, url, streams=4, simulated_s=240.0)  # 4 in flight, the target is 1
        after = await state(session, url)
        copies = len(emulator.primary.copies)
        served = [c.completed for c in emulator.primary.copies]
        return before, after, copies, served

    before, after, copies, served = serve(scaling_plan(), scenario, instance_startup_s=30.0)
    assert before["simulated"] and (before["desired"], before["in_service"]) == (1, 1)
    policy = before["policy"]
    assert policy["metric"] == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    assert (policy["target"], policy["period_s"], policy["instance_startup_s"]) == (1.0, 10, 30.0)
    kinds = [e["kind"] for e in after["events"]]
    assert kinds[:4] == ["breach", "alarm-high", "scale-out", "in-service"]
    assert after["events"][0]["detail"].startswith("SageMakerVariantConcurrentRequestsPerModelHighResolution")
    out, joined = after["events"][2], after["events"][3]
    assert joined["t_s"] - out["t_s"] == 30.0  # the start-up delay, on the simulated clock
    assert (after["desired"], after["in_service"]) == (2, 2)
    assert max(d["value"] for d in after["datapoints"][:3]) > 1
    assert copies == 2
    assert served[1] > 0  # the new instance's copy took requests


@pytest.mark.slow
def test_two_in_flight_per_instance_under_the_target_never_scale() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        await keep_in_flight(session, url, streams=2, simulated_s=180.0)
        return await state(session, url)

    calm = {**SCALING, "target_value": 32.0}
    after = serve(scaling_plan(scaling=calm), scenario, instance_startup_s=30.0)
    assert after["datapoints"] and max(d["value"] for d in after["datapoints"]) <= 2
    assert [e["kind"] for e in after["events"]] == [] and after["desired"] == 1


def test_a_plan_without_autoscaling_is_not_simulated_and_components_scale_their_copies() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        return await state(session, url)

    reply = serve(scaling_plan(scaling=None), scenario)
    assert reply["simulated"] is False and "why" in reply
    reply = serve(scaling_plan(kind="inference-component"), scenario)
    assert reply["simulated"] is True
    assert reply["policy"]["metric"] == "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
    assert (reply["in_service"], reply["instances"]) == (1, 1)  # copies, and the instance they run on


@pytest.mark.slow
def test_a_component_scaled_to_zero_refuses_with_no_capacity_then_its_alarm_starts_a_copy() -> None:
    from sagellm.emulator.frontend.container import IC_HEADER
    from sagellm.emulator.frontend.sagemaker import NO_CAPACITY_MESSAGE

    data = scaling_plan("inference-component", {**SCALING, "min_capacity": 0, "scale_in_cooldown_s": 0}).model_dump()
    data["models"][0]["compute"] = {"accelerators": 1, "cpu_cores": 2, "min_memory_mib": 1024}
    p = DeploymentPlan.model_validate(data)
    body = {"inputs": make_prompt(16), "parameters": {"max_new_tokens": 4}}
    headers = {IC_HEADER: p.models[0].name}

    async def invoke(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
        async with session.post(f"{url}/endpoints/ep/invocations", json=body, headers=headers) as resp:
            return resp.status, (await resp.json(content_type=None)), resp.headers.get("x-amzn-ErrorType", "")

    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        await asyncio.sleep(1020 * TIME_SCALE)  # idle: 15 low one-minute datapoints, the metric delay: zero copies
        at_zero = len(emulator.primary.copies)
        refused = await invoke(session, url)
        await asyncio.sleep(100 * TIME_SCALE)  # the alarm (≤ 60 s), then 30 s to start the copy and instance
        served = await invoke(session, url)
        return at_zero, refused, served, await state(session, url)

    at_zero, refused, served, after = serve(p, scenario, instance_startup_s=30.0)
    assert at_zero == 0
    status, reply, error_type = refused
    assert (status, reply, error_type.split(":")[0]) == (400, {"message": NO_CAPACITY_MESSAGE}, "ValidationError")
    assert served[0] == 200
    kinds = [e["kind"] for e in after["events"]]
    assert kinds == ["alarm-low", "scale-in", "alarm-no-capacity", "scale-out", "in-service"]
    assert (after["in_service"], after["instances"], after["no_capacity_failures"]) == (1, 1, 1)


@pytest.mark.slow
def test_each_component_scales_its_own_copies_on_the_requests_it_holds() -> None:
    from sagellm.emulator.frontend.container import IC_HEADER

    data = scaling_plan("inference-component").model_dump()
    first = {**data["models"][0], "compute": {"accelerators": 1, "cpu_cores": 2, "min_memory_mib": 1024}}
    data["models"] = [first, {**first, "name": "second"}]
    data["instance_type"] = "ml.g5.12xlarge"  # four GPUs: room for both components and a third copy
    p = DeploymentPlan.model_validate(data)
    body = {"inputs": make_prompt(16), "parameters": {"max_new_tokens": 64}}

    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        loop = asyncio.get_running_loop()
        end = loop.time() + 240.0 * TIME_SCALE

        async def one_stream() -> None:
            while loop.time() < end:
                async with session.post(f"{url}/endpoints/ep/invocations", json=body,
                                        headers={IC_HEADER: "second"}) as resp:
                    assert resp.status == 200
                    await resp.read()

        await asyncio.gather(*(one_stream() for _ in range(4)))  # 4 in flight at the second, the target is 1
        return await state(session, url), {name: len(m.copies) for name, m in emulator.models.items()}

    after, copies = serve(p, scenario, instance_startup_s=30.0)
    second, primary = after["components"]["second"], after["components"]["llama2-7b"]
    assert [e["kind"] for e in second["events"]][:3] == ["breach", "alarm-high", "scale-out"]
    assert (second["desired"], primary["desired"]) == (2, 1)
    assert [e["kind"] for e in primary["events"]] == []
    assert copies == {"llama2-7b": 1, "second": 2}
    assert after["fleet"]["instances"] == 1  # three one-GPU copies on one four-GPU instance

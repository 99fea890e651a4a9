"""The emulator's copies behind the engine's front end: a request reaches its copy's scheduler the engine's
`request_latency_s` after it reached the emulator, as `plan`'s simulation has it (vLLM's constants: 13.2 ms;
TGI's: none), and no pass waits for it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from emulator_helpers import model, plan, run, steps_of, tgi_body
from sagellm.clock import Clock
from sagellm.emulator import Emulator, make_prompt
from sagellm.emulator.serving.copies import ModelServer
from sagellm.planner.constants import MEASURED
from sagellm.planner.simulate import SimulatedClosedLoop, simulate
from sagellm.planner.traces import SimulatedTrace
from sagellm.profiles.plan import DeploymentPlan, served

SCALE = 0.1


def engine_plan(container: str) -> DeploymentPlan:
    """One 7B model on ml.g5.2xlarge under `container`'s defaults (TGI with the helpers' token caps)."""
    return plan() if container == "tgi" else plan(model(env={}), container=container)


def without_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's step constants with no front-end latency: every pass as before, nothing outside them."""
    constants, source = MEASURED["vllm"]
    monkeypatch.setitem(MEASURED, "vllm", (replace(constants, request_latency_s=0.0), source))


def test_a_request_reaches_a_vllm_copy_the_front_ends_latency_after_the_emulator_and_a_tgi_copy_at_once() -> None:
    vllm, tgi = engine_plan("vllm"), engine_plan("tgi")
    latency = steps_of(vllm).k.request_latency_s
    assert latency > 0 and steps_of(tgi).k.request_latency_s == 0
    for p, wall_s in ((vllm, latency * SCALE), (tgi, 0.0)):
        server = ModelServer(p, p.models[0], Clock(SCALE))
        assert server.front_end_s == pytest.approx(wall_s)
        _, seq = server.submit(64, 8, 7.5, 2.0)
        # On the copy's clock (the emulator's wall seconds): its deadline still runs from the HTTP arrival.
        assert (seq.arrived_s, seq.deadline_s) == (2.0 + wall_s, 7.5)


def _first_request(p: DeploymentPlan, n_in: int, n_out: int) -> tuple[float, float, float]:
    """One request to an idle emulator: its arrival stamp, TTFT and e2e (simulated seconds, from its headers)."""
    container = p.container

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[float, float, float]:
        path, body = (("/generate", tgi_body(n_in, n_out)) if container == "tgi" else
                      ("/v1/completions", {"prompt": make_prompt(n_in), "max_tokens": n_out}))
        async with s.post(f"{url}{path}", json=body) as r:
            assert r.status == 200, await r.text()
            return tuple(float(r.headers[f"X-Sagellm-Server-{name}"]) / SCALE  # type: ignore[return-value]
                         for name in ("Arrived-S", "Ttft-S", "E2e-S"))

    return run(p, scenario, time_scale=SCALE)


@pytest.mark.parametrize("container", ["vllm", "tgi"])
def test_one_users_ttft_on_the_emulator_is_plans_with_the_front_end_latency_and_its_tokens_are_not_delayed(
        container: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stamped on the copy's clock, so exact: a closed loop of one in `plan`'s simulation and one request to the
    # emulator, then the same with the constants' latency set to 0: the TTFT (and e2e) differ by exactly the
    # latency (vLLM) or not at all (TGI); the token gaps not at all.
    p, n_in, n_out = engine_plan(container), 256, 16
    latency = steps_of(p).k.request_latency_s
    predicted = simulate(served(p), n_in, n_out, SimulatedClosedLoop(1), requests=1, warmup=0).measured[0]
    assert predicted.first_token_s is not None
    _, ttft, e2e = _first_request(p, n_in, n_out)
    assert ttft == pytest.approx(predicted.first_token_s - predicted.arrived_s, abs=1e-4)
    assert e2e == pytest.approx(predicted.end_s - predicted.arrived_s, abs=1e-4)
    without_front_end(monkeypatch)
    _, bare_ttft, bare_e2e = _first_request(p, n_in, n_out)
    assert ttft - bare_ttft == pytest.approx(latency, abs=1e-4)
    assert e2e - ttft == pytest.approx(bare_e2e - bare_ttft, abs=1e-4)
    if container == "vllm":
        assert ttft - bare_ttft > 0.01  # 13.2 ms on VLLM_1: far above the stamps' rounding


def test_a_vllm_request_in_the_front_end_holds_up_no_pass_of_the_one_decoding_and_plan_agrees_stamp_for_stamp(
) -> None:
    # A second request reaches the emulator while the first decodes: its copy sees it 13.2 ms (simulated) later
    # and prefills it at the next pass after that; the first's decode steps go on meanwhile. `plan`'s simulation
    # of the same arrivals (the stamps the emulator sent, as the bench's prediction replays them) gives every
    # request the same TTFT and e2e.
    p, n_in, n_out, gap_s = engine_plan("vllm"), 512, 64, 0.02  # the second leaves 0.2 s (simulated) later

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[float, ...]]:
        async def one(i: int) -> tuple[float, ...]:
            await asyncio.sleep(i * gap_s)
            # Prompts of their own (no prefix-cache hit, as in the simulation): the first word differs.
            body: dict[str, Any] = {"prompt": f"request{i} {make_prompt(n_in - 1)}", "max_tokens": n_out}
            async with s.post(f"{url}/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                return tuple(float(r.headers[f"X-Sagellm-Server-{name}"]) / SCALE
                             for name in ("Arrived-S", "Ttft-S", "E2e-S"))

        return list(await asyncio.gather(one(0), one(1)))

    emulated = run(p, scenario, time_scale=SCALE)
    arrivals = tuple(at - emulated[0][0] for at, _, _ in emulated)
    sim = simulate(served(p), n_in, n_out, SimulatedTrace(arrivals), warmup=0)
    assert len(sim.measured) == 2
    first, second = sim.measured
    assert second.arrived_s < first.end_s  # they overlap: the second was prefilled while the first decoded
    for (_, ttft, e2e), r in zip(emulated, sim.measured, strict=True):
        assert r.first_token_s is not None
        assert ttft == pytest.approx(r.first_token_s - r.arrived_s, abs=1e-4)
        assert e2e == pytest.approx(r.end_s - r.arrived_s, abs=1e-4)

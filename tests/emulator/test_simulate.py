"""The simulator: the emulator's copies on a virtual clock (exact where the schedule is known, deterministic for a
seed, and agreeing with the emulator served over HTTP)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import astuple
from itertools import pairwise

import aiohttp
import pytest

from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from emulator_helpers import TOKEN_CAPS, model, plan, run, steps_of, tgi_body
from sagellm.emulator import Emulator
from sagellm.planner.batching import CopyScheduler
from sagellm.planner.simulate import (
    SimulatedClosedLoop,
    SimulatedOpenLoop,
    SimulatedPromptSet,
    SimulatedRequest,
    Simulation,
    simulate,
)
from sagellm.profiles.plan import served


def ttft_ms(r: SimulatedRequest) -> float:
    assert r.first_token_s is not None
    return (r.first_token_s - r.arrived_s) * 1000


def itl_ms(r: SimulatedRequest) -> float:
    assert r.first_token_s is not None and r.last_token_s is not None
    return (r.last_token_s - r.first_token_s) / (r.output_tokens - 1) * 1000


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_one_user_alone_gets_a_prefill_pass_then_one_decode_step_per_token() -> None:
    p = plan()
    steps = steps_of(p)
    sim = simulate(served(p), 100, 5, SimulatedClosedLoop(1), requests=3, warmup=1)
    for r in sim.measured:
        assert r.ok and r.output_tokens == 5
        assert ttft_ms(r) == pytest.approx(steps.prefill_s(100) * 1000)
        decode = sum(steps.decode_step_s(1, 100 + n) for n in range(1, 5))
        assert (r.end_s - r.arrived_s) == pytest.approx(steps.prefill_s(100) + decode)
    # the next request leaves as the reply ends: a closed loop has no gaps
    ends = [r.end_s for r in sim.requests]
    assert [r.arrived_s for r in sim.requests[1:]] == pytest.approx(ends[:-1])


def test_a_run_is_the_same_for_a_seed_and_differs_for_another() -> None:
    p = plan()

    def stamps(seed: int) -> list[tuple[float, float | None, float | None]]:
        return [(r.arrived_s, r.first_token_s, r.last_token_s)
                for r in simulate(served(p), 256, 64, SimulatedOpenLoop(3.0), requests=200, seed=seed).requests]

    assert stamps(1) == stamps(1)
    assert stamps(1) != stamps(2)


def test_warm_up_then_measured_requests_then_tail_fillers_until_every_measured_one_ends() -> None:
    sim = simulate(served(plan()), 256, 64, SimulatedOpenLoop(3.0), requests=150, warmup=40)
    assert [r.warmup for r in sim.requests[:41]] == [True] * 40 + [False]
    measured = sim.measured
    assert len(measured) == 150 and all(r.ok for r in measured)
    assert sim.window_start_s == measured[0].arrived_s and sim.window_end_s == measured[-1].arrived_s
    fillers = sim.requests[190:]
    assert fillers and not any(r.measured or r.warmup for r in fillers)  # load kept up through the tail
    assert max(r.end_s for r in measured) - fillers[-1].arrived_s < 5.0


def test_queueing_makes_the_p90_ttft_much_more_than_the_median_at_high_utilisation() -> None:
    sim = simulate(served(plan()), 256, 256, SimulatedOpenLoop(2.0), requests=600)
    ttfts = [ttft_ms(r) for r in sim.measured]
    assert quantile(ttfts, 0.9) > 3 * quantile(ttfts, 0.5)


def test_above_the_admission_limit_requests_are_refused_with_429() -> None:
    p = plan(model(env={**TOKEN_CAPS, "MAX_CONCURRENT_REQUESTS": "2"}))
    sim = simulate(served(p), 256, 64, SimulatedClosedLoop(4), requests=100)
    errors = {r.error for r in sim.measured if not r.ok}
    assert errors == {"overloaded"} and all(r.status == 429 for r in sim.measured if not r.ok)
    assert any(r.ok for r in sim.measured)


def test_a_request_over_the_total_token_cap_is_refused_with_422() -> None:
    sim = simulate(served(plan()), 2000, 4000, SimulatedOpenLoop(1.0), requests=5, warmup=0)
    assert all(r.error == "validation" and r.status == 422 for r in sim.measured)


def test_requests_past_the_invocation_timeout_fail_as_timeouts() -> None:
    sim = simulate(served(plan()), 1024, 512, SimulatedOpenLoop(20.0), requests=200, timeout_s=60.0)
    assert any(r.error == "timeout" for r in sim.measured)
    assert all(r.end_s - r.arrived_s <= 60.0 + 1.0 for r in sim.measured if r.ok)


def test_copies_share_the_load_least_loaded_first() -> None:
    one = simulate(served(plan()), 256, 256, SimulatedOpenLoop(2.0), requests=300)
    four = simulate(served(plan(model(copies=4), instance="ml.g5.12xlarge", kind="inference-component")), 256, 256,
                    SimulatedOpenLoop(2.0), requests=300)
    assert quantile([ttft_ms(r) for r in four.measured], 0.9) < quantile([ttft_ms(r) for r in one.measured], 0.9)


@pytest.mark.integration
def test_the_simulator_agrees_with_the_emulator_served_over_http() -> None:
    """Both get the same Poisson arrival times (the simulator's, from its seed); the emulator's own timings
    (its simulated clock, in the headers) ÷ the time scale against the simulated requests."""
    rate, n_in, n_out, n, extra, seed, scale = 3.0, 256, 64, 120, 20, 7, 0.25
    sim = simulate(served(plan()), n_in, n_out, SimulatedOpenLoop(rate), requests=n, warmup=0, seed=seed)
    rng = random.Random(seed)
    arrivals = [0.0]
    for _ in range(n + extra):
        arrivals.append(arrivals[-1] + rng.expovariate(rate))
    arrivals = arrivals[1:]

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[float, float]]:
        t0 = time.perf_counter()

        async def one(at: float) -> tuple[float, float]:
            await asyncio.sleep(max(0.0, t0 + at * scale - time.perf_counter()))
            async with s.post(f"{url}/generate", json=tgi_body(n_in, n_out)) as r:
                assert r.status == 200
                ttft = float(r.headers["X-Sagellm-Server-Ttft-S"]) / scale
                e2e = float(r.headers["X-Sagellm-Server-E2e-S"]) / scale
            return ttft * 1000, (e2e - ttft) / (n_out - 1) * 1000

        return await asyncio.gather(*(one(at) for at in arrivals))

    cpu_wait = CpuWait()  # the emulator and its client both run in this process
    answered = run(plan(), scenario, time_scale=scale)[:n]
    simulated = [(ttft_ms(r), itl_ms(r)) for r in sim.measured]
    assert len(answered) == len(simulated) == n
    # The emulator's clock is the wall clock: a process left without a CPU serves late by that much.
    compared = {(metric, q): (quantile([x[metric] for x in simulated], q), quantile([x[metric] for x in answered], q))
                for metric in (0, 1) for q in (0.5, 0.9)}
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, "predicted vs emulated (TTFT, ITL) ms at p50/p90 "
                        + ", ".join(f"{predicted:.0f} vs {emulated:.0f}" for predicted, emulated in compared.values()))
    for key, (predicted, emulated) in compared.items():
        assert predicted == pytest.approx(emulated, rel=0.15), key  # within 1 % when last run


def test_a_pass_of_prompts_prefilled_together_costs_each_prompt_its_own_attention() -> None:
    p = plan()
    steps = steps_of(p)
    sim = simulate(served(p), 1000, 5, SimulatedClosedLoop(4), requests=4, warmup=0)
    # Four users start together: one pass takes all four prompts; attention is quadratic in each prompt's length,
    # so the pass costs less than one 4,000-token prompt would.
    first = sim.requests[:4]
    assert all(ttft_ms(r) == pytest.approx(steps.prefill_s(4000, 4) * 1000) for r in first)
    assert steps.prefill_s(4000, 4) < steps.prefill_s(4000)


def _every_stamp(sim: Simulation) -> list[tuple[object, ...]]:
    return [astuple(r) for r in sim.requests]


@pytest.mark.parametrize("case", ["open loop", "closed loop", "4 copies", "2 instances", "queue on KV",
                                  "queue on batch size", "429s", "timeouts", "varied sizes", "vllm", "vllm out of KV", "sglang",
                                  "sglang out of KV", "sglang open loop"])
def test_decode_runs_leave_every_stamp_as_turn_by_turn_stepping_does(case: str, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    """The simulator runs turns that only decode at once (CopyScheduler.decode_run); without that, every turn
    goes through the generator and the clock. Every request's stamps must agree to the last bit."""
    p, n_in, n_out = plan(), 256, 256
    load: SimulatedOpenLoop | SimulatedClosedLoop = SimulatedOpenLoop(2.0)
    sizes = None
    if case == "closed loop":
        load = SimulatedClosedLoop(24)
    elif case == "4 copies":
        p = plan(model(copies=4), instance="ml.g5.12xlarge", kind="inference-component")
        load = SimulatedOpenLoop(6.0)
    elif case == "2 instances":
        p = plan(instances=2)
        load = SimulatedOpenLoop(4.0)
    elif case == "queue on KV":  # the KV cache holds five such sequences: the queue's head waits on one leaving
        n_in, n_out, load = 2000, 1000, SimulatedClosedLoop(10)
    elif case == "queue on batch size":
        p = plan(model(env={**TOKEN_CAPS, "PREFILL_CHUNKING": "0", "MAX_BATCH_SIZE": "4"}))
        load = SimulatedClosedLoop(8)
    elif case == "429s":
        p = plan(model(env={**TOKEN_CAPS, "MAX_CONCURRENT_REQUESTS": "3"}))
        load = SimulatedClosedLoop(5)
    elif case == "timeouts":
        n_in, n_out, load = 1024, 512, SimulatedOpenLoop(20.0)
    elif case == "varied sizes":
        rng = random.Random(3)
        drawn = [(rng.randint(16, 1500), rng.randint(1, 400)) for _ in range(1000)]
        sizes = drawn.__getitem__
    elif case == "vllm":  # paged KV taken as decoded: the run stops where a sequence would need a block
        p = plan(model(env={}), container="vllm")
        load = SimulatedClosedLoop(12)
    elif case == "vllm out of KV":  # preemptions: the runs end where the blocks run out
        p, n_in, n_out, load = plan(model(env={}), container="vllm"), 2000, 1000, SimulatedClosedLoop(10)
    elif case == "sglang":  # the queue's head is let in once SGLang's falling estimate makes room
        p, load = plan(model(env={}), container="sglang"), SimulatedClosedLoop(12)
    elif case == "sglang out of KV":  # retractions
        p, n_in, n_out, load = plan(model(env={}), container="sglang"), 2000, 1000, SimulatedClosedLoop(10)
    elif case == "sglang open loop":
        p, load = plan(model(env={}), container="sglang"), SimulatedOpenLoop(4.0)
    fast = simulate(served(p), n_in, n_out, load, requests=200, sizes=sizes)
    monkeypatch.setattr(CopyScheduler, "decode_run", lambda self, until_s, line: 0)
    stepped = simulate(served(p), n_in, n_out, load, requests=200, sizes=sizes)
    assert _every_stamp(fast) == _every_stamp(stepped)
    assert (fast.window_start_s, fast.window_end_s) == (stepped.window_start_s, stepped.window_end_s)


def test_a_prompt_set_keeps_at_most_its_concurrency_in_flight_and_a_burst_sends_all_at_once() -> None:
    # `vllm bench serve --num-prompts 10 --max-concurrency 3`: three at once, the next as each reply ends, no more
    p = plan()
    sim = simulate(served(p), 100, 5, SimulatedPromptSet(10, 3))
    assert len(sim.requests) == 10 and all(r.ok and r.measured for r in sim.requests)
    for r in sim.requests:
        in_flight = sum(1 for o in sim.requests if o.arrived_s <= r.arrived_s < o.end_s)
        assert in_flight <= 3
    burst = simulate(served(p), 100, 5, SimulatedPromptSet(10))
    assert [r.arrived_s for r in burst.requests] == [0.0] * 10


def test_a_prompt_set_slot_sends_its_next_request_its_think_time_after_a_reply() -> None:
    # A front end's per-request cost between a reply's end and the next request reaching the engine: one slot, so
    # each request but the first arrives exactly that long after the one before ended.
    sim = simulate(served(plan()), 100, 5, SimulatedPromptSet(4, 1, think_s=0.25))
    ordered = sorted(sim.requests, key=lambda r: r.arrived_s)
    assert [round(b.arrived_s - a.end_s, 9) for a, b in pairwise(ordered)] == [0.25] * 3

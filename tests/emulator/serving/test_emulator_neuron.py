"""The emulator serves an Inferentia plan as its compiled model runs: at most the compiled batch at once."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from emulator_helpers import run, tgi_body
from sagellm.emulator import Emulator
from sagellm.emulator.serving.copies import ModelServer
from sagellm.profiles import design_for, resolve

LLAMA31_8B = "meta-llama/Llama-3.1-8B"  # compiled for batch 8 × 4096 tokens on one chip, batch 32 on four


@pytest.mark.parametrize(("model_id", "instance"), [(LLAMA31_8B, "ml.inf2.8xlarge"), (LLAMA31_8B, "ml.inf2.48xlarge"),
                                                    ("meta-llama/Llama-2-7b-hf", "ml.inf2.xlarge"),
                                                    ("Qwen/Qwen2.5-14B", "ml.inf2.48xlarge")])
def test_the_emulator_and_the_planner_run_the_plans_compiled_shape(model_id: str, instance: str) -> None:
    design = design_for("max-throughput", model_id, instance)
    plan = design.plan()
    env = plan.environment
    limits = ModelServer(plan, plan.primary).limits
    batch, length = int(env["MAX_BATCH_SIZE"]), int(env["MAX_TOTAL_TOKENS"])
    # Static batch = the compiled batch; context = the compiled sequence length; KV = batch × sequence length.
    assert (limits.max_batch_size, limits.max_total_tokens, limits.max_batch_total_tokens) == (batch, length,
                                                                                              batch * length)
    assert limits.max_input_tokens == int(env["MAX_INPUT_TOKENS"]) < length
    shape = design.shape()
    assert (shape.max_batch_size, shape.batch_token_budget) == (limits.max_batch_size, limits.max_batch_total_tokens)


def test_an_inferentia_plan_runs_at_most_its_compiled_batch_and_queues_the_rest() -> None:
    p = resolve("max-throughput", LLAMA31_8B, "ml.inf2.8xlarge")
    batch = int(p.environment["MAX_BATCH_SIZE"])
    assert batch == 8 and batch < int(p.environment["MAX_CONCURRENT_REQUESTS"])
    sent = batch + 8

    async def scenario(s: aiohttp.ClientSession, url: str, emulator: Emulator) -> tuple[list[int], list[Any]]:
        async def one() -> int:
            async with s.post(f"{url}/generate", json=tgi_body(32, 64)) as r:
                await r.read()
                return r.status

        tasks = [asyncio.create_task(one()) for _ in range(sent)]
        samples = []
        while not all(t.done() for t in tasks):
            samples.append(emulator.primary.stats())
            await asyncio.sleep(0.005)
        return await asyncio.gather(*tasks), samples

    statuses, samples = run(p, scenario, time_scale=0.05)
    assert statuses == [200] * sent  # admitted: the admission limit is above the batch
    assert max(st["running"] for st in samples) == batch
    assert max(st["queued"] for st in samples) > 0  # the rest waited for a slot in the compiled batch

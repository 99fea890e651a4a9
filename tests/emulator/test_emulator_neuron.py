"""The emulator serves an Inferentia plan as its compiled model runs: at most the compiled batch at once."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from emulator_helpers import LLAMA2_7B, run, tgi_body

from sagellm.emulator import Emulator
from sagellm.engines.tgi_neuron import COMPILED_BATCH_SIZES
from sagellm.profiles import resolve


def test_an_inferentia_plan_runs_at_most_its_compiled_batch_and_queues_the_rest() -> None:
    p = resolve("max-throughput", LLAMA2_7B, "ml.inf2.8xlarge")
    batch = int(p.environment["MAX_BATCH_SIZE"])
    assert batch in COMPILED_BATCH_SIZES and batch < int(p.environment["MAX_CONCURRENT_REQUESTS"])
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

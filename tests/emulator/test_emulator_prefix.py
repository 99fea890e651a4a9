"""The emulator's prefix caches and routing: prompts cut into chained blocks of words, each copy's cache serving
what it holds, the endpoint routing by the profile's strategy; on a 4-copy endpoint a workload of several shared
prefixes finds its prefixes cached more often and its first tokens sooner with prefix-aware routing than with
least-outstanding routing (issue 43's done-when)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from emulator_helpers import model, plan, run
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.emulator import Emulator
from sagellm.emulator.frontend.container import IC_HEADER
from sagellm.emulator.frontend.formats import generated_text
from sagellm.planner import Payload
from sagellm.planner.prefix import word_segments
from sagellm.profiles import DeploymentPlan, resolve

SHARED, PROMPT, OUTPUT, PREFIXES = 1536, 2048, 32, 16


def test_prompts_sharing_their_first_words_share_the_chain_keys_of_those_whole_blocks() -> None:
    a = " ".join(f"w{i}" for i in range(40))
    b = " ".join(f"w{i}" for i in range(33)) + " other words here and more"
    sa, sb = word_segments(a, 16), word_segments(b, 16)
    assert [n for _, n in sa] == [16, 16]  # 40 words: two whole blocks, 8 words of its own
    assert sa[0][0] == sb[0][0] and sa[1][0] == sb[1][0]  # the first 32 words match
    c = "x " + " ".join(f"w{i}" for i in range(1, 40))
    assert word_segments(c, 16)[1][0] != sa[1][0]  # a key stands for everything before it too


def test_a_reply_is_cached_under_the_words_the_next_turn_sends_back() -> None:
    first = " ".join(f"ask{i}" for i in range(40))

    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> list[int]:
        hits = []
        turn = first
        for _ in range(2):
            async with session.post(f"{url}/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": turn}], "max_tokens": 24}) as resp:
                reply = (await resp.json())["choices"][0]["message"]["content"]
            async with session.get(f"{url}/metrics") as resp:
                hits.append(next(iter((await resp.json())["models"].values()))["prefix_cache_hits"])
            assert reply.split() == generated_text(24).split()
            # The next turn: this prompt, the reply, then 40 new words (the messages' text, as the copy reads it).
            turn = f"{turn} {reply} " + " ".join(f"more{i}" for i in range(40))
        return hits

    hits = run(plan(model(env={}), container="vllm"), scenario, time_scale=0.05)
    # The first turn computed its 40 words and 23 of its 24 reply tokens (the last one sampled, not computed): 3
    # whole blocks of 16, which the second turn's prompt opens with.
    assert hits == [0, 48]


def four_copies(tmp_path: Path, routing: str) -> DeploymentPlan:
    """The replicas profile on vLLM: four copies of Llama 2 7B (one A10G each) on an ml.g5.12xlarge."""
    (tmp_path / "routed.yaml").write_text(
        "name: routed\nextends: replicas\ncontainer: {kind: vllm}\n"
        f"payload: {{input_tokens: {PROMPT}, output_tokens: {OUTPUT}}}\nrouting: {routing}\n")
    return resolve("routed", "meta-llama/Llama-2-7b-hf", "ml.g5.12xlarge", profiles_dir=tmp_path,
                   hf_token_secret="prod/huggingface/token")


async def closed_loop(session: aiohttp.ClientSession, url: str, component: str, workload: Workload, users: int,
                      requests: int) -> list[float]:
    """`users` clients sending the workload's requests through InvokeEndpoint until `requests` are answered; each
    reply's TTFT on the emulator's clock (its X-Sagellm-Server-Ttft-S header)."""
    ttfts: list[float] = []

    async def user() -> None:
        while workload.issued < requests:
            r = workload.next()
            body = {"prompt": r.prompt, "max_tokens": r.max_new_tokens}
            async with session.post(f"{url}/endpoints/routed/invocations", json=body,
                                    headers={IC_HEADER: component}) as resp:
                assert resp.status == 200, await resp.text()
                ttfts.append(float(resp.headers["X-Sagellm-Server-Ttft-S"]))
                await resp.read()

    await asyncio.gather(*(user() for _ in range(users)))
    return ttfts


def served_by(plan: DeploymentPlan) -> dict[str, Any]:
    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> dict[str, Any]:
        workload = Workload(WorkloadOptions(input_tokens=str(PROMPT), output_tokens=str(OUTPUT),
                                            shared_prefix=SHARED, prefixes=PREFIXES, seed=3), Payload(PROMPT, OUTPUT))
        ttfts = await closed_loop(session, url, next(iter(emulator.by_component)), workload, users=16,
                                  requests=240)
        async with session.get(f"{url}/metrics") as resp:
            model = next(iter((await resp.json())["models"].values()))
        return {"hit_rate": model["prefix_cache_hits"] / model["prefix_cache_queries"],
                "mean_ttft_s": sum(ttfts) / len(ttfts), "copies": model["copies"]}

    return run(plan, scenario, time_scale=0.05, endpoint_name="routed")  # type: ignore[no-any-return]


@pytest.mark.integration
def test_prefix_aware_routing_on_four_copies_caches_more_and_answers_sooner(tmp_path: Path) -> None:
    least = served_by(four_copies(tmp_path, "{strategy: least-outstanding}"))
    by_prefix = served_by(four_copies(tmp_path, "{strategy: prefix-aware, prefix_length: 4096, "
                                                "concurrency_threshold: 16}"))
    assert least["copies"] == by_prefix["copies"] == 4
    ceiling = (SHARED - SHARED % 16) / PROMPT  # the prefix's whole blocks of each prompt
    assert least["hit_rate"] < 0.75 * by_prefix["hit_rate"] <= 0.75 * ceiling
    assert by_prefix["mean_ttft_s"] < 0.75 * least["mean_ttft_s"]

"""Prefix caches per copy and prefix-aware routing (planner/prefix.py, batching.py): segments chain, the cache
is an LRU of whole blocks bounded by the KV the running sequences leave, a finished turn's reply is cached for the
next, and routing by prefix keeps each prefix on one copy, so the cache serves more and the first token comes
sooner."""

from __future__ import annotations

import random

import pytest
from test_schedulers import copy_of, passes, run

from sagellm.planner import batching
from sagellm.planner.batching import DONE, Router, Sequence
from sagellm.planner.prefix import CHARS_PER_TOKEN, PrefixCache, Routing, reply_key, route_key, segments_of
from sagellm.planner.simulate import SimulatedClosedLoop, SimulatedOpenLoop, SimulatedRequest, simulate
from sagellm.profiles.plan import DeploymentPlan, served


def vllm_copies(copies: int) -> DeploymentPlan:
    """Llama 2 7B on vLLM, `copies` inference-component copies of one GPU each on an ml.g5.12xlarge."""
    return DeploymentPlan.model_validate({
        "profile": "test", "region": "us-east-1", "container": "vllm", "instance_type": "ml.g5.12xlarge",
        "initial_instance_count": 1, "endpoint_kind": "inference-component",
        "models": [{"name": "llama2-7b", "model_id": "meta-llama/Llama-2-7b-hf", "image_uri": "vllm:emulated",
                    "tensor_parallel": 1, "environment": {}, "copy_count": copies}],
        "startup_health_check_timeout_s": 600, "model_data_download_timeout_s": 600,
        "input_tokens": 256, "output_tokens": 256, "tags": {}})


def test_an_int_prefix_is_one_segment_every_request_shares() -> None:
    assert segments_of(700) == (("shared", 700),)
    assert segments_of(0) == ()
    assert segments_of((("a", 3), ("b", 4))) == (("a", 3), ("b", 4))


def test_the_route_key_is_the_first_segment_covering_the_prefix_length() -> None:
    segments = (("system", 100), ("doc", 400), ("question", 50))
    assert route_key(segments, 100) == "system"
    assert route_key(segments, 101) == "doc"
    assert route_key(segments, 551) is None  # into the request's own tokens: nothing to share


def test_a_hit_is_the_longest_chain_of_leading_segments_in_whole_blocks() -> None:
    copy = copy_of("vllm", budget=4096, kv=10_000, block=16)
    first = Sequence(1000, 2, 0.0, None, (("a", 300), ("b", 300)))
    copy.submit(first)
    run(copy)
    # a's 300 tokens hold 18 whole blocks (288); a+b's 600 hold 37 (592): b adds 304.
    assert copy.cache.entries["a"][0] == 288 and copy.cache.entries["b"][0] == 304
    assert copy.kv_free == 10_000 - 592

    same_start = Sequence(1000, 2, copy.sim_s, None, (("a", 300), ("c", 300)))
    copy.submit(same_start)
    passes(copy)
    assert same_start.cached_tokens == 288  # a's blocks only: c is not b
    run(copy)
    both = Sequence(1000, 2, copy.sim_s, None, (("a", 300), ("b", 300)))
    copy.submit(both)
    passes(copy)
    assert both.cached_tokens == 592
    assert copy.prefix_hits == 288 + 592 and copy.prefix_queries == 3000


def test_the_cache_evicts_least_recently_used_segments_nobody_runs_and_never_a_pinned_one() -> None:
    cache = PrefixCache(16)
    for key in ("old", "new"):
        cache.insert(key, 160, 160, pinned=False)
    cache.insert("busy", 160, 160, pinned=True)
    assert cache.held == 480 and cache.unpinned == 320
    assert cache.evict(100) == 160 and list(cache.entries) == ["new", "busy"]  # the oldest unpinned one
    assert cache.evict(10_000) == 160 and list(cache.entries) == ["busy"]  # the pinned one stays
    cache.release(["busy"])
    assert cache.unpinned == 160 and cache.evict(1) == 160 and cache.held == 0


def test_a_new_prompt_takes_its_blocks_from_cached_segments_nobody_uses_when_the_pool_is_short() -> None:
    copy = copy_of("vllm", budget=4096, kv=2_000, block=16)
    for i in range(3):  # three 640-token prefixes, one after another: the pool holds only three
        seq = Sequence(700, 2, copy.sim_s, None, ((f"p{i}", 640),))
        copy.submit(seq)
        run(copy)
    assert list(copy.cache.entries) == ["p0", "p1", "p2"] and copy.kv_free == 2_000 - 3 * 640
    fresh = Sequence(700, 2, copy.sim_s, None, (("p3", 640),))
    copy.submit(fresh)
    run(copy)
    assert fresh.state == DONE and fresh.cached_tokens == 0
    assert "p0" not in copy.cache.entries and "p1" in copy.cache.entries  # the least recently used made room
    assert copy.kv_free + copy.cache.held == 2_000  # nothing leaked


def test_a_finished_turn_leaves_its_reply_cached_for_the_next_turn() -> None:
    copy = copy_of("vllm", budget=4096, kv=10_000, block=16)
    turn = (("system", 200), ("user-1", 100))
    first = Sequence(300, 64, 0.0, None, turn)
    copy.submit(first)
    run(copy)
    assert reply_key(turn) in copy.cache.entries
    following = Sequence(300 + 64 + 50, 8, copy.sim_s, None, (*turn, (reply_key(turn), 64), ("user-2", 50)))
    copy.submit(following)
    passes(copy)
    # Cached: the first turn's computed tokens (its prompt and all but its last sampled token) in whole blocks.
    computed = 300 + 64 - 1
    assert following.cached_tokens == computed - computed % 16


def test_a_reply_after_tokens_of_the_request_alone_is_not_cached() -> None:
    copy = copy_of("vllm", budget=4096, kv=10_000, block=16)
    copy.submit(Sequence(300, 64, 0.0, None, (("system", 200),)))  # 100 unique tokens after the segment
    run(copy)
    assert list(copy.cache.entries) == ["system"]


def test_prefix_aware_routing_keeps_a_prefix_on_its_copy_until_the_threshold() -> None:
    copies = [copy_of("vllm") for _ in range(3)]
    router = Router(copies[0].limits, copies, Routing("prefix-aware", prefix_length=1024, concurrency_threshold=2))
    tokens = -(-1024 // CHARS_PER_TOKEN)
    prompt = (("doc", tokens),)
    first, _ = router.submit(1000, 4, None, 0.0, prompt)
    second, _ = router.submit(1000, 4, None, 0.0, prompt)
    assert second is first  # the same leading characters: the same copy
    third, _ = router.submit(1000, 4, None, 0.0, prompt)
    assert third is not first  # the copy reached the threshold: another one, which serves the prefix from now
    fourth, _ = router.submit(1000, 4, None, 0.0, prompt)
    assert fourth is third
    short, _ = router.submit(1000, 4, None, 0.0, (("doc", tokens - 1),))
    assert short.in_flight == 1  # the segment stops short of the prefix length: least outstanding


def test_kv_aware_routing_picks_the_copy_holding_the_longest_start_of_the_prompt() -> None:
    copies = [copy_of("vllm", budget=4096, block=16) for _ in range(3)]
    prompt = (("system", 320), ("doc", 320))
    warm = Sequence(1000, 2, 0.0, None, prompt[:1])  # copy 1 holds the system prompt, copy 2 system + doc
    copies[1].submit(warm)
    run(copies[1])
    copies[2].submit(Sequence(1000, 2, 0.0, None, prompt))
    run(copies[2])
    router = Router(copies[0].limits, copies, Routing("kv-aware"))
    assert router.submit(1000, 4, None, 0.0, prompt)[0] is copies[2]
    assert router.submit(1000, 4, None, 0.0, prompt[:1])[0] is copies[1]  # ties: the fewest in flight
    assert router.submit(1000, 4, None, 0.0, (("other", 320),))[0] is copies[0]  # no match: least outstanding


def test_least_outstanding_stays_the_default_and_random_is_seeded() -> None:
    def picks(routing: Routing | None) -> list[int]:
        copies = [copy_of("vllm") for _ in range(4)]
        router = Router(copies[0].limits, copies, routing)
        return [copies.index(router.submit(100, 4, None, 0.0)[0]) for _ in range(12)]

    assert picks(None) == picks(Routing("least-outstanding")) == [0, 1, 2, 3] * 3
    assert picks(Routing("random")) == picks(Routing("random")) != picks(None)


def _prefixes(count: int, tokens: int, seed: int = 0) -> tuple[tuple[str, int], ...]:
    return tuple((f"prefix-{random.Random(f'{seed}/{i}').randrange(count)}", tokens) for i in range(4000))


def _hit_rate(requests: list[SimulatedRequest]) -> float:
    return sum(r.cached_tokens for r in requests) / sum(r.input_tokens for r in requests)


def _mean_ttft_s(requests: list[SimulatedRequest]) -> float:
    return sum((r.first_token_s or 0.0) - r.arrived_s for r in requests) / len(requests)


@pytest.mark.slow
@pytest.mark.parametrize("load", [SimulatedOpenLoop(4.0), SimulatedClosedLoop(16)], ids=["open", "closed"])
def test_prefix_aware_routing_on_four_copies_serves_more_from_the_cache_and_answers_sooner(load: object) -> None:
    # 16 prefixes of 1536 tokens (24 576) do not fit one copy's KV (~17 600 tokens) but a quarter of them does:
    # routed by prefix, each copy holds its own four.
    p = vllm_copies(4)
    kv = served(p).limits.max_batch_total_tokens
    shared, prompt = 1536, 2048
    assert 16 * shared > kv > 4 * shared
    chosen = _prefixes(16, shared)

    def measured(strategy: str) -> list[SimulatedRequest]:
        sim = simulate(served(p), prompt, 64, load, requests=400,  # type: ignore[arg-type]
                       prefixes=lambda i: (chosen[i],), routing=Routing(strategy, prefix_length=4096))
        assert all(r.ok for r in sim.measured)
        return sim.measured

    least, by_prefix = measured("least-outstanding"), measured("prefix-aware")
    ceiling = (shared - shared % 16) / prompt  # at most the prefix's whole blocks
    assert _hit_rate(least) < 0.75 * _hit_rate(by_prefix) <= 0.75 * ceiling
    assert _hit_rate(by_prefix) > 0.9 * ceiling  # each prefix computed about once per copy
    assert _mean_ttft_s(by_prefix) < 0.75 * _mean_ttft_s(least)


@pytest.mark.slow
@pytest.mark.parametrize("prefixes", [None, 1], ids=["one-shared", "several"])
def test_the_fast_decode_runs_agree_with_the_turns_when_prompts_share_prefixes(prefixes: int | None) -> None:
    """decode_run stops where a turn would admit a prompt, its cached prefix counted (the simulator's fast path)."""
    p = vllm_copies(2)
    chosen = _prefixes(6, 700)

    def stamps(fast: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float | None, float | None]]:
        if not fast:
            monkeypatch.setattr(batching.CopyScheduler, "decode_run", lambda self, until_s, line: 0)
        sim = simulate(served(p), 1024, 200, SimulatedOpenLoop(6.0), requests=200, prefix_tokens=700,
                       prefixes=None if prefixes is None else (lambda i: (chosen[i],)),
                       sizes=lambda i: (800 + (i * 37) % 1200, 20 + (i * 13) % 300))
        monkeypatch.undo()
        return [(r.arrived_s, r.first_token_s, r.last_token_s) for r in sim.requests]

    with pytest.MonkeyPatch.context() as mp:
        assert stamps(True, mp) == stamps(False, mp)

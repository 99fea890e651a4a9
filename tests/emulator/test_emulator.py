"""The emulator in-process on loopback: TGI and OpenAI routes, the plan's limits, and simulated timing."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp
import pytest
from botocore.eventstream import EventStreamBuffer

from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from emulator_helpers import LLAMA2_7B, Events, model, plan, run, sse_events, steps_of, tgi_body
from sagellm.catalog import find_instance, find_model
from sagellm.emulator import Emulator, count_tokens, make_prompt
from sagellm.emulator.frontend.eventstream import exception_event, payload_part
from sagellm.emulator.frontend.formats import generated_text
from sagellm.emulator.serving.copies import ModelServer
from sagellm.planner import Shape
from sagellm.planner.batching import QUEUED, RUNNING, CopyScheduler, Sequence
from sagellm.profiles import design_for
from sagellm.profiles.plan import ModelDeployment


def test_make_prompt_counts_back_to_exactly_n_tokens() -> None:
    for n in (0, 1, 7, 256, 4000):
        assert count_tokens(make_prompt(n)) == n
    assert count_tokens(generated_text(33)) == 33


def test_event_stream_messages_decode_with_botocore() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(payload_part(b'data:{"x":1}\n\n') + exception_event("ModelStreamError", "late", "Code"))
    part, error = list(buffer)
    assert part.headers == {":event-type": "PayloadPart", ":content-type": "application/octet-stream",
                            ":message-type": "event"}
    assert part.payload == b'data:{"x":1}\n\n'
    assert error.headers[":message-type"] == "exception"
    assert error.headers[":exception-type"] == "ModelStreamError"
    assert json.loads(error.payload) == {"Message": "late", "ErrorCode": "Code"}


@pytest.mark.parametrize(("container", "version", "generation"),
                         [("tgi", None, "tgi-3"), ("tgi", "1.4.5", "tgi-1"), ("lmi", None, "lmi")])
def test_steps_are_those_of_the_plans_server_generation(container: str, version: str | None,
                                                        generation: str) -> None:
    """The emulator steps as the plan's prediction does: with the pinned server's generation, not TGI 1's."""
    bare = ModelDeployment(name="m", model_id=LLAMA2_7B, image_uri=container, tensor_parallel=1, environment={})
    assert ModelServer(plan(bare, container=container, version=version), bare).shape.generation == generation


def test_a_standard_profile_is_emulated_with_the_generation_it_is_predicted_with() -> None:
    design = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge")
    deployed = design.plan()
    assert ModelServer(deployed, deployed.models[0]).shape.generation == design.generation == "tgi-3"


def test_limits_follow_the_container_environment_or_the_servers_defaults() -> None:
    bare = ModelDeployment(name="m", model_id=LLAMA2_7B, image_uri="tgi", tensor_parallel=1, environment={})
    kv = Shape(model=find_model(LLAMA2_7B), instance=find_instance("ml.g5.2xlarge"), tensor_parallel=1).kv_capacity_tokens
    tgi3 = ModelServer(plan(bare), bare).limits
    # TGI 3 warm-up: total = min(KV cache, context), input = total - 1, prefill 4096, admission 128.
    assert (tgi3.max_input_tokens, tgi3.max_total_tokens, tgi3.max_concurrent_requests) == (4095, 4096, 128)
    assert (tgi3.max_batch_prefill_tokens, tgi3.max_batch_total_tokens, tgi3.max_batch_size) == (4096, kv, None)
    tgi2 = ModelServer(plan(bare, version="2.4.0"), bare).limits
    assert tgi2.max_batch_prefill_tokens == 4095 + 50  # TGI 2's launcher default: max_input_tokens + 50

    lmi_model = model(env={"OPTION_MAX_MODEL_LEN": "2048", "OPTION_MAX_ROLLING_BATCH_SIZE": "64"})
    lmi = ModelServer(plan(lmi_model, container="lmi"), lmi_model).limits
    # LMI queues instead of rejecting: no 429 admission limit, a cap on running sequences instead.
    assert (lmi.max_total_tokens, lmi.max_concurrent_requests, lmi.max_batch_size) == (2048, None, 64)
    lmi_bare = ModelDeployment(name="m", model_id=LLAMA2_7B, image_uri="lmi", tensor_parallel=1, environment={})
    assert ModelServer(plan(lmi_bare, container="lmi"), lmi_bare).limits.max_batch_size == 32

    replicas = model(copies=4)
    assert len(ModelServer(plan(replicas, instances=3), replicas).copies) == 12


def test_limits_follow_what_tgi3_honours() -> None:
    # MAX_BATCH_TOTAL_TOKENS: ignored for flash models; MAX_BATCH_SIZE: ignored while prefills are chunked.
    ignored = model(env={"MAX_BATCH_TOTAL_TOKENS": "1000", "MAX_BATCH_SIZE": "1"})
    kv = Shape(model=find_model(LLAMA2_7B), instance=find_instance("ml.g5.2xlarge"), tensor_parallel=1).kv_capacity_tokens
    limits = ModelServer(plan(ignored), ignored).limits
    assert (limits.max_batch_total_tokens, limits.max_batch_size) == (kv, None)
    one = model(env={"MAX_BATCH_SIZE": "1", "PREFILL_CHUNKING": "0"})
    assert ModelServer(plan(one), one).limits.max_batch_size == 1
    tgi2 = model(env={"MAX_BATCH_SIZE": "2"})
    assert ModelServer(plan(tgi2, version="2.4.0"), tgi2).limits.max_batch_size == 2


def test_generate_returns_the_requested_tokens_with_details_and_server_timings() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        async with s.post(f"{url}/generate", json=tgi_body(50, 12)) as r:
            assert r.status == 200
            body = await r.json()
            assert r.headers["X-Sagellm-Emulated"] == "true"
            assert r.headers["X-Sagellm-Time-Scale"] == "0.1"
            ttft = float(r.headers["X-Sagellm-Server-Ttft-S"])
            e2e = float(r.headers["X-Sagellm-Server-E2e-S"])
        assert body["details"]["generated_tokens"] == 12
        assert body["details"]["finish_reason"] == "length"
        assert count_tokens(body["generated_text"]) == 12
        assert 0 < ttft < e2e
    run(plan(), scenario)


def test_every_admitted_reply_says_when_its_request_arrived_since_serving_began() -> None:
    # What a prediction replays: the arrivals the engine saw (wall seconds), on plain, streamed and SageMaker replies.
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[float]:
        stamps = []
        for path, body in (("/generate", tgi_body(5, 2)), ("/generate_stream", tgi_body(5, 2)),
                           ("/endpoints/sagellm-test/invocations-response-stream", tgi_body(5, 2, stream=True))):
            await asyncio.sleep(0.05)
            async with s.post(f"{url}{path}", json=body) as r:
                assert r.status == 200
                stamps.append(float(r.headers["X-Sagellm-Server-Arrived-S"]))
                await r.read()
        return stamps
    first, second, third = run(plan(), scenario)
    assert 0 < first < second < third and second - first >= 0.05 and third - second >= 0.05


def test_generate_stream_sends_a_token_event_per_token_then_text_and_details() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[float, Any]]:
        async with s.post(f"{url}/generate_stream", json=tgi_body(20, 15)) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            return await sse_events(r)
    cpu_wait = CpuWait()
    events = run(plan(), scenario)
    assert len(events) == 15
    assert [e["token"]["text"] for _, e in events] == [f" {w}" for w in generated_text(15).split()]
    assert all(e["generated_text"] is None and e["details"] is None for _, e in events[:-1])
    last = events[-1][1]
    assert last["generated_text"] == generated_text(15)
    assert last["details"]["generated_tokens"] == 15 and last["details"]["input_length"] == 20
    assert 0 < last["details"]["sagellm_server_ttft_s"] < last["details"]["sagellm_server_e2e_s"]
    # Tokens arrive as they are generated, not all at the end (14 decode steps of ~3 ms at this scale). Judged only
    # when this process (client and emulator) got its CPU: a paced emulator that fell behind sends the late tokens
    # at once to catch up.
    span = events[-1][0] - events[0][0]
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"first to last token {span * 1000:.1f} ms")
    assert span > 0.02


def test_invocations_wraps_the_reply_in_a_list_and_streams_when_asked() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, Events]:
        async with s.post(f"{url}/invocations", json=tgi_body(10, 4)) as r:
            plain = await r.json()
        async with s.post(f"{url}/invocations", json=tgi_body(10, 4, stream=True)) as r:
            assert r.content_type == "text/event-stream"
            return plain, await sse_events(r)
    plain, events = run(plan(), scenario)
    assert isinstance(plain, list) and plain[0]["details"]["generated_tokens"] == 4
    assert len(events) == 4 and events[-1][1]["details"]["generated_tokens"] == 4


def test_completions_report_usage_plain_and_in_a_final_chunk_when_asked() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, Events, Events]:
        body = {"model": LLAMA2_7B, "prompt": make_prompt(30), "max_tokens": 6}
        async with s.post(f"{url}/v1/completions", json=body) as r:
            plain = await r.json()
        async with s.post(f"{url}/v1/completions", json={**body, "stream": True}) as r:
            bare = await sse_events(r)
        asked = {**body, "stream": True, "stream_options": {"include_usage": True}}
        async with s.post(f"{url}/v1/completions", json=asked) as r:
            return plain, bare, await sse_events(r)
    plain, bare, events = run(plan(), scenario)
    assert plain["usage"] == {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36}
    assert plain["choices"][0]["text"] == generated_text(6)
    # Without stream_options.include_usage: six token chunks and [DONE], no usage anywhere (vLLM).
    assert bare[-1][1] == "[DONE]" and len(bare) == 7 and not any("usage" in e for _, e in bare[:-1])
    assert events[-1][1] == "[DONE]"
    *chunks, usage = [e for _, e in events[:-1]]
    assert len(chunks) == 6 and "".join(c["choices"][0]["text"] for c in chunks) == generated_text(6)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["sagellm_server_e2e_s"] > 0
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 30, "completion_tokens": 6,
                                                         "total_tokens": 36}


def test_info_health_ping_and_metrics_label_the_server_emulated() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> tuple[Any, Any]:
        for path in ("/health", "/ping"):
            async with s.get(f"{url}{path}") as r:
                assert r.status == 200
        async with s.get(f"{url}/info") as r:
            info = await r.json()
        await asyncio.sleep(0.12)  # a couple of loop-lag samples
        async with s.get(f"{url}/metrics") as r:
            return info, await r.json()
    info, metrics = run(plan(model(env={"MAX_CONCURRENT_REQUESTS": "7"})), scenario)
    assert info["emulated"] is True and info["time_scale"] == 0.1
    assert info["model_id"] == LLAMA2_7B
    assert info["max_input_tokens"] == 2048 and info["max_total_tokens"] == 4096
    assert info["max_concurrent_requests"] == 7
    assert metrics["emulated"] is True
    assert metrics["loop_lag_s"]["samples"] >= 1 and metrics["loop_lag_s"]["max"] >= 0
    assert {"requests_served", "running", "queued"} <= metrics.keys()


def test_rejects_requests_above_max_concurrent_requests_at_once_with_429() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        long = [await s.post(f"{url}/generate_stream", json=tgi_body(10, 200)) for _ in range(2)]
        t0 = time.perf_counter()
        async with s.post(f"{url}/generate", json=tgi_body(10, 5)) as r:
            assert r.status == 429
            assert await r.json() == {"error": "Model is overloaded", "error_type": "overloaded"}
        assert time.perf_counter() - t0 < 0.5
        for resp in long:
            resp.close()
    run(plan(model(env={"MAX_CONCURRENT_REQUESTS": "2"})), scenario)


@pytest.mark.parametrize(("n_in", "n_out", "words"), [(2049, 5, "must be <= 2048"), (2000, 2097, "4096")])
def test_rejects_input_over_max_input_tokens_or_total_over_max_total_tokens_with_422(
        n_in: int, n_out: int, words: str) -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        async with s.post(f"{url}/generate", json=tgi_body(n_in, n_out)) as r:
            assert r.status == 422
            body = await r.json()
        assert body["error_type"] == "validation" and words in body["error"]
    run(plan(), scenario)


@pytest.mark.slow
def test_queues_a_request_while_the_kv_budget_is_full() -> None:
    # The KV budget is what memory holds (MAX_BATCH_TOTAL_TOKENS is ignored): room for n sequences of
    # 4000 + 90 tokens (4 for Llama 2 7B on one A10G); one more waits for one of them to finish.
    p = plan(model(env={"MAX_INPUT_TOKENS": "4000"}))
    kv = Shape(model=find_model(LLAMA2_7B), instance=find_instance("ml.g5.2xlarge"), tensor_parallel=1).kv_capacity_tokens
    n = kv // 4090
    assert n >= 2

    async def one(s: aiohttp.ClientSession, url: str) -> dict[str, Any]:
        async with s.post(f"{url}/generate", json=tgi_body(4000, 90)) as r:
            return (await r.json())["details"]

    async def scenario(s: aiohttp.ClientSession, url: str, emulator: Emulator) -> tuple[list[Any], Any]:
        # n ~0.9 s prefills (one per pass: 4096-token budget), then ~3 s of decoding, at time scale 0.2.
        first = [asyncio.create_task(one(s, url)) for _ in range(n)]
        await asyncio.sleep(0.2 * n)
        extra = asyncio.create_task(one(s, url))
        await asyncio.sleep(0.05)
        stats = emulator.primary.stats()
        return [*(await asyncio.gather(*first)), await extra], stats
    (*firsts, last), stats = run(p, scenario, time_scale=0.2)
    assert stats["running"] == n and stats["queued"] == 1
    # Sent after them, its first token still comes only after one of the first n has finished.
    assert 0.2 * n + last["sagellm_server_ttft_s"] > 0.95 * min(f["sagellm_server_e2e_s"] for f in firsts)


def test_a_copy_that_resumes_late_lets_a_later_arrival_wait_for_the_pass_it_arrived_during() -> None:
    # The driver resumes a turn after the pass it slept off has ended on the copy's clock (an emulator's event
    # loop is late). A request that reached the copy in between arrived during the next pass, as the simulator
    # has it: it waits for that decode step, rather than being prefilled at once.
    p = plan()
    copy = CopyScheduler(steps_of(p), ModelServer(p, p.models[0]).limits)
    running = Sequence(100, 10, arrived_s=0.0, deadline_s=None)
    copy.submit(running)
    turn = copy.turn()
    next(turn), next(turn)  # its prefill, then the first decode step (on the copy's clock until `sim_s`)
    step_end = copy.sim_s
    list(turn)
    later = Sequence(100, 10, arrived_s=step_end + 0.001, deadline_s=None)
    copy.submit(later)
    turn = copy.turn()  # resumed late: the request is in the queue already
    decode = next(turn)
    assert later.state == QUEUED and decode == steps_of(p).decode_step_s(1, 102)
    list(turn)
    prefill = next(copy.turn())
    assert later.state == RUNNING and prefill == steps_of(p).prefill_s(100, 1)


def test_single_stream_inter_token_latency_follows_the_step_model() -> None:
    p = plan()
    # Real time and a long prompt, so the ~0.23 s prefill dwarfs wake-up jitter on a busy box.
    scale, n_in, n_out = 1.0, 1000, 20

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[tuple[float, Any]]:
        async with s.post(f"{url}/generate_stream", json=tgi_body(n_in, n_out)) as r:
            return await sse_events(r)
    cpu_wait = CpuWait()  # the emulator and its client both run in this process
    events = run(p, scenario, time_scale=scale)
    steps = steps_of(p)
    # After the prefill (first token), step k decodes with the prompt and k generated tokens in the cache.
    expected = [steps.decode_step_s(1, n_in + k) * scale for k in range(1, n_out)]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(events)]
    ttft = events[-1][1]["details"]["sagellm_server_ttft_s"]
    # The time to first token is the prefill pass; wake-up jitter on a busy box can only add to it.
    prefill = steps.prefill_s(n_in) * scale
    assert len(gaps) == n_out - 1 and prefill * 0.97 <= ttft
    # How much later than that, and the pace of the gaps, only a process that got its CPU can tell.
    judge_only_when_fed(cpu_wait.share(), MAX_CPU_WAIT, f"a mean gap of {sum(gaps) / len(gaps) * 1000:.1f} ms "
                                                       f"and a TTFT of {ttft * 1000:.0f} ms")
    assert sum(gaps) / len(gaps) == pytest.approx(sum(expected) / len(expected), rel=0.1)
    assert ttft <= prefill * 1.1 + 0.04


def test_prefill_of_a_new_request_pauses_decoding_of_the_running_one() -> None:
    p = plan()
    scale = 0.3  # a ~0.14 s prefill between ~10 ms decode steps

    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> list[float]:
        async with s.post(f"{url}/generate_stream", json=tgi_body(10, 40)) as r:
            times: list[float] = []
            other = None
            async for line in r.content:
                if line.startswith(b"data:"):
                    times.append(time.perf_counter())
                    if len(times) == 5:
                        other = asyncio.create_task(s.post(f"{url}/generate", json=tgi_body(2000, 2)))
        assert other is not None
        (await other).close()
        return [b - a for a, b in itertools.pairwise(times)]
    gaps = run(p, scenario, time_scale=scale)
    prefill = steps_of(p).prefill_s(2000) * scale
    assert max(gaps) > 0.8 * prefill
    assert sorted(gaps)[len(gaps) // 2] < 0.3 * prefill


def test_tgi_routes_have_no_invocation_timeout() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, _: Emulator) -> Any:
        async with s.post(f"{url}/generate", json=tgi_body(10, 2400)) as r:
            assert r.status == 200
            return await r.json()
    # 2400 tokens at ~30 ms each is over 60 simulated seconds.
    assert steps_of(plan()).decode_step_s(1, 10) * 2400 > 60
    body = run(plan(), scenario, time_scale=0.004)
    assert body["details"]["generated_tokens"] == 2400


def test_copies_share_the_load_and_reject_only_when_every_copy_is_full() -> None:
    p = plan(model(env={"MAX_CONCURRENT_REQUESTS": "1"}, copies=2), instance="ml.g5.12xlarge",
             kind="inference-component")

    async def scenario(s: aiohttp.ClientSession, url: str, emulator: Emulator) -> tuple[int, list[int]]:
        long = [asyncio.create_task(s.post(f"{url}/generate", json=tgi_body(10, 100))) for _ in range(2)]
        for _ in range(250):  # both admitted (a loaded machine may take a while to send them)
            if sum(c.in_flight for c in emulator.primary.copies) == 2:
                break
            await asyncio.sleep(0.02)
        per_copy = [c.in_flight for c in emulator.primary.copies]
        async with s.post(f"{url}/generate", json=tgi_body(10, 5)) as r:
            status = r.status
        for task in long:
            assert (await task).status == 200
        return status, per_copy
    status, per_copy = run(p, scenario)
    assert per_copy == [1, 1] and status == 429


def test_a_client_that_disconnects_frees_its_slot() -> None:
    async def scenario(s: aiohttp.ClientSession, url: str, emulator: Emulator) -> int:
        r = await s.post(f"{url}/generate_stream", json=tgi_body(10, 500))
        await r.content.readline()
        r.close()  # drops the connection mid-stream
        for _ in range(50):
            if emulator.primary.copies[0].in_flight == 0:
                break
            await asyncio.sleep(0.02)
        async with s.post(f"{url}/generate", json=tgi_body(10, 3)) as again:
            return again.status
    assert run(plan(model(env={"MAX_CONCURRENT_REQUESTS": "1"})), scenario) == 200


def test_stamped_timings_follow_the_simulated_clock_even_when_the_event_loop_stalls() -> None:
    # Time scale 0.1: a 256-token prompt prefills in 6.3 ms of wall time and each step takes 3.3 ms. A
    # 120 ms stall of the event loop (more than the engine catches up on) delays the tokens on the wire,
    # but the emulator's own TTFT and e2e stay those of the simulation, so a client that reads them is
    # not fooled by jitter that the time scale would multiply by ten.
    p = plan()
    steps = steps_of(p)

    async def scenario(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> Any:
        async with session.post(f"{url}/generate_stream", json=tgi_body(256, 40)) as resp:
            events, stalled = [], False
            async for chunk in resp.content.iter_any():
                events.append(chunk)
                if not stalled and len(events) == 5:
                    time.sleep(0.12)  # noqa: ASYNC251 - the stall is the point: it blocks the emulator too
                    stalled = True
        last = json.loads(b"".join(events).strip().split(b"\n\n")[-1][5:])
        return last["details"]

    details = run(p, scenario, time_scale=0.1)
    ttft, e2e = details["sagellm_server_ttft_s"] / 0.1, details["sagellm_server_e2e_s"] / 0.1
    assert ttft == pytest.approx(steps.prefill_s(256), abs=1e-5)
    contexts = [256 + i for i in range(1, 40)]
    assert e2e - ttft == pytest.approx(sum(steps.decode_step_s(1, c) for c in contexts), abs=1e-5)

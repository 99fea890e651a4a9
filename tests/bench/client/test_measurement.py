"""What the load generator measures, against a server whose ground truth is known (tests/pacing_server.py):
per-request ITL as the server paced it, chunked delivery, p95, unique prompts, the stream formats."""

from __future__ import annotations

import asyncio

import pytest

from cpu_wait import MAX_CPU_WAIT, CpuWait, judge_only_when_fed
from pacing_server import PacingServer, Served, pacing_server_process
from sagellm.bench.client.transports import CHAT, COMPLETIONS, TGI, Api, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import run_level
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import percentile, summarize

ITL_S = 0.02
SEED = 7


def workload(tokens: int) -> Workload:
    return Workload(WorkloadOptions(seed=SEED), Payload(32, tokens))


async def level(url: str, concurrency: int, tokens: int, api: Api = TGI, requests: int | None = None
                ) -> list[RequestRecord]:
    """One closed-loop level through the bench's own load loop and transport."""
    records: list[RequestRecord] = []
    await run_level(HttpTransport(url, api, "m"), concurrency=concurrency, requests=requests or concurrency,
                    duration_s=None, warmup=0, workload=workload(tokens), on_record=records.append)
    return records


def served_for(records: list[RequestRecord], log: list[Served], tokens: int) -> list[Served]:
    """The server's view of each record: prompts are unique, so a request's prompt names it."""
    by_prompt = {s.prompt: s for s in log}
    assert len(by_prompt) == len(log), "the server saw the same prompt twice"
    prompts = workload(tokens)
    return [by_prompt[prompts.request(r.request).prompt] for r in records]  # type: ignore[arg-type]


@pytest.mark.integration
@pytest.mark.parametrize("streams", [1, 64, 256])
def test_per_request_itl_is_within_half_a_millisecond_of_the_servers_up_to_256_streams(streams: int) -> None:
    # The server runs in its own process: 256 paced streams are 12,800 token events a second. 200 gaps per
    # request keep a client stall at its first or last token inside the bound while the client gets the CPU it
    # asks for; one denied it (the suite's workers on 2 cores) stalls 100 ms and more at a time (0.56 ms once).
    with pacing_server_process(itl_s=ITL_S, ttft_s=0.05) as server:
        cpu_wait = CpuWait()
        records = asyncio.run(level(server.url, streams, tokens=201))
        waited = cpu_wait.share()
        log = server.log()
    assert len(records) == streams and all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    served = served_for(records, log, 201)
    errors_ms = [abs(r.itl_s - s.itl_s) * 1000 for r, s in zip(records, served, strict=True)]  # type: ignore[operator]
    if max(errors_ms) >= 0.5:  # past the bound: a failure, unless the client was starved
        judge_only_when_fed(waited, MAX_CPU_WAIT, f"a worst client − server ITL of {max(errors_ms):.3f} ms")
    assert max(errors_ms) < 0.5, f"worst {max(errors_ms):.3f} ms"
    print(f"{streams} streams: server ITL {min(s.itl_s for s in served) * 1000:.2f}–"
          f"{max(s.itl_s for s in served) * 1000:.2f} ms, client − server worst {max(errors_ms):.3f} ms")
    s = summarize(records, window_start_s=0, window_end_s=max(r.end_s for r in records))
    assert s.itl_ms.p95 is not None and s.ttft_ms.p95 is not None and s.e2e_s.p95 is not None
    # On a busy machine a server with 256 streams falls behind its 20 ms pace; the client follows it.
    assert s.itl_ms.p50 == pytest.approx(percentile([x.itl_s * 1000 for x in served], 50), abs=0.5)


@pytest.mark.integration
def test_chunked_delivery_does_not_change_itl_but_shows_in_the_token_gaps() -> None:
    async def go() -> tuple[list[RequestRecord], list[Served]]:
        server = PacingServer(itl_s=ITL_S, ttft_s=0.03, tokens_per_chunk=4)
        url = await server.start()
        try:
            return await level(url, 8, tokens=41), server.log
        finally:
            await server.stop()

    records, log = asyncio.run(go())
    served = served_for(records, log, 41)
    for r, s in zip(records, served, strict=True):
        assert r.ok and r.output_tokens == 41
        assert len(s.written_s) == 11  # the first token alone, then ten chunks of four
        assert abs(r.itl_s - s.itl_s) < 0.0005  # type: ignore[operator]
        assert len(r.token_gaps_s) == 40  # one event per token, but three in four arrive with the next
    s = summarize(records, window_start_s=0, window_end_s=max(r.end_s for r in records))
    assert s.itl_ms.p50 == pytest.approx(20.0, abs=0.5)
    assert s.token_gap_ms.p50 is not None and s.token_gap_ms.p50 < 1.0  # pooled gaps: mostly 0 ms
    # One chunk every 4 × 20 ms; the client stamps arrivals, so a loaded 2-core machine adds a few ms.
    assert s.token_gap_ms.p90 == pytest.approx(80.0, abs=5.0)


@pytest.mark.integration
@pytest.mark.parametrize("api", [TGI, COMPLETIONS, CHAT], ids=lambda api: api.name)
def test_every_api_sees_unique_prompts_and_reads_the_servers_counts(api: Api) -> None:
    async def go() -> tuple[list[RequestRecord], list[Served]]:
        server = PacingServer(itl_s=0.005, ttft_s=0.01)
        url = await server.start()
        try:
            return await level(url, 4, tokens=9, api=api, requests=24), server.log
        finally:
            await server.stop()

    records, log = asyncio.run(go())
    assert len(records) == len(log) == 24
    assert len({s.prompt for s in log}) == 24  # N requests, N distinct prompts
    assert {s.route for s in log} == {api.path}
    served = served_for(records, log, 9)
    for r, s in zip(records, served, strict=True):
        assert r.ok and r.output_tokens == 9 and len(r.token_gaps_s) == 8  # chat's role chunk is no token
        assert (r.input_tokens, r.input_tokens_by) == (s.input_tokens, "server") == (32, "server")
        # The client starts its clock before the server's, and stops it after the server wrote.
        assert r.ttft_s is not None and r.ttft_s >= s.ttft_s

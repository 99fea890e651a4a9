"""The bench against a real vLLM server: vLLM's CPU build serving a tiny random-weight Llama on loopback.

A system nobody here wrote checks the load generator, the transports and the metric definitions: the
bench's figures must agree with vLLM's own Prometheus metrics, level by level. The first run on a
machine installs vLLM into ~/.cache/sagellm (about 10 minutes); later runs start the server in about
a minute. Run these alone: `.venv/bin/python -m pytest tests/bench/client/test_vllm.py -v -s` (-s prints the
agreement table).

Covered: the completions and chat APIs, closed loop and request rates, token counts per request and in
total, prefix caching (unique prompts, a replayed seed, a shared prefix), rejected and failed requests,
and the emulator's OpenAI routes read by the same client code as vLLM's.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tokenizers import Tokenizer

from bench_helpers import INSTANCE, MODEL, request_lines, results_of, sagellm
from cpu_wait import judge_only_when_fed, runqueue_wait_s
from sagellm.bench.client.transports import CHAT, COMPLETIONS, Api, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import run_level
from sagellm.bench.targets.http import served_models
from sagellm.clock import Clock
from sagellm.emulator import EmulatorProcess, make_prompt
from sagellm.planner import Payload
from sagellm.profiles import resolve
from sagellm.results.records import RequestRecord
from sagellm.results.summary import percentile, summarize
from vllm_server import FRONT_DOOR, Histogram, TokenSampler, VllmServer, build_tiny_model, scrape

# The fixture's install and start-up have their own limits (vllm_server); the tests themselves are quick.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300, func_only=True)]

SERVED = "tiny-llama"
MAX_MODEL_LEN = 1024
TOO_LONG = 5000  # prompt words: over vLLM's --max-model-len and over the emulator's context alike


@dataclass(frozen=True)
class Tolerance:
    """How closely the bench must agree with vLLM's own metrics (the client sees the server from outside).

    - throughput: the same tokens counted over the same window from both sides; what differs is only
      when a token is stamped (the server's output processor vs the client's read), a few ms at each
      window edge of a several-second window;
    - mean per-request ITL, (e2e − TTFT) ÷ (n − 1): both ends of the span move by the same client delay,
      which cancels while the client gets a CPU; 5 % leaves room for its scheduling jitter;
    - TTFT: vLLM's TTFT starts when its engine takes the request, after the API server parsed and
      tokenized it (which, for a burst of C requests, queue in its one event loop); that front-end time
      (`FRONT_DOOR` mean − engine e2e mean) is the server's, so it is added to vLLM's figure, and the
      client and loopback may add 5 ms on top. This is checked on the means (`_sum` ÷ `_count`), where it
      is exact: vLLM's p50 is known only to its bucket (20–250 ms wide here), and the front-end time of
      one request is not known, so a p50 bound of 5 ms cannot be derived from the histogram. The p50 is
      checked as far as it can be: the client's is never below the lower edge of the bucket holding vLLM's;
    - e2e mean: the same span as the server's HTTP middleware measures it (`FRONT_DOOR`), seen from
      outside; 3 % of a request lasting a few hundred ms.
    TTFT and e2e are offsets of the client's clock reads, so they hold only for a client that gets a
    CPU when a packet arrives: on a 2-core machine shared with other work (seven test suites at once
    here: load average 9–12), the client was seen waiting for a CPU 16–42 % of a level and its TTFT
    then trailed by 15–54 ms. A starved client also reads the two ends of an ITL span, and the tokens at
    a window's edges, late by different amounts: at 24–85 % CPU wait its mean ITL was 6–52 % short and
    its throughput up to 14 % low. So above `max_client_cpu_wait` the level is reported, not judged
    (xfail, with the figures); what both sides count (every request, every histogram's count) is judged
    always.
    """

    throughput_rel: float = 0.05
    itl_mean_rel: float = 0.05
    ttft_ms: float = 5.0
    e2e_mean_rel: float = 0.03
    max_client_cpu_wait: float = 0.05  # share of the level the client spent runnable without a CPU


TOLERANCE = Tolerance()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    model = build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
    with VllmServer(model, served_name=SERVED, max_model_len=MAX_MODEL_LEN) as server:
        print(f"\nvLLM started in {server.startup_s:.0f} s at {server.url}")
        yield server


def http_bench(url: str, out: Path, *extra: str, api: str = "openai", concurrency: str | None = "1,4",
               requests: str = "8", input_tokens: str = "64", output_tokens: str = "16") -> list[str]:
    """`sagellm bench --target http --api openai …` arguments for a small real-time sweep (closed loop
    unless `concurrency` is None and `extra` gives `--request-rate`)."""
    loop = ["--concurrency", concurrency] if concurrency is not None else []
    return ["bench", "--target", "http", "--api", api, "--url", url, "--input-tokens", input_tokens,
            "--output-tokens", output_tokens, *loop, "--requests-per-level", requests, "--warmup", "1",
            "--out", str(out), *extra]


def assert_counts_are_the_servers(records: list[dict[str, Any]], before: dict[str, float],
                                  after: dict[str, float]) -> None:
    """Every request succeeded, and the bench's token counts are the server's: per request from `usage`
    (`input_tokens_by`), in total equal to vLLM's own counters over the run."""
    assert records and all(r["ok"] and r["status"] == 200 for r in records), [r["error"] for r in records]
    assert {r["input_tokens_by"] for r in records} == {"server"}
    assert sum(r["output_tokens"] for r in records) == delta(before, after, "vllm:generation_tokens_total")
    assert sum(r["input_tokens"] for r in records) == delta(before, after, "vllm:prompt_tokens_total")
    assert len(records) == delta(before, after, "vllm:request_success_total")


# ------------------------------------------------------------------------------------ the http target

@pytest.mark.parametrize("naming", [
    pytest.param([], id="served-model-discovered-no-prediction"),
    pytest.param(["--profile", "max-throughput", "--model", MODEL, "--instance", INSTANCE,
                  "--served-model", SERVED], id="catalog-model-predicts-served-model-is-sent"),
])
def test_http_target_benches_vllm_and_counts_the_servers_tokens(
        vllm: VllmServer, tmp_path: Path, naming: list[str]) -> None:
    before = scrape(vllm.url)
    ran = sagellm(*http_bench(vllm.url, tmp_path, *naming), timeout=240)
    after = scrape(vllm.url)

    assert ran.returncode == 0, ran.stderr[-3000:]
    records = request_lines(tmp_path)
    assert len(records) == 1 + 8 + 4 + 8  # warm-up per worker + measured, at concurrency 1 and 4
    assert_counts_are_the_servers(records, before, after)
    # Every request yields what it asked for (the tiny model never emits end-of-sequence greedily).
    assert {r["output_tokens"] for r in records} == {16}
    results = results_of(tmp_path)
    assert results["run"]["served_model"] == SERVED
    assert results["run"]["emulated"] is False
    predicted = [lv["predicted"] for lv in results["levels"]]
    report = (tmp_path / "report.md").read_text()
    if naming:
        assert results["run"]["model"] == MODEL and all(predicted)
    else:
        assert results["run"]["model"] == SERVED and not any(predicted)
        assert "nothing predicted" in report


# Completions in a closed loop are the test above; here the chat API and open-loop (request-rate) levels.
@pytest.mark.parametrize(("api", "load"), [
    pytest.param("chat", ["--concurrency", "1,4"], id="chat-closed-loop"),
    pytest.param("openai", ["--request-rate", "2,4"], id="completions-rate"),
    pytest.param("chat", ["--request-rate", "2,4", "--arrivals", "poisson"], id="chat-rate-poisson"),
])
def test_chat_and_rate_levels_count_the_servers_tokens(
        vllm: VllmServer, tmp_path: Path, api: str, load: list[str]) -> None:
    before = scrape(vllm.url)
    ran = sagellm(*http_bench(vllm.url, tmp_path, *load, "--seed", "7", api=api, concurrency=None, requests="6"),
                  timeout=240)
    after = scrape(vllm.url)

    assert ran.returncode == 0, ran.stderr[-3000:]
    records = request_lines(tmp_path)
    if load[0] == "--concurrency":
        assert len(records) == 1 + 6 + 4 + 6  # warm-up per worker + measured, at concurrency 1 and 4
        assert {r["concurrency"] for r in records} == {1, 4}
    else:
        assert len(records) == 2 * (1 + 6)  # warm-up per level + measured, at 2 and 4 requests/s
        assert {r["request_rate"] for r in records} == {2.0, 4.0}
    assert_counts_are_the_servers(records, before, after)
    # Per request too: request i's prompt is reproducible from (seed, i), so its `usage.prompt_tokens`
    # is checked against the model's own tokenizer, applied as vLLM applies it (chat: after the template).
    tokenizer = Tokenizer.from_file(str(vllm.model_dir / "tokenizer.json"))
    workload = Workload(WorkloadOptions(input_tokens="64", output_tokens="16", seed=7), Payload(64, 16))
    for r in records:
        prompt = workload.request(r["request"]).prompt
        sent = prompt if api == "openai" else f"<|user|>{prompt}\n<|assistant|>"  # tiny_llama.CHAT_TEMPLATE
        assert r["input_tokens"] == len(tokenizer.encode(sent, add_special_tokens=False).ids), r["request"]
    outputs = {r["output_tokens"] for r in records}
    if api == "openai":
        assert outputs == {16}  # ignore_eos, greedy
    else:
        # The chat body sends neither ignore_eos nor a temperature: vLLM samples, and a random model ends
        # a reply with </s> about once in 4,000 tokens (its logit is 0 among ~4,000 of sd 0.3). The count
        # is still the server's (the sums above); most replies are full length.
        assert max(outputs) == 16 and min(outputs) >= 1


def test_a_prompt_over_max_model_len_is_a_validation_error_not_a_crash(vllm: VllmServer, tmp_path: Path) -> None:
    ran = sagellm(*http_bench(vllm.url, tmp_path, input_tokens=str(TOO_LONG), concurrency="1"))

    assert ran.returncode == 3, ran.stderr[-3000:]  # nothing succeeded: the target cannot serve this payload
    assert "Traceback" not in ran.stderr
    assert "no request succeeded: validation: HTTP 400" in ran.stderr
    records = request_lines(tmp_path)
    assert records and all(r["error_kind"] == "validation" and r["status"] == 400 for r in records)
    report = (tmp_path / "report.md").read_text()
    assert "No request failed" not in report and "no request succeeded" in report


def test_api_auto_on_a_server_without_tgi_routes_says_to_try_openai(vllm: VllmServer, tmp_path: Path) -> None:
    ran = sagellm(*[a if a != "openai" else "auto" for a in http_bench(vllm.url, tmp_path)])

    assert ran.returncode == 2, ran.stderr[-3000:]
    assert ran.stderr.strip().splitlines()[-1] == (
        f"sagellm: error: --api auto: {vllm.url}/info answered 404, so {vllm.url} is no TGI server; for an "
        "OpenAI-compatible one (vLLM) use --api openai (or a URL ending in /v1)")
    assert request_lines(tmp_path) == []


# ------------------------------------------------------------------------------------- prefix caching

# Prompt sizes in the tiny model's own tokens (`--tokenizer`): 800 + 4 output fit --max-model-len 1024.
# vLLM caches whole blocks (128 tokens on its CPU build), so a shared prefix of 700 tokens gives every
# request after the first 5 cached blocks, 640 of its 800 prompt tokens.
PREFIX_INPUT, PREFIX_SHARED = 800, 700
# Unique prompts share no block with any earlier prompt, so the expected hit ratio is 0; 1 % is less
# than one cached block (128 of the run's 7,200 prompt tokens is 1.8 %). A hit would mean a repeat.
UNIQUE_MAX_HIT_RATIO = 0.01
# A hit ratio is a count of cached tokens, so where it is predictable (a shared prefix, a replayed run)
# it is checked against the block arithmetic: 2 points of slack for a prompt that tokenizes one token
# shorter or longer than asked (the bench cuts texts at a token count; the server re-tokenizes them).
PREDICTED_HIT_RATIO_ABS = 0.02


def cache_config(url: str) -> dict[str, str]:
    """vLLM's cache settings, as the labels of its `vllm:cache_config_info` gauge."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        line = next(line for line in reply.read().decode().splitlines()
                    if line.startswith("vllm:cache_config_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


def prefix_cache_run(vllm: VllmServer, out: Path, *extra: str) -> tuple[float, list[dict[str, Any]]]:
    """One closed-loop run of 8 long prompts (after 1 warm-up), one at a time: (prefix-cache hit ratio
    over the run from vLLM's own counters, its records)."""
    before = scrape(vllm.url)
    ran = sagellm(*http_bench(vllm.url, out, "--tokenizer", str(vllm.model_dir), *extra, concurrency="1",
                              input_tokens=str(PREFIX_INPUT), output_tokens="4"), timeout=240)
    after = scrape(vllm.url)
    assert ran.returncode == 0, ran.stderr[-3000:]
    records = request_lines(out)
    assert_counts_are_the_servers(records, before, after)
    hits, queries = (delta(before, after, "vllm:prefix_cache_hits_total"),
                     delta(before, after, "vllm:prefix_cache_queries_total"))
    assert queries == sum(r["input_tokens"] for r in records)  # every prompt token was looked up once
    return hits / queries, sorted(records, key=lambda r: r["start_s"])


def predicted_hit_ratio(records: list[dict[str, Any]], cached_tokens: list[int], block: int) -> float:
    """Hits ÷ queries when request i finds `cached_tokens[i]` of its prompt in the cache: whole blocks only,
    and never the prompt's last token (vLLM computes that one to sample from it)."""
    hits = sum(min(cached, r["input_tokens"] - 1) // block * block
               for r, cached in zip(records, cached_tokens, strict=True))
    return hits / sum(r["input_tokens"] for r in records)


def test_unique_prompts_miss_vllms_prefix_cache_until_a_run_replays_its_seed(vllm: VllmServer, tmp_path: Path) -> None:
    config = cache_config(vllm.url)
    assert config["enable_prefix_caching"] == "True"  # vLLM's default for Llama, its CPU build included
    block = int(config["block_size"])

    # A seed no other test here uses: the same seed sends the same prompts (see below).
    unique, records = prefix_cache_run(vllm, tmp_path / "unique", "--seed", "101")
    replayed, again = prefix_cache_run(vllm, tmp_path / "replayed", "--seed", "101")
    # Every request of the replay finds its own twin from the first run in the cache, whole.
    replay_predicted = predicted_hit_ratio(again, [r["input_tokens"] for r in again], block)
    print(f"\nprefix cache, unique prompts: hit ratio {unique:.3f}; the same seed again: {replayed:.3f} "
          f"(predicted {replay_predicted:.3f}; block {block} tokens, prompts "
          f"{sorted({r['input_tokens'] for r in records})} tokens)")

    assert unique <= UNIQUE_MAX_HIT_RATIO
    assert replayed == pytest.approx(replay_predicted, abs=PREDICTED_HIT_RATIO_ABS)


def test_a_shared_prefix_hits_vllms_prefix_cache(vllm: VllmServer, tmp_path: Path) -> None:
    block = int(cache_config(vllm.url)["block_size"])

    ratio, records = prefix_cache_run(vllm, tmp_path, "--seed", "102", "--shared-prefix", str(PREFIX_SHARED))
    predicted = predicted_hit_ratio(records, [0] + [PREFIX_SHARED] * (len(records) - 1), block)
    print(f"\nprefix cache, --shared-prefix {PREFIX_SHARED} of {PREFIX_INPUT}: hit ratio {ratio:.3f} "
          f"(predicted {predicted:.3f}; block {block} tokens)")

    assert ratio == pytest.approx(predicted, abs=PREDICTED_HIT_RATIO_ABS)
    assert ratio > 0.5  # most prompt tokens came from the cache: 8 of 9 requests, 640 of 800 tokens each


# ------------------------------------------------------------------ agreement with vLLM's own metrics

def delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    """How much a vLLM counter grew between two scrapes."""
    return after.get(name, 0.0) - before.get(name, 0.0)


def per_request_itl_s(r: RequestRecord) -> float:
    """(e2e − TTFT) ÷ (n − 1): the design's per-request ITL, which vLLM's TPOT histogram also observes."""
    assert r.ttft_s is not None
    return (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)


HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
              "vllm:e2e_request_latency_seconds", FRONT_DOOR)


# Up to 4: at 8 a closed loop's in-phase bursts make the client build and send 8 requests at once, and
# on a loaded 2-core machine its TTFT then trails vLLM's by 5–12 ms beyond the front-end time (see
# benchmarks/first_token_wire.py: send delay p50 4.8 ms at 8, 0.7 ms at 1).
@pytest.mark.parametrize("concurrency", [1, 2, 4])
def test_bench_agrees_with_vllms_own_metrics(vllm: VllmServer, concurrency: int) -> None:
    transport = HttpTransport(vllm.url, COMPLETIONS, SERVED)
    records: list[RequestRecord] = []
    zero = time.perf_counter()
    waited = runqueue_wait_s()
    with TokenSampler(vllm.url) as sampler:
        level = asyncio.run(run_level(
            transport, concurrency=concurrency, requests=6 * concurrency, duration_s=None, warmup=1,
            # A seed per level: the same seed sends the same prompts, which vLLM would serve from its cache.
            workload=Workload(WorkloadOptions(seed=1000 + concurrency), Payload(64, 32)), on_record=records.append,
            clock_zero=zero))
    after = scrape(vllm.url)
    # Time this process was ready to run but had no CPU: on a shared 2-core machine the client's clock
    # reads late by that much, whatever its code does (benchmarks/first_token_wire.py measures it).
    cpu_wait = (runqueue_wait_s() - waited) / (time.perf_counter() - zero)
    starved = f"client waited for a CPU {cpu_wait:.0%} of the level"

    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    summary = summarize(level.records, window_start_s=level.window_start_s, window_end_s=level.window_end_s)
    server_tokens = sampler.tokens_between(zero + level.window_start_s, zero + level.window_end_s)
    server_throughput = server_tokens / level.window_s
    # vLLM's histograms hold every request of the level, the warm-up too. The warm-up's time includes what
    # neither side's figures are about: it opens the level's connection, on a session and event loop just
    # made (once, in CI, a whole second more than vLLM saw, with the client on a CPU). So the server's
    # figures are cut at sampled pages that hold exactly the warm-up requests (TTFT is observed at the first
    # token, the others at the end), and compared with the measured requests; if no page does, with all.
    warmups = [r for r in records if r.warmup]
    first_token_cut = sampler.first_page_holding(
        zero + max(r.start_s + (r.ttft_s or 0.0) for r in warmups), HISTOGRAMS[:1], len(warmups))
    end_cut = sampler.first_page_holding(zero + max(r.start_s + r.e2e_s for r in warmups), HISTOGRAMS[1:],
                                         len(warmups))
    if first_token_cut is not None and end_cut is not None:
        compared = [r for r in records if not r.warmup]
        starved += " · compared the measured requests"
    else:
        compared, first_token_cut, end_cut = records, sampler.first(), sampler.first()
        starved += " · compared every request, warm-up too (no sampled page held the warm-up alone)"
    ttft = Histogram(first_token_cut, after, HISTOGRAMS[0])
    tpot, e2e, door = (Histogram(end_cut, after, name) for name in HISTOGRAMS[1:])
    assert ttft.count == tpot.count == e2e.count == door.count == len(compared)
    front_end = door.mean - e2e.mean  # the API server's own work, before and after the engine's span
    starved += f" · client TTFT {[round((r.ttft_s or 0) * 1000) for r in compared]} ms"
    client_ttft = [r.ttft_s or 0.0 for r in compared]
    client_ttft_p50 = percentile(client_ttft, 50) or 0.0
    client_ttft_mean = sum(client_ttft) / len(compared)
    ttft_low, ttft_p50, ttft_high = ttft.quantile(0.5)
    client_itl = sum(per_request_itl_s(r) for r in compared) / len(compared)
    client_e2e = sum(r.e2e_s for r in compared) / len(compared)
    ms = 1000
    print(f"\nc={concurrency} (vLLM vs bench): throughput {server_throughput:.1f} vs "
          f"{summary.throughput_tokens_per_s:.1f} tok/s ({summary.throughput_tokens_per_s / server_throughput - 1:+.2%})"
          f" · mean ITL {tpot.mean * ms:.2f} vs {client_itl * ms:.2f} ms ({client_itl / tpot.mean - 1:+.2%})"
          f" · TTFT p50 {ttft_p50 * ms:.1f} [{ttft_low * ms:g}–{ttft_high * ms:g}] + front end {front_end * ms:.2f}"
          f" vs {client_ttft_p50 * ms:.2f} ms (mean {ttft.mean * ms:.2f} + {front_end * ms:.2f} vs "
          f"{client_ttft_mean * ms:.2f}: {(client_ttft_mean - ttft.mean - front_end) * ms:+.2f} ms)"
          f" · e2e mean {door.mean * ms:.1f} (engine {e2e.mean * ms:.1f}) vs {client_e2e * ms:.1f} ms"
          f" ({client_e2e / door.mean - 1:+.2%}) · {starved}")

    assert ttft.mean <= client_ttft_mean and ttft_low <= client_ttft_p50  # nobody sees a token before it exists
    judge_only_when_fed(cpu_wait, TOLERANCE.max_client_cpu_wait, "its throughput, ITL, TTFT and e2e (above)")
    assert summary.throughput_tokens_per_s == pytest.approx(server_throughput, rel=TOLERANCE.throughput_rel), starved
    assert client_itl == pytest.approx(tpot.mean, rel=TOLERANCE.itl_mean_rel), starved
    assert client_ttft_mean <= ttft.mean + front_end + TOLERANCE.ttft_ms / ms, starved
    assert client_e2e == pytest.approx(door.mean, rel=TOLERANCE.e2e_mean_rel), starved


# ------------------------------------------------- one client, two servers: the emulator cannot drift

@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    plan = resolve("max-throughput", MODEL, INSTANCE, payload=Payload(64, 16))
    with EmulatorProcess(plan, clock=Clock(0.05)) as emu:
        yield emu


@dataclass(frozen=True)
class Server:
    """An OpenAI-compatible server the same client code is pointed at."""

    url: str
    model: str  # what it serves


@pytest.fixture(params=["emulator", "vllm"])
def server(request: pytest.FixtureRequest) -> Server:
    if request.param == "vllm":
        vllm: VllmServer = request.getfixturevalue("vllm")
        return Server(vllm.url, SERVED)
    emu: EmulatorProcess = request.getfixturevalue("emulator")
    return Server(emu.url, MODEL)


def send(server: Server, prompt_words: int, max_tokens: int, api: Api = COMPLETIONS) -> RequestRecord:
    """One request through the bench's OpenAI transport (completions or chat)."""
    async def go() -> RequestRecord:
        async with aiohttp.ClientSession() as session:
            return await HttpTransport(server.url, api, server.model).send(session, make_prompt(prompt_words),
                                                                          max_tokens)
    return asyncio.run(go())


@pytest.mark.parametrize("api", [COMPLETIONS, CHAT], ids=["completions", "chat"])
def test_openai_streams_read_the_same_on_the_emulator_and_vllm(server: Server, api: Api) -> None:
    out = send(server, 64, 16, api)

    assert out.ok and out.status == 200, out.error
    # From `usage`: completions ask for exactly 16 (ignore_eos); a chat reply that vLLM samples may end
    # early on a random model (see test_chat_and_rate_levels_count_the_servers_tokens).
    assert out.output_tokens == 16 if api is COMPLETIONS else 1 <= out.output_tokens <= 16
    # vLLM's tokenizer gives at least one token per word; chat adds its template's tokens.
    assert out.input_tokens_by == "server" and out.input_tokens >= 64
    assert out.ttft_s is not None and 0 < out.ttft_s < out.e2e_s
    # Token events after the first (a chunk may carry several; chat's role-only opening chunk is none).
    assert 1 <= len(out.token_gaps_s) <= out.output_tokens - 1


def test_a_prompt_over_the_context_is_a_validation_error_on_both(server: Server) -> None:
    out = send(server, TOO_LONG, 16)

    assert not out.ok and out.error_kind == "validation", out.error
    assert out.output_tokens == 0 and out.ttft_s is None


# The emulator says these like vLLM: its /v1/models and vLLM's error status for an over-long prompt.
@pytest.mark.parametrize("server", ["emulator", "vllm"], indirect=True)
def test_the_served_model_is_discovered_from_v1_models(server: Server) -> None:
    assert served_models(server.url) == [server.model]


@pytest.mark.parametrize("server", ["emulator", "vllm"], indirect=True)
def test_a_prompt_over_the_context_is_rejected_with_vllms_status(server: Server) -> None:
    assert send(server, TOO_LONG, 16).status == 400

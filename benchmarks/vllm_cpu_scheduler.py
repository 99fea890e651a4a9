"""Measure a real vLLM V1 scheduler: step-time calibration and a closed-loop grid, for the simulation to match.

    python benchmarks/vllm_cpu_scheduler.py                         # both → benchmarks/data/vllm_cpu.json (~12 min)
    python benchmarks/vllm_cpu_scheduler.py --only calibration      # or --only grid
    python benchmarks/vllm_cpu_scheduler.py --max-num-batched-tokens 1024 --json /tmp/other.json
    python benchmarks/vllm_cpu_scheduler.py --quick --json /tmp/smoke.json   # a smoke run: few points, short levels

(with the repository's venv and `PYTHONPATH=src:tests`). The server is vLLM's CPU build (vllm-cpu 0.32.0,
installed once into ~/.cache/sagellm by tests/vllm_server.py) serving the tiny random-weight Llama of
tests/tiny_llama.py (4 layers, hidden 256, float32, eager) on loopback, started with explicit scheduler flags
(--max-num-seqs, --max-num-batched-tokens, --max-model-len, --block-size) and --enable-logging-iteration-details,
which logs one line per engine step: its prefill and decode requests and tokens and its model time. Every flag,
the scheduler and cache config vLLM resolves from them, the config lines the server logs, and its
`vllm:cache_config_info` labels go into the JSON; benchmarks/data/vllm_cpu.md describes it.

Every prompt is a list of token ids (the completions API takes them as they are: the server's
`usage.prompt_tokens` is checked to equal the list's length), random ids from the model's vocabulary, drawn
fresh per request so that nothing hits the prefix cache by accident. Every request asks for exactly its output
length (`ignore_eos`, `min_tokens` = `max_tokens`, greedy), streams, and asks for `continuous_usage_stats`
so each streamed chunk says how many tokens it carries.

1. Step-time calibration: how long one engine step takes, from what is in it.
   - prefill: one request at a time, P prompt tokens, max_tokens=1. The step period is vLLM's own
     `vllm:request_prefill_time_seconds` (engine: scheduled → first token) for that one request, read as the
     histogram's sum delta (exact); the step log gives each chunk's model time (P over the token budget is
     chunked); the client's TTFT and vLLM's TTFT are recorded beside it.
   - decode: B streams started together, short prompts, long outputs; while all B decode in lockstep, the
     streams' time per token is one step holding B decode tokens (and the step log its model time).
   - context: the same at a few prompt lengths (B = 1 and B = 8), so the step's attention context varies.
   Linear step-time functions are fitted (non-negative least squares, relative residuals) to the step period
   and to the model time, and printed with their residuals; chunked prefills are held out of the period fit
   and predicted chunk by chunk as a check.
2. The grid: closed loop (each of C clients sends its next request when its last one ends), C in 1, 4, 16,
   32, × workloads prefill-heavy (1024 / 64), decode-heavy (64 / 256), shared-prefix (768 shared + 256 unique
   / 64). Each level runs C warm-up requests then N = max(16, 4C) measured ones on the same C clients (the
   first C requests started are the warm-up; the measured window opens at the first measured request's
   start), and the whole grid runs twice (median and range per level). Per level: TTFT p50/p90, ITL p50,
   TPOT p50, output throughput, wall time, the load average, the client's own CPU-wait share, vLLM's counters
   and histograms before/after (prefix-cache queries/hits, preemptions, ITL, queue time), a 0.5 s sample of its
   running/waiting/KV-usage gauges, and the step log's trace of every engine step.

On a shared 2-core machine the client, the API server, the engine core and its worker compete for the CPUs:
the load average (before and after each point) and the client's run-queue wait are recorded with every point,
and each calibration point is a median of repeats (5). Nothing here is hard-coded but the workload definitions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Self

import aiohttp
import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sagellm.results.summary import percentile

REPO = Path(__file__).resolve().parents[1]
DEFAULT_JSON = REPO / "benchmarks" / "data" / "vllm_cpu.json"
SERVED = "tiny-llama"
FIRST_ID = 3  # ids 0-2 are <unk>, <s>, </s> (tests/tiny_llama.py)

# vLLM's metric names in 0.32; the renamed ones are tried in order (the older name last).
ITERATION_TOKENS = "vllm:iteration_tokens_total"
HIST = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "iteration_tokens": (ITERATION_TOKENS,),
}
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
            "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


# ---------------------------------------------------------------------------------------------- metrics

def scrape(url: str) -> dict[str, float]:
    """vLLM's /metrics as {name or name{le}: value}, summed over other labels (histogram buckets by `le`)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        le = re.search(r'le="([^"]*)"', labels)
        key = f"{name}{{{le.group(1)}}}" if le else name
        out[key] = out.get(key, 0.0) + float(value)
    return out


def metric_names(url: str) -> list[str]:
    """Every vLLM metric family the server exposes (its `# TYPE` lines)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sorted({line.split()[2] + " " + line.split()[3] for line in text.splitlines()
                   if line.startswith("# TYPE vllm:")})


def first_present(metrics: dict[str, float], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if f"{n}_count" in metrics), None)


def hist_delta(before: dict[str, float], after: dict[str, float], key: str) -> dict[str, float] | None:
    """count, sum and mean of what histogram `key` (of HIST) observed between two scrapes; its name too."""
    name = first_present(after, HIST[key])
    if name is None:
        return None
    count = after[f"{name}_count"] - before.get(f"{name}_count", 0.0)
    total = after[f"{name}_sum"] - before.get(f"{name}_sum", 0.0)
    return {"count": count, "sum": total, "mean": total / count if count else float("nan")}


def hist_buckets(before: dict[str, float], after: dict[str, float], name: str) -> list[tuple[float, float]]:
    """(upper edge, observations in this bucket alone) for a histogram, between two scrapes."""
    prefix = f"{name}_bucket{{"
    cumulative = sorted((float(k[len(prefix):-1]), v - before.get(k, 0.0)) for k, v in after.items()
                        if k.startswith(prefix))
    out, below = [], 0.0
    for edge, value in cumulative:
        out.append((edge, value - below))
        below = value
    return [(e, v) for e, v in out if v]


def server_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """What vLLM counted between two scrapes: its counters' deltas and its histograms' count/sum/mean."""
    out: dict[str, Any] = {name.removeprefix("vllm:"): after.get(name, 0.0) - before.get(name, 0.0)
                           for name in COUNTERS}
    for key in HIST:
        out[f"{key}_hist"] = hist_delta(before, after, key)
    it = out["iteration_tokens_hist"]
    if it is not None:
        # Output batches the API server processed: a step that only computes a prefill chunk sends none
        # unless the step log is on (then every step that computed tokens does).
        out["frontend_iterations"] = it["count"]
        out["iteration_tokens_buckets"] = hist_buckets(before, after, ITERATION_TOKENS)
    queries = out["prefix_cache_queries_total"]
    out["prefix_cache_hit_ratio"] = out["prefix_cache_hits_total"] / queries if queries else None
    return out


class GaugeSampler:
    """`with GaugeSampler(url) as g:` a thread reading vLLM's running/waiting/KV-usage gauges every `interval_s`."""

    def __init__(self, url: str, interval_s: float = 0.5):
        self.url, self.interval_s = url, interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as reply:
                    lines = reply.read().decode().splitlines()
            except OSError:
                continue
            sample: dict[str, float] = {}
            for line in lines:
                for g in GAUGES:
                    if line.startswith((g + "{", g + " ")):
                        sample[g.removeprefix("vllm:")] = sample.get(g.removeprefix("vllm:"), 0.0) + float(
                            line.rsplit(" ", 1)[1])
            self.samples.append(sample)

    def summary(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {"samples": len(self.samples)}
        for g in GAUGES:
            values = [s[g.removeprefix("vllm:")] for s in self.samples if g.removeprefix("vllm:") in s]
            out[f"max_{g.removeprefix('vllm:')}"] = max(values) if values else None
            out[f"mean_{g.removeprefix('vllm:')}"] = sum(values) / len(values) if values else None
        return out


def runqueue_wait_s() -> float:
    """This process's time runnable but without a CPU so far (Linux schedstat)."""
    return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


STEP_LINE = re.compile(r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation "
                       r"requests, (\d+) generation tokens, iteration elapsed time: ([\d.]+) ms")
STEP_COLUMNS = ("iteration", "prefill_requests", "prefill_tokens", "decode_requests", "decode_tokens", "elapsed_ms")


class StepLog:
    """vLLM's per-step log (`--enable-logging-iteration-details`): one line per engine step that computed
    tokens, with the step's prefill requests/tokens (vLLM calls them context requests/tokens: every request
    with no output token yet, chunks of a chunked prefill included), its decode requests/tokens, and the
    model's time for the step (`iteration elapsed time`: around the forward pass and sampling, not the
    scheduler nor the output processing). `mark()` before a point, `since(mark)` after it."""

    def __init__(self, path: Path | None):
        self.path = path

    def mark(self) -> int:
        return self.path.stat().st_size if self.path is not None else 0

    def since(self, mark: int) -> list[tuple[int, int, int, int, int, float]]:
        if self.path is None:
            return []
        time.sleep(0.3)  # the API server logs a step when it processes its outputs, a moment after
        with self.path.open("rb") as fh:
            fh.seek(mark)
            text = fh.read().decode(errors="replace")
        return [(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), float(m[6]))
                for m in STEP_LINE.finditer(text)]


def step_summary(steps: list[tuple[int, int, int, int, int, float]], wall_s: float, budget: int) -> dict[str, Any]:
    """What the engine's steps held and how long their model time was, over one point or level."""
    if not steps:
        return {"steps": 0}
    elapsed = [s[5] / 1e3 for s in steps]
    tokens = [s[2] + s[4] for s in steps]
    mixed = [s for s in steps if s[2] and s[4]]
    return {"steps": len(steps), "iterations": [steps[0][0], steps[-1][0]],
            "model_s_total": sum(elapsed), "model_busy_share": sum(elapsed) / wall_s,
            "model_s_p50": percentile(elapsed, 50), "model_s_mean": sum(elapsed) / len(elapsed),
            "tokens_per_step_mean": sum(tokens) / len(tokens), "tokens_per_step_max": max(tokens),
            "decode_requests_max": max(s[3] for s in steps), "prefill_tokens_total": sum(s[2] for s in steps),
            "decode_tokens_total": sum(s[4] for s in steps),
            "steps_prefill_only": sum(1 for s in steps if s[2] and not s[4]),
            "steps_decode_only": sum(1 for s in steps if s[4] and not s[2]), "steps_mixed": len(mixed),
            "steps_at_budget": sum(1 for t in tokens if t >= budget)}


# ----------------------------------------------------------------------------------------------- client

@dataclass
class Request:
    """One streamed request as the client saw it (perf_counter seconds)."""

    prompt_len: int
    max_tokens: int
    start: float = 0.0
    first: float | None = None  # the first chunk carrying a token
    end: float = 0.0
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens it carries)
    prompt_tokens: int = 0  # the server's usage
    output_tokens: int = 0
    ok: bool = False
    error: str = ""
    warmup: bool = False

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    def token_gaps(self, inside: tuple[float, float] | None = None) -> list[tuple[float, int]]:
        """(gap before the token, its index in the output) for each token after the first; a chunk of k tokens
        gives k gaps of its gap ÷ k. With `inside`, only the chunks both ends of whose gap lie in that span."""
        out: list[tuple[float, int]] = []
        index = self.chunks[0][1] if self.chunks else 0
        for (t0, _), (t1, k) in zip(self.chunks, self.chunks[1:], strict=False):
            if inside is None or (inside[0] <= t0 and t1 <= inside[1]):
                out += [((t1 - t0) / k, index + i) for i in range(k)]
            index += k
        return out

    @property
    def tpot(self) -> float | None:
        """(e2e − TTFT) ÷ (n − 1): the request's mean inter-token time."""
        if self.first is None or self.output_tokens < 2:
            return None
        return (self.chunks[-1][0] - self.first) / (self.output_tokens - 1)


async def stream(session: aiohttp.ClientSession, url: str, ids: list[int], max_tokens: int) -> Request:
    """POST one completions request with token-id prompt `ids`, read its stream to the end."""
    r = Request(prompt_len=len(ids), max_tokens=max_tokens)
    body = {"model": SERVED, "prompt": ids, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    r.start = time.perf_counter()
    seen = 0
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                r.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return r
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                now = time.perf_counter()
                event = json.loads(data)
                usage = event.get("usage") or {}
                if event.get("choices"):
                    total = usage.get("completion_tokens")
                    k = (total - seen) if total is not None else 1
                    if k > 0:
                        if r.first is None:
                            r.first = now
                        r.chunks.append((now, k))
                        seen += k
                if usage:
                    r.prompt_tokens = usage.get("prompt_tokens", r.prompt_tokens)
                    r.output_tokens = usage.get("completion_tokens", r.output_tokens)
        r.end = time.perf_counter()
        r.ok = r.output_tokens == max_tokens and r.prompt_tokens == len(ids) and r.first is not None
        if not r.ok:
            r.error = f"asked {len(ids)}/{max_tokens}, server counted {r.prompt_tokens}/{r.output_tokens}"
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        r.end = time.perf_counter()
        r.error = f"{type(exc).__name__}: {exc}"
    return r


class Prompts:
    """Random token-id prompts from the model's vocabulary; `shared` (fixed) ids go first when given."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.rng = vocab, random.Random(seed)

    def ids(self, n: int, shared: list[int] | None = None) -> list[int]:
        head = list(shared or [])
        return head + [self.rng.randrange(FIRST_ID, self.vocab) for _ in range(n - len(head))]


def session(limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0),
                                 timeout=aiohttp.ClientTimeout(total=600))


def wait_idle(url: str, success_before: float, expected: int, timeout_s: float = 5.0) -> dict[str, float]:
    """Scrape until vLLM has counted `expected` more finished requests (its stats follow the response by a
    moment), or until `timeout_s`; the last scrape."""
    deadline = time.monotonic() + timeout_s
    while True:
        after = scrape(url)
        if after.get("vllm:request_success_total", 0.0) - success_before >= expected or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------ calibration

def calibrate_prefill(url: str, log: StepLog, prompts: Prompts, lengths: list[int], repeats: int,
                      budget: int) -> list[dict[str, Any]]:
    """One request at a time, P tokens, max_tokens=1: vLLM's prefill time for it (its step period: from the
    scheduler taking it to the engine's output of its token), the model time of each of its steps from the
    step log, and the client's TTFT."""
    points = []

    async def one(ids: list[int]) -> Request:
        async with session(1) as s:
            return await stream(s, url, ids, 1)

    for p in lengths:
        runs = []
        load0 = load()
        for _ in range(repeats):
            before, mark = scrape(url), log.mark()
            r = asyncio.run(one(prompts.ids(p)))
            after = wait_idle(url, before.get("vllm:request_success_total", 0.0), 1)
            steps = log.since(mark)
            if not r.ok:
                raise RuntimeError(f"prefill P={p}: {r.error}")
            d = server_deltas(before, after)
            runs.append({"client_ttft_s": r.ttft, "client_e2e_s": r.end - r.start,
                         "server_ttft_s": d["ttft_hist"]["mean"], "prefill_s": d["prefill_hist"]["mean"],
                         "queue_s": d["queue_hist"]["mean"], "e2e_s": d["e2e_hist"]["mean"],
                         "steps": [[s[2], s[5] / 1e3] for s in steps],  # (prefill tokens, model s) per step
                         "prefix_cache_hits": d["prefix_cache_hits_total"]})
        point: dict[str, Any] = {"prompt_tokens": p, "chunks": math.ceil(p / budget), "repeats": runs,
                                 "load_before": load0, "load_after": load()}
        for key in ("client_ttft_s", "server_ttft_s", "prefill_s", "queue_s"):
            point[key] = median(x[key] for x in runs)
        logged = [x["steps"] for x in runs if len(x["steps"]) == point["chunks"]]
        point["steps_logged"] = median(len(x["steps"]) for x in runs)
        # Per chunk: its tokens, the KV context it attends to (everything up to its end), its model time.
        point["chunk_model_s"] = [{"tokens": min(budget, p - i * budget), "context": min(p, (i + 1) * budget),
                                   "model_s": median(steps[i][1] for steps in logged)}
                                  for i in range(point["chunks"])] if logged else []
        point["model_s"] = sum(c["model_s"] for c in point["chunk_model_s"]) if logged else None
        points.append(point)
        print(f"  prefill P={p:5}: vLLM prefill {point['prefill_s'] * 1e3:7.2f} ms (model "
              f"{(point['model_s'] or 0) * 1e3:7.2f}, {point['steps_logged']:.0f} steps)  TTFT vLLM "
              f"{point['server_ttft_s'] * 1e3:7.2f} client {point['client_ttft_s'] * 1e3:7.2f} ms  load {load0[0]}")
    return points


def span_itl(r: Request, inside: tuple[float, float]) -> tuple[float, int] | None:
    """(time per token, tokens) across the request's chunks inside `inside`: last − first arrival over the
    tokens between them. Unlike single gaps it does not care when the client read a burst of chunks at once."""
    chunks = [(t, k) for t, k in r.chunks if inside[0] <= t <= inside[1]]
    if len(chunks) < 2:
        return None
    tokens = sum(k for _, k in chunks[1:])
    return (chunks[-1][0] - chunks[0][0]) / tokens, tokens


def calibrate_decode(url: str, log: StepLog, prompts: Prompts, batches: list[int], prompt_len: int, output: int,
                     repeats: int, label: str) -> list[dict[str, Any]]:
    """B streams started together. While all B decode (after the last one's first token, before the first one's
    last token) each step holds B decode tokens: its period is the streams' time per token there, its model
    time the step log's steps with B decode requests and no prefill."""
    points = []

    async def wave(b: int) -> list[Request]:
        async with session(b) as s:
            return list(await asyncio.gather(*(stream(s, url, prompts.ids(prompt_len), output) for _ in range(b))))

    for b in batches:
        runs = []
        load0 = load()
        t0 = time.perf_counter()
        for _ in range(repeats):
            before, mark, wait0, w0 = scrape(url), log.mark(), runqueue_wait_s(), time.perf_counter()
            reqs = asyncio.run(wave(b))
            wait_share = (runqueue_wait_s() - wait0) / (time.perf_counter() - w0)
            after = wait_idle(url, before.get("vllm:request_success_total", 0.0), b)
            steps = log.since(mark)
            bad = [r.error for r in reqs if not r.ok]
            if bad:
                raise RuntimeError(f"decode B={b}: {bad[:3]}")
            lockstep = (max(r.chunks[0][0] for r in reqs), min(r.chunks[-1][0] for r in reqs))
            spans = [x for r in reqs if (x := span_itl(r, lockstep)) is not None]
            gaps = [g for r in reqs for g, _ in r.token_gaps(lockstep)]
            full = [s[5] / 1e3 for s in steps if s[3] == b and s[1] == 0]
            d = server_deltas(before, after)
            runs.append({"itl_span_s": median(x[0] for x in spans), "lockstep_tokens": median(x[1] for x in spans),
                         "itl_gap_p50_s": percentile(gaps, 50), "burst_gap_share": sum(g < 1e-3 for g in gaps) / len(gaps),
                         "lockstep_s": lockstep[1] - lockstep[0],
                         "tokens_per_chunk": sum(r.output_tokens for r in reqs) / sum(len(r.chunks) for r in reqs),
                         "server_itl_mean_s": d["itl_hist"]["mean"] if d["itl_hist"] else None,
                         "model_s_p50": percentile(full, 50), "full_batch_steps": len(full), "steps": len(steps),
                         "client_cpu_wait_share": wait_share})
        point = {"batch": b, "prompt_tokens": prompt_len, "output_tokens": output,
                 # The context of each sequence at the median lockstep step: its prompt and half its output.
                 "context_tokens_per_seq": prompt_len + output / 2,
                 "itl_span_s": median(x["itl_span_s"] for x in runs),
                 "server_itl_mean_s": median(x["server_itl_mean_s"] for x in runs if x["server_itl_mean_s"]),
                 "model_s": median(x["model_s_p50"] for x in runs if x["model_s_p50"] is not None)
                 if any(x["model_s_p50"] is not None for x in runs) else None,
                 "itl_gap_p50_s": median(x["itl_gap_p50_s"] for x in runs),
                 "repeats": runs, "wall_s": time.perf_counter() - t0, "load_before": load0, "load_after": load()}
        points.append(point)
        print(f"  {label} B={b:3} prompt {prompt_len:5}: ITL {point['itl_span_s'] * 1e3:7.2f} ms (vLLM mean ITL "
              f"{point['server_itl_mean_s'] * 1e3:7.2f}, model {(point['model_s'] or 0) * 1e3:6.2f}, single-gap p50 "
              f"{point['itl_gap_p50_s'] * 1e3:6.2f})  client cpu-wait {runs[0]['client_cpu_wait_share']:.0%}  "
              f"load {load0[0]}")
    return points


def lstsq(rows: list[list[float]], ys: list[float], labels: list[str], names: tuple[str, ...]) -> dict[str, Any]:
    """Non-negative least squares (no cost is negative) weighted by 1/y (relative residuals: a 5 ms decode step
    counts as much as a 100 ms prefill)."""
    x, y = np.array(rows), np.array(ys)
    w = 1.0 / y
    coef, _ = nnls(x * w[:, None], y * w)
    pred = x @ coef
    rel = (pred - y) / y
    return {"coefficients": dict(zip(names, (float(c) for c in coef), strict=True)),
            "rms_rel_residual": float(np.sqrt(np.mean(rel ** 2))), "max_abs_rel_residual": float(np.max(np.abs(rel))),
            "points": [{"point": lab, "measured_s": float(m), "fitted_s": float(f), "rel_residual": float(r)}
                       for lab, m, f, r in zip(labels, y, pred, rel, strict=True)]}


# Two forms. Attention is priced by query-key pairs: a decoding sequence's one new token against its whole
# context; a prefill chunk of n tokens after s cached ones, n·s + n(n+1)/2 (causal). One price for every
# token and every pair, or prefill and decode priced apart (decode attention reads the KV cache one query at
# a time; a prefill chunk's attention is one batched matmul) with a price per prefill sequence in the step.
FORMS = {"single_slope": ("a", "b_token", "c_pair"),
         "split_slopes": ("a", "b_prefill_token", "b_decode_token", "c_prefill_pair", "c_decode_pair",
                          "d_prefill_seq")}


def prefill_pairs(tokens: int, start: int) -> float:
    """Query-key pairs of a causal prefill chunk of `tokens` after `start` tokens already in the KV cache."""
    return tokens * start + tokens * (tokens + 1) / 2


def features(form: str, prefill: float, decode: float, pre_pairs: float, dec_pairs: float) -> list[float]:
    """A step's features for a form; `prefill` tokens belong to one sequence (all the calibration has)."""
    if form == "single_slope":
        return [1.0, prefill + decode, pre_pairs + dec_pairs]
    return [1.0, prefill, decode, pre_pairs, dec_pairs, 1.0 if prefill else 0.0]


def fit_step_time(prefill: list[dict[str, Any]], decode: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Fit step time on what a step holds, two targets × two forms (FORMS), least squares weighted by 1/time.

    - period: the time from one step to the next as the engine runs them (what a virtual clock advances):
      vLLM's prefill time for prompts within the budget (one step), the streams' time per token for decode
      batches. The chunked prefills (several steps) are held out and predicted chunk by chunk.
    - model: the step log's model time per step: every prefill chunk (its tokens, its context) and the decode
      batches. The period minus the model time is the engine's per-step overhead (scheduling, output
      processing, hand-off to the API server).
    """
    out: dict[str, Any] = {"features": "prefill tokens, decode tokens (one per decoding sequence), attention "
                                       "query-key pairs (prefill chunk n after s: n·s + n(n+1)/2; decode: the "
                                       "sequence's context)", "weights": "1/step (relative residuals)"}
    for target in ("period", "model"):
        rows: dict[str, list[list[float]]] = {f: [] for f in FORMS}
        ys: list[float] = []
        labels: list[str] = []
        points: list[tuple[str, float | None, float, float, float, float]] = []
        for p in prefill:
            if target == "period" and p["chunks"] == 1:
                n = p["prompt_tokens"]
                points.append((f"prefill P={n}", p["prefill_s"], n, 0, prefill_pairs(n, 0), 0))
            if target == "model":
                for i, c in enumerate(p["chunk_model_s"]):
                    points.append((f"prefill P={p['prompt_tokens']} chunk {i + 1}", c["model_s"], c["tokens"], 0,
                                   prefill_pairs(c["tokens"], c["context"] - c["tokens"]), 0))
        for d in decode:
            points.append((f"decode B={d['batch']} ctx/seq={d['context_tokens_per_seq']:.0f}",
                           d["itl_span_s"] if target == "period" else d["model_s"], 0, d["batch"], 0,
                           d["batch"] * d["context_tokens_per_seq"]))
        for label, y, pre, dec, pp, dp in points:
            if y is None:
                continue
            for f in FORMS:
                rows[f].append(features(f, pre, dec, pp, dp))
            ys.append(y)
            labels.append(label)
        forms = {}
        for f, names in FORMS.items():
            fitted = lstsq(rows[f], ys, labels, names)
            if target == "period":
                coef = list(fitted["coefficients"].values())
                held = []
                for p in prefill:
                    if p["chunks"] > 1 and p["chunk_model_s"]:
                        pred = sum(float(np.dot(coef, features(f, c["tokens"], 0, prefill_pairs(
                            c["tokens"], c["context"] - c["tokens"]), 0))) for c in p["chunk_model_s"])
                        held.append({"prompt_tokens": p["prompt_tokens"], "chunks": p["chunks"],
                                     "measured_s": p["prefill_s"], "predicted_s": pred,
                                     "rel_error": pred / p["prefill_s"] - 1})
                fitted["held_out_chunked_prefills"] = held
            forms[f] = fitted
        out[target] = {"forms": forms, "best": min(forms, key=lambda k: forms[k]["rms_rel_residual"])}
    overhead = [d["itl_span_s"] - d["model_s"] for d in decode if d["model_s"] is not None]
    overhead += [p["prefill_s"] - p["model_s"] for p in prefill if p["chunks"] == 1 and p["model_s"] is not None]
    out["overhead_s_median"] = median(overhead) if overhead else None
    return out


# ------------------------------------------------------------------------------------------------- grid

WORKLOADS = {
    "prefill_heavy": {"prompt_tokens": 1024, "output_tokens": 64, "shared_prefix_tokens": 0},
    "decode_heavy": {"prompt_tokens": 64, "output_tokens": 256, "shared_prefix_tokens": 0},
    "shared_prefix": {"prompt_tokens": 1024, "output_tokens": 64, "shared_prefix_tokens": 768},
}


async def closed_loop(url: str, prompts: Prompts, concurrency: int, total: int, prompt_len: int, output: int,
                      shared: list[int] | None) -> list[Request]:
    """C clients, each sending its next request when its last one ends, `total` requests in all."""
    left = total
    done: list[Request] = []

    async def client(s: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            done.append(await stream(s, url, prompts.ids(prompt_len, shared), output))

    async with session(concurrency) as s:
        await asyncio.gather(*(client(s) for _ in range(concurrency)))
    return done


def run_level(url: str, log: StepLog, prompts: Prompts, workload: str, concurrency: int, measured: int,
              budget: int) -> dict[str, Any]:
    spec = WORKLOADS[workload]
    shared = prompts.ids(spec["shared_prefix_tokens"]) if spec["shared_prefix_tokens"] else None
    load0, wait0, cpu0 = load(), runqueue_wait_s(), time.process_time()
    before, mark = scrape(url), log.mark()
    t0 = time.perf_counter()
    with GaugeSampler(url) as gauges:
        reqs = asyncio.run(closed_loop(url, prompts, concurrency, concurrency + measured, spec["prompt_tokens"],
                                       spec["output_tokens"], shared))
    t1 = time.perf_counter()
    wait1, cpu1 = runqueue_wait_s(), time.process_time()
    after = wait_idle(url, before.get("vllm:request_success_total", 0.0), len(reqs))
    steps = log.since(mark)
    reqs.sort(key=lambda r: r.start)
    for r in reqs[:concurrency]:
        r.warmup = True
    bad = [r.error for r in reqs if not r.ok]
    timed = [r for r in reqs if not r.warmup and r.ok]
    window_start = min(r.start for r in timed)
    window_end = max(r.end for r in timed)
    ttfts = [r.ttft for r in timed if r.ttft is not None]
    gaps = [g for r in timed for g, _ in r.token_gaps()]
    tpots = [t for r in timed if (t := r.tpot) is not None]
    out_tokens = sum(r.output_tokens for r in timed)
    chunks = sum(len(r.chunks) for r in timed)
    server = server_deltas(before, after)
    level = {
        "workload": workload, **spec, "concurrency": concurrency, "warmup_requests": concurrency,
        "measured_requests": measured, "completed": len(timed), "failed": len(bad), "errors": bad[:5],
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p90_s": percentile(ttfts, 90),
        "ttft_mean_s": sum(ttfts) / len(ttfts),
        "itl_p50_s": percentile(gaps, 50), "itl_p90_s": percentile(gaps, 90),
        "burst_gap_share": sum(g < 1e-3 for g in gaps) / len(gaps),
        "tpot_p50_s": percentile(tpots, 50), "e2e_p50_s": percentile([r.end - r.start for r in timed], 50),
        "server_itl_mean_s": server["itl_hist"]["mean"] if server["itl_hist"] else None,
        "output_throughput_tok_s": out_tokens / (window_end - window_start),
        "request_throughput_req_s": len(timed) / (window_end - window_start),
        "measured_window_s": window_end - window_start, "wall_s": t1 - t0, "tokens_per_chunk": out_tokens / chunks,
        "load_before": load0, "load_after": load(),
        "client_cpu_wait_share": (wait1 - wait0) / (t1 - t0), "client_cpu_s": cpu1 - cpu0,
        "server": server, "gauges": gauges.summary(), "engine_steps": step_summary(steps, t1 - t0, budget),
        # Every engine step of the level (warm-up included), in order, from vLLM's step log.
        "step_trace": {"columns": ["prefill_requests", "prefill_tokens", "decode_tokens", "model_ms"],
                       "rows": [[s[1], s[2], s[4], s[5]] for s in steps]},
        "requests": [{"start_s": round(r.start - t0, 4), "ttft_s": r.ttft, "e2e_s": r.end - r.start,
                      "tpot_s": r.tpot, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                      "chunks": len(r.chunks), "warmup": r.warmup, "ok": r.ok} for r in reqs],
    }
    e = level["engine_steps"]
    print(f"  {workload:13} C={concurrency:2}: TTFT p50 {level['ttft_p50_s'] * 1e3:8.1f} p90 "
          f"{level['ttft_p90_s'] * 1e3:8.1f} ms  ITL p50 {level['itl_p50_s'] * 1e3:6.2f} (TPOT p50 "
          f"{level['tpot_p50_s'] * 1e3:6.2f}) ms  {level['output_throughput_tok_s']:7.1f} tok/s  {len(timed)}/{measured}"
          f" ok  wall {level['wall_s']:5.1f} s  steps {e['steps']}  hits {server['prefix_cache_hit_ratio'] or 0:.2f}  "
          f"preempt {server['num_preemptions_total']:.0f}  load {load0[0]}→{level['load_after'][0]}  "
          f"cpu-wait {level['client_cpu_wait_share']:.0%}")
    return level


# ----------------------------------------------------------------------------------------------- server

def server_config(url: str, log: str) -> dict[str, Any]:
    """What the server says about itself: /version, `vllm:cache_config_info` labels, the log's config lines."""
    config: dict[str, Any] = {}
    with urllib.request.urlopen(f"{url}/version", timeout=10) as reply:
        config["version"] = json.loads(reply.read())
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("vllm:cache_config_info{"):
                config["cache_config_info"] = dict(re.findall(r'(\w+)="([^"]*)"', line))
    keep = ("non-default args", "with config", "KV cache", "kv cache", "Maximum concurrency", "chunked prefill",
            "Chunked prefill", "prefix caching", "block_size", "block size", "max_num_batched_tokens",
            "OMP", "threads", "Automatically", "scheduler", "Scheduler", "backend", "Backend", "dtype")
    config["log_lines"] = [re.sub(r"^\S+ \S+ \S+ \[[^]]*\] ", "", line.strip()) for line in log.splitlines()
                           if any(k in line for k in keep)][:60]
    config["metric_families"] = metric_names(url)
    return config


def vllm_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('vllm-cpu', 'torch', 'transformers')}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-500:]}


RESOLVED_CONFIG = """
import dataclasses, json, sys
from vllm.engine.arg_utils import EngineArgs
config = EngineArgs(**json.loads(sys.argv[1])).create_engine_config()
print("CONFIG " + json.dumps({part: {f.name: repr(getattr(getattr(config, part), f.name))
                                     for f in dataclasses.fields(getattr(config, part))}
                              for part in ("scheduler_config", "cache_config")}))
"""


def resolved_config(python: Path, engine_args: dict[str, Any]) -> dict[str, Any]:
    """vLLM's scheduler and cache config as its own EngineArgs resolve them for these arguments (the policy,
    long-prefill threshold, async scheduling and the like, which the server's log does not print)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    done = subprocess.run([str(python), "-c", RESOLVED_CONFIG, json.dumps(engine_args)], capture_output=True,
                          text=True, timeout=300, check=False, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("CONFIG ")), None)
    return json.loads(line[7:]) if line else {"error": (done.stderr or done.stdout)[-1000:]}


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform(),
            "python": platform.python_version(), "mem_total_gib": round(
                int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                         if line.startswith("MemTotal"))) / 2**20, 1)}


NUMBER_LIST = re.compile(r"\[(?:\s*(?:-?[\d.eE+-]+|null|true|false|NaN|-?Infinity),?)+\s*\]")


def compact_json(obj: Any) -> str:
    """JSON indented, but each list of plain numbers on one line (the step traces would fill pages)."""
    text = json.dumps(obj, indent=1)
    return NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(0)[1:-1].split(",")) + "]", text)


def print_fit(fit: dict[str, Any]) -> None:
    for target in ("period", "model"):
        print(f"  step {target} fit ({'step to step' if target == 'period' else 'model time per step, step log'}):")
        for name, form in fit[target]["forms"].items():
            coef = "  ".join(f"{k}={v * 1e3:.4g} ms" if k in ("a", "d_prefill_seq") else f"{k}={v * 1e6:.4g} µs"
                             if "token" in k else f"{k}={v * 1e9:.4g} ns" for k, v in form["coefficients"].items())
            print(f"   {name}{' (best)' if name == fit[target]['best'] else ''}: {coef}; rms rel residual "
                  f"{form['rms_rel_residual']:.1%}, max {form['max_abs_rel_residual']:.1%}")
            if name != fit[target]["best"]:
                continue
            for p in form["points"]:
                print(f"     {p['point']:34} measured {p['measured_s'] * 1e3:7.2f} fitted {p['fitted_s'] * 1e3:7.2f}"
                      f" ms ({p['rel_residual']:+.1%})")
            for c in form.get("held_out_chunked_prefills", []):
                print(f"     held out: prefill P={c['prompt_tokens']} in {c['chunks']} chunks: measured "
                      f"{c['measured_s'] * 1e3:7.2f} predicted {c['predicted_s'] * 1e3:7.2f} ms ({c['rel_error']:+.1%})")
    if fit["overhead_s_median"] is not None:
        print(f"  per-step overhead (period − model time), median over points: {fit['overhead_s_median'] * 1e3:.2f} ms")


def print_grid(levels: list[dict[str, Any]]) -> None:
    print("workload        C  done  TTFT p50   p90 ms  ITL p50  TPOT p50 ms  out tok/s  wall s  steps  mixed  "
          "hit ratio  preempt  max run/wait  load 1m  cpu-wait")
    for lv in levels:
        s, g, e = lv["server"], lv["gauges"], lv["engine_steps"]
        print(f"{lv['workload']:14} {lv['concurrency']:2} {lv['completed']:5}  {lv['ttft_p50_s'] * 1e3:8.1f} "
              f"{lv['ttft_p90_s'] * 1e3:8.1f}  {lv['itl_p50_s'] * 1e3:7.2f}  {lv['tpot_p50_s'] * 1e3:11.2f}  "
              f"{lv['output_throughput_tok_s']:9.1f}  {lv['wall_s']:6.1f}  {e['steps']:5}  {e.get('steps_mixed', 0):5}"
              f"  {s['prefix_cache_hit_ratio'] or 0:9.3f}  {s['num_preemptions_total']:7.0f}  "
              f"{g['max_num_requests_running'] or 0:5.0f}/{g['max_num_requests_waiting'] or 0:<5.0f}  "
              f"{lv['load_before'][0]:7.2f}  {lv['client_cpu_wait_share']:7.0%}")


SUMMARY_KEYS = ("ttft_p50_s", "ttft_p90_s", "itl_p50_s", "tpot_p50_s", "output_throughput_tok_s", "wall_s",
                "client_cpu_wait_share")


def grid_summary(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload and concurrency: the median over the grid's passes of each figure, and its min and max."""
    out = []
    for key in dict.fromkeys((lv["workload"], lv["concurrency"]) for lv in levels):
        runs = [lv for lv in levels if (lv["workload"], lv["concurrency"]) == key]
        row: dict[str, Any] = {"workload": key[0], "concurrency": key[1], "passes": len(runs),
                               "completed": sum(lv["completed"] for lv in runs),
                               "load_1m": [lv["load_before"][0] for lv in runs],
                               "engine_steps": [lv["engine_steps"]["steps"] for lv in runs],
                               "prefix_cache_hit_ratio": [lv["server"]["prefix_cache_hit_ratio"] for lv in runs],
                               "preemptions": sum(lv["server"]["num_preemptions_total"] for lv in runs)}
        for k in SUMMARY_KEYS:
            values = [lv[k] for lv in runs if lv[k] is not None]
            row[k] = median(values) if values else None
            row[k + "_range"] = [min(values), max(values)] if values else None
        out.append(row)
    return out


def print_summary(rows: list[dict[str, Any]]) -> None:
    print("median over passes [min–max]")
    print("workload        C  TTFT p50 ms           TTFT p90 ms           ITL p50 ms         TPOT p50 ms"
          "         out tok/s              hits   preempt  load 1m")
    def cell(r: dict[str, Any], k: str, scale: float = 1e3, width: int = 7) -> str:
        lo, hi = r[k + "_range"]
        return f"{r[k] * scale:{width}.1f} [{lo * scale:.1f}–{hi * scale:.1f}]".ljust(21)

    for r in rows:
        hits = r["prefix_cache_hit_ratio"][0]
        print(f"{r['workload']:14} {r['concurrency']:2}  {cell(r, 'ttft_p50_s')} {cell(r, 'ttft_p90_s')} "
              f"{cell(r, 'itl_p50_s', width=5)} {cell(r, 'tpot_p50_s', width=5)} {cell(r, 'output_throughput_tok_s', 1)}"
              f" {hits or 0:5.3f}  {r['preemptions']:5.0f}  {'/'.join(f'{x:.2f}' for x in r['load_1m'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("calibration", "grid"), help="run one part (default: both)")
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--block-size", type=int, default=128,
                        help="the CPU build's own default; its kernels need a multiple of 32")
    parser.add_argument("--no-step-log", action="store_true",
                        help="without --enable-logging-iteration-details (no per-step model times)")
    parser.add_argument("--extra-server-args", default="", help="more `vllm serve` flags, space separated")
    parser.add_argument("--prefill-lengths", default="16,32,64,128,192,256,384,512,768,1024,1536")
    parser.add_argument("--decode-batches", default="1,2,4,8,16,32")
    parser.add_argument("--decode-output", type=int, default=128, help="output tokens of the decode points")
    parser.add_argument("--context-lengths", default="512,1024,1536", help="prompt tokens of the context points")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each calibration point")
    parser.add_argument("--concurrency", default="1,4,16,32")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--grid-repeats", type=int, default=2, help="passes over the whole grid")
    parser.add_argument("--requests-per-client", type=int, default=4, help="measured requests per level: this × C…")
    parser.add_argument("--min-requests", type=int, default=16, help="… and at least this many")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few points, short levels")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()

    def ints(text: str) -> list[int]:
        return [int(v) for v in text.split(",") if v]

    if args.quick:
        args.prefill_lengths, args.decode_batches, args.context_lengths = "64,512,1024", "1,8", "1024"
        args.repeats, args.concurrency, args.min_requests, args.requests_per_client = 1, "1,8", 4, 1
        args.grid_repeats = 1

    from vllm_server import VllmServer, build_tiny_model, vllm_python

    flags = ["--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
             "--block-size", str(args.block_size), *([] if args.no_step_log else ["--enable-logging-iteration-details"]),
             *args.extra_server_args.split()]
    budget = args.max_num_batched_tokens
    result: dict[str, Any] = {
        "what": "vLLM V1 (CPU build) scheduler measurements for the sagellm simulation: step-time calibration "
                "and a closed-loop grid; see benchmarks/data/vllm_cpu.md",
        "command": " ".join(sys.argv), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(), "load_at_start": load(), "versions": vllm_versions(vllm_python()),
        "workloads": WORKLOADS, "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="sagellm-tiny-") as tmp:
        model = build_tiny_model(Path(tmp))
        vocab = json.loads((model / "config.json").read_text())["vocab_size"]
        result["resolved_config"] = resolved_config(vllm_python(), {
            "model": str(model), "max_model_len": args.max_model_len, "dtype": "float32", "enforce_eager": True,
            "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": budget, "block_size": args.block_size})
        sched = result["resolved_config"].get("scheduler_config", {})
        print("scheduler: " + ", ".join(f"{k}={sched.get(k)}" for k in (
            "policy", "enable_chunked_prefill", "long_prefill_token_threshold", "async_scheduling",
            "stream_interval", "scheduler_reserve_full_isl")))
        server = VllmServer(model, served_name=SERVED, max_model_len=args.max_model_len, lifetime_s=3600,
                            extra_args=tuple(flags))
        with server:
            log_path = server._log  # the server's stdout and stderr (VllmServer deletes it on stop)
            log = StepLog(None if args.no_step_log else log_path)
            url = server.url
            result["server"] = {
                "flags": ["--max-model-len", str(args.max_model_len), "--dtype", "float32", "--enforce-eager", *flags],
                "env": {"VLLM_CPU_KVCACHE_SPACE": "1 (GiB, set by tests/vllm_server.py)"},
                "startup_s": server.startup_s, "model": json.loads((model / "config.json").read_text()),
                **server_config(url, log_path.read_text(errors="replace") if log_path else "")}
            print(f"vLLM {result['server']['version']} at {url}, started in {server.startup_s:.0f} s")
            for line in result["server"]["log_lines"]:
                if "non-default args" in line or "Chunked prefill" in line or "KV cache size" in line:
                    print("  " + line[:300])
            # Warm-up, not recorded: the first requests of a fresh server are slower (lazy initialisation).
            warm = Prompts(vocab, args.seed - 1)
            calibrate_prefill(url, StepLog(None), warm, [budget], 2, budget)
            calibrate_decode(url, StepLog(None), warm, [4], 16, 32, 1, "warm-up")
            if args.only in (None, "calibration"):
                prompts = Prompts(vocab, args.seed)
                print(f"calibration (load average {load()})")
                t0 = time.perf_counter()
                prefill = calibrate_prefill(url, log, prompts, ints(args.prefill_lengths), args.repeats, budget)
                decode = calibrate_decode(url, log, prompts, ints(args.decode_batches), 16, args.decode_output,
                                          args.repeats, "decode")
                context = [point for b in (1, 8) for p in ints(args.context_lengths) if p + 64 <= args.max_model_len
                           for point in calibrate_decode(url, log, prompts, [b], p, 64, args.repeats, "context")]
                fit = fit_step_time(prefill, decode + context, budget)
                result["calibration"] = {"prefill": prefill, "decode": decode, "context": context, "fit": fit,
                                         "wall_s": time.perf_counter() - t0, "load_after": load()}
                print_fit(fit)
            if args.only in (None, "grid"):
                prompts = Prompts(vocab, args.seed + 1)
                levels = []
                t0 = time.perf_counter()
                for repeat in range(args.grid_repeats):
                    print(f"grid pass {repeat + 1} of {args.grid_repeats} (load average {load()})")
                    for workload in args.workloads.split(","):
                        for c in ints(args.concurrency):
                            measured = max(args.min_requests, args.requests_per_client * c)
                            levels.append({"repeat": repeat + 1,
                                           **run_level(url, log, prompts, workload, c, measured, budget)})
                result["grid"] = {"protocol": "closed loop: C clients; C warm-up requests (the first C started) "
                                              "then N = max(min_requests, requests_per_client × C) measured; "
                                              "window = first measured start → last measured end; ITL = per-token "
                                              "gaps (a chunk of k tokens gives k gaps of its gap/k)",
                                  "min_requests": args.min_requests, "requests_per_client": args.requests_per_client,
                                  "summary": grid_summary(levels), "levels": levels,
                                  "wall_s": time.perf_counter() - t0}
                print_grid(levels)
                print_summary(result["grid"]["summary"])
            result["server"]["final_counters"] = {k: v for k, v in scrape(url).items() if k in COUNTERS}
    result["load_at_end"] = load()
    result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(compact_json(result) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

"""How late the client sees the first token: client-side TTFT stamp minus the packet's time on the wire.

Run (from the repository root, as root, with tcpdump installed: `apt-get install tcpdump`):

    .venv/bin/python benchmarks/first_token_wire.py                   # starts the tiny vLLM (tests/vllm_server.py)
    .venv/bin/python benchmarks/first_token_wire.py --url http://127.0.0.1:8000 --model NAME   # your server
    .venv/bin/python benchmarks/first_token_wire.py --json out.json --levels 1,4,16

It captures the server port on the loopback interface with tcpdump (nanosecond stamps) while
the bench's own OpenAI transport sends closed-loop requests at each level. Per request it pairs
- the wire time: the first packet of the response that carries a `data:` event (the first token), and
- the client time: when the transport stamped the first token (`started + ttft_s`, perf_counter),
matched by the request's local TCP port (aiohttp trace hook) and its order on that connection. Pcap
stamps are CLOCK_REALTIME and the client's CLOCK_MONOTONIC: the offset is read before and after each
level and interpolated. The target: the client sees the first token within 1 ms (p50) and 20 ms (p99)
of its arrival on the wire.

Besides the gap it reports the client's own CPU picture per level, to tell our code from the machine:
its run-queue wait (/proc/self/schedstat: time runnable but not running, i.e. CPU taken by others) and
its event-loop lag (lateness of a 10 ms timer).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sagellm.bench.client.transports import COMPLETIONS, HttpTransport
from sagellm.emulator import make_prompt
from sagellm.results.summary import percentile

TARGET_P50_MS, TARGET_P99_MS = 1.0, 20.0
_port: contextvars.ContextVar[list[int]] = contextvars.ContextVar("port")


@dataclass
class Sent:
    """One request as the client saw it."""

    port: int
    started: float  # perf_counter
    first_token: float  # perf_counter
    ok: bool
    events: int  # token events received


@dataclass
class LevelFigures:
    """What one level measured."""

    concurrency: int
    requests: int
    matched: int
    gap_p50_ms: float | None
    gap_p90_ms: float | None
    gap_p99_ms: float | None
    gap_max_ms: float | None
    send_p50_ms: float | None  # client start of the request → its first packet on the wire
    send_p99_ms: float | None
    wire_ttft_p50_ms: float | None  # the request's packet → the first token's packet (the server's share)
    runqueue_wait_ms_per_s: float  # the client's time runnable but waiting for a CPU, per second of level
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_us_per_event: float  # the client's CPU time per token event received (all its work, per event)


def realtime_minus_monotonic() -> float:
    """CLOCK_REALTIME − perf_counter(), read as tightly as possible (best of 50 bracketed reads)."""
    best = (float("inf"), 0.0)
    for _ in range(50):
        a = time.perf_counter()
        r = time.time()
        b = time.perf_counter()
        best = min(best, (b - a, r - (a + b) / 2))
    return best[1]


def schedstat_wait_s() -> float:
    """This process's total run-queue wait so far (all threads' main one: the event loop's)."""
    return int(Path("/proc/self/schedstat").read_text().split()[1]) / 1e9


@dataclass
class Exchange:
    """One request/response on the wire (epoch seconds)."""

    request: float  # the request's first packet (client → server)
    first_token: float | None = None  # the response's first packet carrying a `data:` event


def read_pcap(path: Path, server_port: int) -> dict[int, list[Exchange]]:
    """Per client port, in order: when each request went out and when its first token came back."""
    raw = path.read_bytes()
    magic = struct.unpack("<I", raw[:4])[0]
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    linktype = struct.unpack("<I", raw[20:24])[0]
    link = {1: 14, 113: 16, 276: 20}[linktype]  # Ethernet (lo), Linux cooked v1 and v2 (any)
    out: dict[int, list[Exchange]] = defaultdict(list)
    waiting: dict[int, bool] = {}  # port → a response has started and its first data packet not yet seen
    pos = 24
    while pos + 16 <= len(raw):
        sec, frac, incl, _ = struct.unpack("<IIII", raw[pos:pos + 16])
        frame = raw[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        ip = frame[link:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        tcp = ip[(ip[0] & 0xF) * 4:]
        src, dst = struct.unpack("!HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4:]
        stamp = sec + frac * scale
        if dst == server_port and payload.startswith(b"POST "):
            out[src].append(Exchange(stamp))
        elif src == server_port:
            if payload.startswith(b"HTTP/1.1 "):
                waiting[dst] = True
            if waiting.get(dst) and b"data:" in payload and out[dst]:
                waiting[dst] = False
                out[dst][-1].first_token = stamp
    return out


async def run_level(url: str, model: str, concurrency: int, requests: int, prompt: str,
                    output_tokens: int) -> tuple[list[Sent], list[float]]:
    """Closed loop through the bench's OpenAI transport, recording each request's local port."""
    transport = HttpTransport(url, COMPLETIONS, model)

    async def on_request_end(session: Any, ctx: Any, params: aiohttp.TraceRequestEndParams) -> None:
        conn = params.response.connection
        if conn is not None and conn.transport is not None:
            _port.get().append(conn.transport.get_extra_info("sockname")[1])

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_request_end)
    sent: list[Sent] = []
    lags: list[float] = []
    left = requests

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            ports: list[int] = []
            _port.set(ports)
            out = await transport.send(session, prompt, output_tokens)
            first = out.started + out.ttft_s if out.ttft_s is not None else float("nan")
            sent.append(Sent(ports[0] if ports else 0, out.started, first, out.ok, 1 + len(out.token_gaps_s)))

    async def lag_probe() -> None:
        while True:
            due = time.perf_counter() + 0.01
            await asyncio.sleep(0.01)
            lags.append(max(0.0, time.perf_counter() - due))

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace]) as session:
        probe = asyncio.create_task(lag_probe())
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        probe.cancel()
    return sent, lags


def measure(url: str, model: str, levels: list[int], per_worker: int, input_tokens: int,
            output_tokens: int) -> list[LevelFigures]:
    """Capture the loopback while each level runs; pair every first token with its packet."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    prompt = make_prompt(input_tokens)
    figures = []
    with tempfile.TemporaryDirectory(prefix="sagellm-wire-") as tmp:
        for c in levels:
            pcap = Path(tmp) / f"c{c}.pcap"
            dump = subprocess.Popen(["tcpdump", "-i", "lo", "-w", str(pcap), "-U", "-s", "2048",
                                     "--time-stamp-precision=nano", f"tcp port {port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # tcpdump prints "listening" only to a tty; give it time to attach
            asyncio.run(run_level(url, model, c, c, prompt, output_tokens))  # warm-up: connections, caches
            offset0, wait0, t0 = realtime_minus_monotonic(), schedstat_wait_s(), time.perf_counter()
            cpu0 = time.process_time()
            sent, lags = asyncio.run(run_level(url, model, c, c * per_worker, prompt, output_tokens))
            cpu1 = time.process_time()
            offset1, wait1, t1 = realtime_minus_monotonic(), schedstat_wait_s(), time.perf_counter()
            time.sleep(0.5)
            dump.send_signal(signal.SIGINT)
            dump.wait(10)
            wire = read_pcap(pcap, port)
            gaps, sends, servers = [], [], []
            by_port: dict[int, list[Sent]] = defaultdict(list)
            for s in sorted(sent, key=lambda s: s.started):
                by_port[s.port].append(s)
            for p, requests in by_port.items():
                # The warm-up level ran first on other connections; this level's responses are the last ones.
                times = wire.get(p, [])[-len(requests):]
                for s, w in zip(requests, times, strict=False):
                    if not s.ok or w.first_token is None:
                        continue
                    offset = offset0 + (offset1 - offset0) * (s.started - t0) / (t1 - t0)
                    gaps.append((s.first_token + offset - w.first_token) * 1000)
                    sends.append((w.request - s.started - offset) * 1000)
                    servers.append((w.first_token - w.request) * 1000)
            lag_ms = [x * 1000 for x in lags]
            figures.append(LevelFigures(
                concurrency=c, requests=len(sent), matched=len(gaps), gap_p50_ms=percentile(gaps, 50),
                gap_p90_ms=percentile(gaps, 90), gap_p99_ms=percentile(gaps, 99),
                gap_max_ms=max(gaps) if gaps else None, send_p50_ms=percentile(sends, 50),
                send_p99_ms=percentile(sends, 99), wire_ttft_p50_ms=percentile(servers, 50),
                runqueue_wait_ms_per_s=(wait1 - wait0) * 1000 / (t1 - t0),
                loop_lag_p99_ms=percentile(lag_ms, 99), loop_lag_max_ms=max(lag_ms) if lag_ms else None,
                cpu_us_per_event=(cpu1 - cpu0) * 1e6 / max(1, sum(s.events for s in sent))))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an OpenAI-compatible server (default: start the tiny vLLM)")
    parser.add_argument("--model", default="tiny-llama", help="the served model name")
    parser.add_argument("--levels", default="1,4,16")
    parser.add_argument("--per-worker", type=int, default=8, help="requests per worker per level")
    parser.add_argument("--input-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if shutil.which("tcpdump") is None or os.geteuid() != 0:
        sys.exit("needs tcpdump and root: apt-get install tcpdump, then run as root")
    levels = [int(v) for v in args.levels.split(",")]

    def run(url: str) -> list[LevelFigures]:
        return measure(url, args.model, levels, args.per_worker, args.input_tokens, args.output_tokens)

    if args.url:
        figures = run(args.url)
    else:
        from vllm_server import VllmServer, build_tiny_model

        with tempfile.TemporaryDirectory(prefix="sagellm-tiny-") as tmp:
            model = build_tiny_model(Path(tmp))
            with VllmServer(model, served_name=args.model) as server:
                figures = run(server.url)
    print(f"first token: client stamp − wire time (target p50 ≤ {TARGET_P50_MS:g} ms, p99 ≤ {TARGET_P99_MS:g} ms)")
    print("level  matched   p50 ms   p90 ms   p99 ms   max ms  gap to target (p50/p99)  run-queue ms/s  "
          "loop lag p99/max ms  send p50/p99 ms  wire TTFT p50 ms  client CPU µs/event")
    for f in figures:
        gap50 = (f.gap_p50_ms or 0) - TARGET_P50_MS
        gap99 = (f.gap_p99_ms or 0) - TARGET_P99_MS
        print(f"{f.concurrency:>5}  {f.matched:>3}/{f.requests:<3}  {f.gap_p50_ms or 0:7.2f}  {f.gap_p90_ms or 0:7.2f}"
              f"  {f.gap_p99_ms or 0:7.2f}  {f.gap_max_ms or 0:7.2f}  {gap50:+8.2f} / {gap99:+8.2f}"
              f"  {f.runqueue_wait_ms_per_s:14.1f}  {f.loop_lag_p99_ms or 0:7.2f} / {f.loop_lag_max_ms or 0:7.2f}"
              f"  {f.send_p50_ms or 0:6.2f} / {f.send_p99_ms or 0:6.2f}  {f.wire_ttft_p50_ms or 0:8.2f}"
              f"  {f.cpu_us_per_event:8.0f}")
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2))


if __name__ == "__main__":
    main()

"""The load generator's overhead as a user sees it: per request, the client's TTFT minus the server's own
first-token time, every request counted (connection set-up and warm-up included), the throughput ratio, and how
far it scales (one process, worker processes, Ray). The project's one method for the load generator's overhead.

Run (from the repository root; about 10 s a run at the defaults, on 2 cores):

    .venv/bin/python benchmarks/user_overhead.py                          # 512 streams: 1 process and --workers 2
    .venv/bin/python benchmarks/user_overhead.py --workers 1 --repeats 5 --json out.json
    .venv/bin/python benchmarks/user_overhead.py --spawn-rate 0           # every stream's first send at once
    .venv/bin/python benchmarks/user_overhead.py --streams 64,128,256,512,1024 --workers 1,2 --ray --repeats 1

The server is `tests/pacing_server.py` in a child process of its own, started afresh for every run (no connection
or log carried over): TGI's /generate_stream, the first token `--ttft-ms` after the request arrived, then one
token every `--itl-ms` (exact pacing, chained on deadlines), each write time and each arrival logged on the
server's time.perf_counter() (on one machine the same CLOCK_MONOTONIC as the bench's). Each run is one closed-loop
level of `--streams` streams, `--tokens` prompt words in and tokens out, sent by the bench's own load path: the
TGI `HttpTransport` through `run_level` (one process) or `run_shared_level` on a `ProcessPool` (`--workers N`) or
a local Ray cluster's actors (`--ray`); each stream sends `--warmup` warm-up requests, then
`--requests-per-stream` measured ones, its first send at the bench's spawn rate (`--spawn-rate`, the bench's
default; 0: all at once). The pool's processes are started before the clock (as `sagellm bench` starts them
before its first level); the connections are not: each stream opens its own inside the measured time, as a
user's first request does.

Per run:
- **overhead** (the figure of issue 44): for every request (warm-up included; matched to the server's log by its
  unique prompt), client TTFT − server TTFT, where client TTFT is the bench's record (send → the chunk holding the
  first token) and server TTFT is arrival → first write on the server. p50 / p99 over every request; a failed
  request is counted as an error;
- its two halves: **send** (the server's arrival − the client's send: connection set-up, the request's write, the
  server's accept) and **read** (the client's first-token read − the server's first write: loopback, the client's
  event loop); overhead = send + read. (The read half alone, of measured requests only, is what the retired
  `benchmarks/scaling.py` called the TTFT overhead: docs/load.md);
- **ratio**: the bench's own throughput (its output tokens in its measured window ÷ the window) ÷ the server's
  own count (every token it wrote in that window, on its clock) ÷ the same window, and the window's length (the
  client's read lag at the window's edges biases the ratio by the lag difference ÷ the window: docs/load.md);
- the load average before the run, the client's event-loop lag (mean over the level), the client's CPU per
  request, the server's CPU share and CPU per request, and **wave**: the most requests sent within one ITL of
  one another (streams that stay in phase send in waves of all of them; spread, a few).
Then the medians over the repeats, per mode and level, each against the goal (`--goal-ms` in one process, `--workers-goal-ms` in several, p50/p99; throughput
within `--tolerance`) and, with more than one level, the highest token rate per mode that met it (what
`benchmarks/scaling.py` called the highest faithful token rate).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pacing_server import Served, pacing_server_process
from sagellm.bench.client.transports import TGI, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import SPAWN_RATE, Spawn, run_level
from sagellm.bench.load.coordinator import run_shared_level
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.pools import worker_pool
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import percentile


@dataclass
class Run:
    """One run of one mode and level: the figures of the module docstring (milliseconds)."""

    workers: int
    repeat: int
    loadavg: float  # 1-minute load average before the run
    requests: int
    errors: int
    unmatched: int  # records the server's log has no request for (should be 0)
    overhead_ms_p50: float
    overhead_ms_p99: float
    send_ms_p50: float
    send_ms_p99: float
    read_ms_p50: float
    read_ms_p99: float
    measured_overhead_ms_p50: float  # warm-up left out (what a window-only method sees)
    measured_overhead_ms_p99: float
    client_tokens_per_s: float
    server_tokens_per_s: float
    ratio: float | None
    window_s: float  # the bench's measured window: the ratio's edge bias shrinks as it grows
    client_loop_lag_ms: float | None
    client_cpu_ms_per_request: float  # the bench process and its worker processes, user + system
    server_cpu_share: float  # the pacing server's CPU time ÷ the level's wall time (1.0: one core kept busy)
    server_cpu_ms_per_request: float = 0.0
    peak_sends: int = 0  # the most requests sent within one ITL of each other: a wave (streams in phase)
    streams: int = 0
    mode: str = ""  # "1 process", "2 processes", "ray 2"


def _children() -> set[int]:
    """This process's child processes (the pacing server, the worker processes)."""
    me = os.getpid()
    return {int(p) for p in Path(f"/proc/{me}/task/{me}/children").read_text().split()}


def _cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one by default), from /proc."""
    fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ms(values: list[float], q: float) -> float:
    p = percentile(values, q)
    return float("nan") if p is None else p * 1000


def peak_sends(starts: list[float], within_s: float) -> int:
    """The most of `starts` (seconds) that fall within `within_s` of one another."""
    starts, most, first = sorted(starts), 0, 0
    for last, t in enumerate(starts):
        while t - starts[first] >= within_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def figures(level: LevelResult, zero: float, log: list[Served], work: Workload, workers: int, repeat: int,
            loadavg: float, cpu: tuple[float, float], itl_s: float = 0.02) -> Run:
    """A run's figures from the bench's level and the server's log (times on the one CLOCK_MONOTONIC)."""
    served = {s.prompt: s for s in log}
    over, send, read, measured_over = [], [], [], []
    unmatched = 0
    for r in level.records:
        s = served.get(work.request(r.request or 0).prompt)
        if s is None:
            unmatched += 1
            continue
        if not r.ok or r.ttft_s is None or not s.written_s:
            continue
        sent = zero + r.start_s
        over.append(r.ttft_s - s.ttft_s)
        send.append(s.arrived_s - sent)
        read.append(sent + r.ttft_s - s.written_s[0])
        if not r.warmup:
            measured_over.append(over[-1])
    a, b = zero + level.window_start_s, zero + level.window_end_s
    server_tokens = sum(a <= t <= b for s in log for t in s.written_s)  # one token per write at these settings
    server_rate = server_tokens / level.window_s if level.window_s > 0 else 0.0
    client_rate = level.throughput_tokens_per_s
    return Run(workers=workers, repeat=repeat, loadavg=loadavg, requests=len(level.records),
               errors=sum(not r.ok for r in level.records), unmatched=unmatched,
               overhead_ms_p50=_ms(over, 50), overhead_ms_p99=_ms(over, 99),
               send_ms_p50=_ms(send, 50), send_ms_p99=_ms(send, 99), read_ms_p50=_ms(read, 50),
               read_ms_p99=_ms(read, 99), measured_overhead_ms_p50=_ms(measured_over, 50),
               measured_overhead_ms_p99=_ms(measured_over, 99), client_tokens_per_s=client_rate,
               server_tokens_per_s=server_rate, ratio=client_rate / server_rate if server_rate else None,
               window_s=level.window_s,
               client_loop_lag_ms=level.loop_lag_ms, client_cpu_ms_per_request=cpu[0] * 1000 / len(level.records),
               server_cpu_share=cpu[1] / (level.ended_s - level.started_s),
               server_cpu_ms_per_request=cpu[1] * 1000 / len(level.records),
               peak_sends=peak_sends([r.start_s for r in level.records], itl_s))


def run_once(mode: Mode, streams: int, repeat: int, args: argparse.Namespace) -> Run:
    """One closed-loop level against a fresh pacing server, on `mode`'s processes (1: in this process)."""
    name, workers, ray = mode
    work = Workload(WorkloadOptions(seed=1000 + repeat), Payload(args.tokens, args.tokens))
    before = _children()
    with pacing_server_process(itl_s=args.itl_ms / 1000, ttft_s=args.ttft_ms / 1000) as remote:
        (server,) = _children() - before
        transport = HttpTransport(remote.url, TGI)
        with worker_pool(workers if workers > 1 or ray else 1, transport, work, "auto" if ray else None) as pool:
            helpers = _children() - before - {server}  # Ray's actors are not this process's children: not counted
            loadavg = float(Path("/proc/loadavg").read_text().split()[0])
            cpu0 = _cpu_s() + sum(map(_cpu_s, helpers)), _cpu_s(server)
            records: list[RequestRecord] = []
            common = {"requests": streams * args.requests_per_stream, "duration_s": None, "warmup": args.warmup,
                      "workload": work, "on_record": records.append}
            spawn_rate = args.spawn_rate or None
            zero = time.perf_counter()
            level = asyncio.run(
                run_level(transport, concurrency=streams, clock_zero=zero, spawn=spawn_rate and Spawn(spawn_rate),
                          **common) if pool is None else
                run_shared_level(pool, load=streams, open_loop=None, workers=workers, clock_zero=zero,
                                 spawn_rate=spawn_rate, **common))
            cpu = _cpu_s() + sum(map(_cpu_s, helpers)) - cpu0[0], _cpu_s(server) - cpu0[1]
        run = figures(level, zero, remote.log(), work, workers, repeat, loadavg, cpu, args.itl_ms / 1000)
    return dataclasses.replace(run, streams=streams, mode=name)


Mode = tuple[str, int, bool]  # its name, worker processes (1: in the bench's process), on Ray


HEADER = (f"{'mode':>11} {'streams':>7} {'rep':>3} {'load':>5} {'reqs':>5} {'err':>3} {'overhead p50/p99':>17} "
          f"{'send p50/p99':>15} {'read p50/p99':>15} {'measured-only':>15} {'client tok/s':>12} "
          f"{'server tok/s':>12} {'ratio':>7} {'window':>6} {'lag ms':>6} {'cli cpu/req':>11} {'srv cpu':>7} "
          f"{'srv cpu/req':>11} {'wave':>5}")


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def row(r: Run) -> str:
    return (f"{r.mode:>11} {r.streams:>7} {r.repeat:>3} {r.loadavg:>5.2f} {r.requests:>5} {r.errors:>3} "
            f"{r.overhead_ms_p50:>8.1f}/{r.overhead_ms_p99:<8.1f} {r.send_ms_p50:>7.1f}/{r.send_ms_p99:<7.1f} "
            f"{r.read_ms_p50:>7.1f}/{r.read_ms_p99:<7.1f} "
            f"{r.measured_overhead_ms_p50:>7.1f}/{r.measured_overhead_ms_p99:<7.1f} "
            f"{r.client_tokens_per_s:>12.0f} {r.server_tokens_per_s:>12.0f} {_f(r.ratio, '7.4f'):>7} "
            f"{r.window_s:>6.2f} {_f(r.client_loop_lag_ms, '6.1f'):>6} {r.client_cpu_ms_per_request:>11.2f} "
            f"{r.server_cpu_share:>7.2f} {r.server_cpu_ms_per_request:>11.2f} {r.peak_sends:>5}")


MEDIAN_KEYS = ("loadavg", "overhead_ms_p50", "overhead_ms_p99", "send_ms_p50", "send_ms_p99", "read_ms_p50",
               "read_ms_p99", "measured_overhead_ms_p50", "measured_overhead_ms_p99", "client_tokens_per_s", "ratio",
               "window_s", "client_loop_lag_ms", "client_cpu_ms_per_request", "server_cpu_share",
               "server_cpu_ms_per_request", "peak_sends")


def medians(runs: list[Run]) -> dict[str, float | None]:
    """Each figure's median over the runs (None where no run had it), and the errors summed."""
    out: dict[str, float | None] = {}
    for key in MEDIAN_KEYS:
        values = [v for r in runs if (v := getattr(r, key)) is not None]
        out[key] = statistics.median(values) if values else None
    out["errors"] = sum(r.errors + r.unmatched for r in runs)
    return out


def _goal(text: str) -> tuple[float, float]:
    """A goal given as "p50,p99" in ms."""
    p50, p99 = (float(x) for x in text.split(","))
    return p50, p99


def meets(m: dict[str, float | None], goal: tuple[float, float], tolerance: float) -> bool:
    """Whether a mode's medians at a level meet the goal: overhead p50 and p99 within it, the throughput ratio
    within the tolerance, no error."""
    p50, p99, ratio = m["overhead_ms_p50"], m["overhead_ms_p99"], m["ratio"]
    return (p50 is not None and p99 is not None and ratio is not None and p50 <= goal[0] and p99 <= goal[1]
            and abs(ratio - 1) <= tolerance and not m["errors"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="512", help="closed-loop levels (streams), comma-separated")
    parser.add_argument("--workers", default="1,2", help="worker process counts, comma-separated (1: in-process)")
    parser.add_argument("--ray", action="store_true", help="also a local Ray cluster with 2 actors")
    parser.add_argument("--repeats", type=int, default=3, help="runs per mode and level, interleaved; medians")
    parser.add_argument("--tokens", type=int, default=128, help="prompt words in and tokens out per request")
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--warmup", type=int, default=1, help="warm-up requests per stream (counted here)")
    parser.add_argument("--requests-per-stream", type=int, default=1, help="measured requests per stream")
    parser.add_argument("--spawn-rate", type=float, default=SPAWN_RATE,
                        help="streams started a second (the bench's default); 0: every stream at once")
    parser.add_argument("--goal-ms", default="25,80", help="overhead p50,p99 a one-process level must stay within")
    parser.add_argument("--workers-goal-ms", default="15,50",
                        help="the same for several processes (issue 44: --workers 2 at or under 15 / 50 ms)")
    parser.add_argument("--tolerance", type=float, default=0.01, help="throughput ratio's allowed distance from 1")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.streams.split(",")]
    goals = {1: _goal(args.goal_ms), 2: _goal(args.workers_goal_ms)}  # by whether the load is in one process
    modes: list[Mode] = [(f"{n} process{'es' if n > 1 else ''}", n, False) for n in map(int, args.workers.split(","))]
    if args.ray:
        modes.append(("ray 2", 2, True))
    print(f"pacing server: TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms; {args.tokens} in / {args.tokens} out, "
          f"{args.warmup} warm-up + {args.requests_per_stream} measured per stream, spawn rate "
          f"{f'{args.spawn_rate:g}/s' if args.spawn_rate else 'off (all at once)'}; times in ms", flush=True)
    print(HEADER, flush=True)
    runs = []
    for repeat in range(args.repeats):
        for streams in levels:
            for mode in modes:
                runs.append(run_once(mode, streams, repeat, args))
                print(row(runs[-1]), flush=True)
    summary: dict[str, dict[int, dict[str, float | None]]] = {}
    print(f"\nmedians over the repeats (goal: overhead p50 / p99 ≤ {goals[1][0]:g} / {goals[1][1]:g} ms in one "
          f"process, {goals[2][0]:g} / {goals[2][1]:g} ms in several, throughput within {args.tolerance:.0%}, "
          "no error):")
    for name, processes, _ in modes:
        goal = goals[min(processes, 2)]
        summary[name] = {}
        for streams in levels:
            m = summary[name][streams] = medians([r for r in runs if r.mode == name and r.streams == streams])
            print(f"  {name}, {streams} streams: overhead p50 {_f(m['overhead_ms_p50'], '.1f')} / p99 "
                  f"{_f(m['overhead_ms_p99'], '.1f')} ms, ratio {_f(m['ratio'], '.4f')} over "
                  f"{_f(m['window_s'], '.2f')} s: {'meets' if meets(m, goal, args.tolerance) else 'misses'} the goal "
                  f"(load average {_f(m['loadavg'], '.2f')}; send {_f(m['send_ms_p50'], '.1f')}/"
                  f"{_f(m['send_ms_p99'], '.1f')}, read {_f(m['read_ms_p50'], '.1f')}/{_f(m['read_ms_p99'], '.1f')}, "
                  f"warm-up left out {_f(m['measured_overhead_ms_p50'], '.1f')}/"
                  f"{_f(m['measured_overhead_ms_p99'], '.1f')}; client CPU "
                  f"{_f(m['client_cpu_ms_per_request'], '.2f')} ms/request, server CPU "
                  f"{_f(m['server_cpu_share'], '.2f')} ({_f(m['server_cpu_ms_per_request'], '.2f')} ms/request); "
                  f"most sends within one ITL {_f(m['peak_sends'], '.0f')}; errors {m['errors']:g})")
    if len(levels) > 1:
        print("highest token rate that met the goal:")
        for (name, processes, _), by_level in zip(modes, summary.values(), strict=True):
            met = [(m["client_tokens_per_s"] or 0.0, streams) for streams, m in by_level.items()
                   if meets(m, goals[min(processes, 2)], args.tolerance)]
            top = max(met, default=None)
            print(f"  {name}: " + (f"{top[0]:,.0f} tok/s ({top[1]} streams)" if top else "no level met it"))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "runs": [asdict(r) for r in runs], "medians": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does the load generator scale out? The highest token rate it measures faithfully with 1 process, N worker
processes and a local Ray cluster, against a server whose own log is the ground truth.

Run (from the repository root; a few minutes on 2 cores; `--ray` needs `pip install 'sagellm[ray]'`):

    .venv/bin/python benchmarks/scaling.py                                # 1 process and 2 workers
    .venv/bin/python benchmarks/scaling.py --workers 1,2,4 --ray --json scaling.json
    .venv/bin/python benchmarks/scaling.py --levels 16,32,64,128 --itl-ms 2 --tokens 128

The server is `tests/pacing_server.py` in a child process (TGI's /generate_stream, one token per write every
`--itl-ms` after a 20 ms TTFT, each write time logged on its own time.perf_counter(), which on one machine
reads the same CLOCK_MONOTONIC as the bench). Each level is a closed loop of that many streams run by the
bench's own `run_level` (`run_shared_level` with `--workers`, on a `ProcessPool`; with `--ray`, on a `RayPool` of 2 actors
on a local cluster). Requests are matched to the server's log by prompt (unique per request). Per level:
- TTFT overhead: when the client saw the first token minus when the server wrote it, p50 and p99;
- throughput: the bench's output tokens in its measured window ÷ the window, against the server's own
  count of tokens written inside the same window (the ratio should be 1 within 1 %);
- faithful: TTFT overhead p50 ≤ `--max-overhead-ms` (1 ms) and throughput within `--tolerance` (1 %) and
  no error. The verdict per mode is the highest token rate among its faithful levels.
`benchmarks/load_overhead.py` is the one-process study against the emulator (its own timings in headers);
this one measures scaling against ground truth written by the server.
On a shared 2-core machine the server and the clients compete for the same cores: the figures are
limited and noisy (the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pacing_server import Remote, Served, pacing_server_process
from sagellm.bench.client.transports import TGI, HttpTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import run_level
from sagellm.bench.load.coordinator import run_shared_level
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.pools import worker_pool
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from sagellm.results.summary import percentile


@dataclass
class Figures:
    mode: str  # "1 process", "N processes", "ray N"
    streams: int
    requests: int
    errors: int
    client_tokens_per_s: float
    server_tokens_per_s: float
    throughput_ratio: float | None  # client ÷ server over the same window
    ttft_overhead_ms_p50: float | None
    ttft_overhead_ms_p99: float | None
    server_itl_ms_p50: float | None
    faithful: bool


def level_figures(mode: str, level: LevelResult, zero: float, served: dict[str, Served], work: Workload,
                  max_overhead_ms: float, tolerance: float) -> Figures:
    measured = level.measured
    over, itls = [], []
    for r in measured:
        s = served.get(work.request(r.request or 0).prompt)
        if r.ok and r.ttft_s is not None and s is not None and s.written_s:
            over.append(zero + r.start_s + r.ttft_s - s.written_s[0])
            if s.tokens > 1:
                itls.append(s.itl_s)
    a, b = zero + level.window_start_s, zero + level.window_end_s
    # The server's count: token writes (one token each) inside the bench's window, for this level's requests.
    server_tokens = sum(a <= t <= b for r in measured if (s := served.get(work.request(r.request or 0).prompt))
                        for t in s.written_s)
    server_rate = server_tokens / level.window_s if level.window_s > 0 else 0.0
    ratio = level.throughput_tokens_per_s / server_rate if server_rate else None
    p50, p99 = percentile(over, 50), percentile(over, 99)
    errors = sum(not r.ok for r in measured)
    faithful = (p50 is not None and p50 * 1000 <= max_overhead_ms and ratio is not None
                and abs(ratio - 1) <= tolerance and errors == 0)
    itl = percentile(itls, 50)
    return Figures(mode, level.concurrency or 0, len(measured), errors, level.throughput_tokens_per_s, server_rate,
                   ratio, None if p50 is None else p50 * 1000, None if p99 is None else p99 * 1000,
                   None if itl is None else itl * 1000, faithful)


def run_mode(mode: str, remote: Remote, streams: list[int], tokens: int, seed: int, workers: int,
             ray: bool, requests_per_stream: int, max_overhead_ms: float, tolerance: float) -> list[Figures]:
    work = Workload(WorkloadOptions(seed=seed), Payload(16, tokens))
    transport = HttpTransport(remote.url, TGI)
    out = []
    size = workers if workers > 1 or ray else 1
    with worker_pool(size, transport, work, "auto" if ray else None) as pool:
        for c in streams:
            records: list[RequestRecord] = []
            zero = time.perf_counter()
            common = {"requests": max(8, requests_per_stream * c), "duration_s": None, "warmup": 1,
                      "workload": work, "on_record": records.append, "clock_zero": zero}
            level = asyncio.run(run_level(transport, concurrency=c, **common) if pool is None else
                                run_shared_level(pool, load=c, open_loop=None, workers=size, **common))
            served = {s.prompt: s for s in remote.log()}
            fig = level_figures(mode, level, zero, served, work, max_overhead_ms, tolerance)
            print(row(fig), flush=True)
            out.append(fig)
    return out


HEADER = (f"{'mode':>12} {'streams':>7} {'reqs':>5} {'err':>3} {'client tok/s':>12} {'server tok/s':>12} "
          f"{'ratio':>7} {'TTFT ovh p50/p99 ms':>20} {'srv ITL':>7} {'faithful':>8}")


def _f(v: float | None, fmt: str) -> str:
    return format(v, fmt) if v is not None else "-"


def row(f: Figures) -> str:
    return (f"{f.mode:>12} {f.streams:>7} {f.requests:>5} {f.errors:>3} {f.client_tokens_per_s:>12.0f} "
            f"{f.server_tokens_per_s:>12.0f} {_f(f.throughput_ratio, '7.4f'):>7} "
            f"{_f(f.ttft_overhead_ms_p50, '.2f'):>9}/{_f(f.ttft_overhead_ms_p99, '.2f'):<10} "
            f"{_f(f.server_itl_ms_p50, '.2f'):>7} {('yes' if f.faithful else 'no'):>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="8,16,32,64,128", help="streams (closed-loop concurrency)")
    parser.add_argument("--workers", default="1,2", help="worker process counts to compare")
    parser.add_argument("--ray", action="store_true", help="also a local Ray cluster with 2 actors")
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--requests-per-stream", type=int, default=3)
    parser.add_argument("--max-overhead-ms", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    streams = [int(x) for x in args.levels.split(",")]
    modes = [(f"{n} process{'es' if n > 1 else ''}", n, False) for n in map(int, args.workers.split(","))]
    if args.ray:
        modes.append(("ray 2", 2, True))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    print(f"pacing server: ITL {args.itl_ms:g} ms, TTFT 20 ms, {args.tokens} tokens/request; "
          f"load average before: {' '.join(load_before)}", flush=True)
    print(HEADER, flush=True)
    rows: list[Figures] = []
    with pacing_server_process(itl_s=args.itl_ms / 1000, ttft_s=0.02) as remote:
        for seed, (mode, n, ray) in enumerate(modes):
            with contextlib.suppress(KeyboardInterrupt):
                rows += run_mode(mode, remote, streams, args.tokens, 100 + seed, n, ray, args.requests_per_stream,
                                 args.max_overhead_ms, args.tolerance)
    print(f"\nfaithful = TTFT overhead p50 ≤ {args.max_overhead_ms:g} ms, client throughput within "
          f"{args.tolerance:.0%} of the server's count over the same window, no errors")
    best = {}
    for mode, _, _ in modes:
        ok = [f for f in rows if f.mode == mode and f.faithful]
        top = max(ok, key=lambda f: f.client_tokens_per_s, default=None)
        best[mode] = top.client_tokens_per_s if top else None
        print(f"{mode:>12}: " + (f"highest faithful token rate {top.client_tokens_per_s:,.0f} tok/s "
                                 f"({top.streams} streams)" if top else "no level was faithful"))
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average after: {' '.join(load_after)}")
    if args.json:
        args.json.write_text(json.dumps({"itl_ms": args.itl_ms, "tokens": args.tokens, "levels": [asdict(f) for f in rows],
                                         "highest_faithful_tokens_per_s": best, "loadavg_before": load_before,
                                         "loadavg_after": load_after}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

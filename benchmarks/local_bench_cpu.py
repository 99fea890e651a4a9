"""CPU seconds one local bench costs, split by the processes it starts (the suite runs dozens of these).

Runs `sagellm bench` on the local target (a two-level sweep, as tests/bench_helpers.py's quick sweeps are) and
samples /proc every 0.2 s for it and every descendant: user + system CPU of each, grouped by what it is (the bench
itself, the CDK CLI, the CDK app's Python, its jsii Node, the emulator). CPU, not wall: it holds on a loaded
machine. Linux only. Prints each run and the medians.

    .venv/bin/python benchmarks/local_bench_cpu.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
SAGELLM = str(Path(sys.executable).parent / "sagellm")
BENCH = ["bench", "--profile", "max-throughput", "--model", "meta-llama/Llama-2-7b-hf", "--instance", "ml.g5.2xlarge",
         "--time-scale", "0.05", "--output-tokens", "32", "--concurrency", "1,4", "--warmup", "0",
         "--requests-per-level", "4"]
KINDS = ("bench", "CDK CLI", "CDK app (Python)", "jsii (Node)", "emulator", "other")


def kind(cmdline: list[str]) -> str:
    """What a process of the bench's tree is, from its command line."""
    line, program = " ".join(cmdline), " ".join(cmdline[:2])  # the interpreter and its script
    if "jsii-runtime" in line or "program.js" in line:
        return "jsii (Node)"
    if "aws-cdk" in program:  # before the app: the CLI's own arguments name it (--app)
        return "CDK CLI"
    if "sagellm.cdk_app" in line:
        return "CDK app (Python)"
    if "emulator" in line:
        return "emulator"
    if line.startswith(SAGELLM) or " bench " in line:
        return "bench"
    return "other"


def processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, start tick, CPU seconds) for every process now."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            out[int(entry)] = (int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def one_run(out: Path) -> dict[str, float]:
    """CPU seconds by kind for one bench (its last 0.2 s of each process may go unsampled)."""
    proc = subprocess.Popen([SAGELLM, *BENCH, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree, seen = {proc.pid}, {}  # (pid, start) -> [kind, cpu]
    while proc.poll() is None:
        now = processes()
        grew = True
        while grew:  # children first seen in this sample, then their children
            grew = False
            for pid, (parent, _, _) in now.items():
                if parent in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        for pid in tree & now.keys():
            key = (pid, now[pid][1])
            if key not in seen or seen[key][0] == "other":  # a fork is named once it has exec'd
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
                except OSError:
                    cmdline = []
                seen[key] = [kind([c for c in cmdline if c]), 0.0]
            seen[key][1] = now[pid][2]
        time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(f"the bench failed (exit {proc.returncode}); run it by hand: {SAGELLM} {' '.join(BENCH)}")
    totals = dict.fromkeys(KINDS, 0.0)
    for name, cpu in seen.values():
        totals[name] += cpu
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="sagellm-local-bench-cpu-") as scratch:
        for n in range(args.runs):
            runs.append(one_run(Path(scratch) / f"run{n}"))
            print(f"run {n + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()) +
                  f"; total {sum(runs[-1].values()):.1f} s", flush=True)
    print("median CPU seconds: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f}" for k in KINDS) +
          f"; total {statistics.median(sum(r.values()) for r in runs):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long `sagellm plan` and a whole-catalog `sagellm recommend` (every engine) take. Targets (issue 42): `plan`
under 0.5 s, `recommend` for Llama 3.1 8B at 2/s under 10 s, on a quiet 2-core machine.

`plan` (for --model on ml.g5.2xlarge, per engine): the command as a new process with its bytecode cached, as an
installed package runs (wall, the least of --runs), and inside one: importing the CLI and what the
command imports, then the command itself. `recommend`: a library call (`search` then `choose`, what the command runs
before writing its files) from an empty simulation cache (what one `sagellm recommend` costs), the least of --runs,
at 256 and 1,024 input tokens, as the command runs it (pruned: a candidate costing more than its engine's cheapest
that meets the SLO is not simulated) and with every candidate simulated (`--simulate-all`, or a peak or --verify);
with the candidates, how many were simulated, how many distinct simulations they took (candidates that run alike
share one: the same step times, limits and copies), the share of the time in the simulator, and the pick. On a
shared machine, read the least of several runs, and the CPU time beside the wall time (a process waiting for a
core does not count it).

    .venv/bin/python benchmarks/recommend_speed.py [--runs 3] [--model meta-llama/Llama-3.1-8B-Instruct] [--rate 2]
        [--ttft-p90 800] [--itl-p50 40] [--input-tokens 256,1024] [--output-tokens 256] [--plan-engines tgi,vllm,sglang,lmi]
        [--plan-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

from sagellm.catalog import find_model
from sagellm.planner import Payload
from sagellm.recommend import Load, Space, choose, instance_types, search
from sagellm.recommend import simulated as simulated_module
from sagellm.results.gate import Rule
from sagellm.results.schema import LevelSummary

PLAN = ["plan", "--profile", "max-throughput", "--instance", "ml.g5.2xlarge"]  # with --model and --engine
# Run in a new interpreter: the time to import the CLI and the command's own imports, then the command's.
IN_PROCESS = """
import contextlib, io, sys, time
start, start_cpu = time.perf_counter(), time.process_time()
from sagellm.cli import main
import sagellm.results.simulated, sagellm.profiles, sagellm.render, sagellm.bench.client.workload
imported, imported_cpu = time.perf_counter(), time.process_time()
sys.argv = ["sagellm", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
print(imported - start, time.perf_counter() - imported, imported_cpu - start_cpu, time.process_time() - imported_cpu)
"""


def _installed_env(pycache: str) -> dict[str, str]:
    """The environment of a `sagellm` as installed: its modules' bytecode written once and read after (pip writes it
    at install; PYTHONDONTWRITEBYTECODE, set on some machines, would make every run compile every module again:
    about 0.13 s of CPU on a 2-core machine)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": pycache}


def time_plan(runs: int, model: str, engine: str) -> None:
    """`sagellm plan` as a user runs it, and split inside one process."""
    argv = [*PLAN, "--model", model, "--engine", engine]
    walls, cpus, splits = [], [], []
    with tempfile.TemporaryDirectory() as pycache:
        env = _installed_env(pycache)
        subprocess.run([sys.executable, "-c", "from sagellm.cli import main; main()", *argv], check=True,
                       capture_output=True, env=env)  # writes the bytecode, unmeasured
        for _ in range(runs):
            start, cpu = time.perf_counter(), _children_cpu_s()
            subprocess.run([sys.executable, "-c", "from sagellm.cli import main; main()", *argv], check=True,
                           capture_output=True, env=env)  # what the `sagellm` script runs
            walls.append(time.perf_counter() - start)
            cpus.append(_children_cpu_s() - cpu)
            out = subprocess.run([sys.executable, "-c", IN_PROCESS, *argv], check=True, capture_output=True,
                                 text=True, env=env).stdout
            splits.append(tuple(float(x) for x in out.split()))
    imports, command, imports_cpu, command_cpu = (min(s[i] for s in splits) for i in range(4))
    print(f"sagellm {' '.join(argv)}: {min(walls):.2f} s wall (least of {runs}: {', '.join(f'{w:.2f}' for w in walls)}), "
          f"{min(cpus):.2f} s CPU; in process: imports {imports:.2f} s wall, {imports_cpu:.2f} s CPU, the command "
          f"{command:.2f} s wall, {command_cpu:.2f} s CPU")


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of the finished child processes so far: on a shared machine, wall time
    includes waiting for a core, CPU time much less so."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_recommend(model: str, load: Load, rules: tuple[Rule, ...], payload: Payload, runs: int, prune: bool) -> None:
    """A whole-catalog search from an empty simulation cache, `runs` times (`prune`: as the command runs it)."""
    space = Space(find_model(model), payload, instance_types())
    simulated_level = simulated_module.simulated_level
    in_simulator = 0.0

    def timed_simulated_level(*a: object, **kw: object) -> LevelSummary:
        nonlocal in_simulator
        start = time.perf_counter()
        try:
            return simulated_level(*a, **kw)  # type: ignore[arg-type]
        finally:
            in_simulator += time.perf_counter() - start

    simulated_module.simulated_level = timed_simulated_level  # type: ignore[assignment]
    try:
        walls, cpus, shares = [], [], []
        for _ in range(runs):
            simulated_module.SUMMARIES.clear()
            in_simulator = 0.0
            start, cpu = time.perf_counter(), time.process_time()
            found = search(space, load, rules, prune=prune)
            rec = choose(found, load, rules, payload)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            shares.append(in_simulator / walls[-1])
    finally:
        simulated_module.simulated_level = simulated_level  # type: ignore[assignment]
    simulated = sum(c.summary is not None for c in found.candidates)
    print(f"recommend {model} at {load.name}, {payload.input_tokens}/{payload.output_tokens} tokens, "
          f"{', '.join(f'{r.metric} ≤ {r.max:g}' for r in rules)}, engines {', '.join(space.engines)}, "
          f"{'pruned (as the command runs it)' if prune else 'every candidate simulated (--simulate-all)'}: "
          f"{len(found.candidates)} candidates, {simulated} simulated ({len(simulated_module.SUMMARIES)} distinct "
          f"simulations of {simulated_module.SIMULATED_REQUESTS} measured requests)")
    print(f"  {min(walls):.1f} s wall (least of {runs}: {', '.join(f'{w:.1f}' for w in walls)}), {min(cpus):.1f} s "
          f"CPU; in the simulator "
          f"{min(shares):.0%}; pick: {rec.pick.label() if rec.pick else 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    parser.add_argument("--rate", type=float, default=2.0, help="target load, requests/s (open loop)")
    parser.add_argument("--ttft-p90", type=float, default=800.0, help="SLO: ttft_ms.p90 max")
    parser.add_argument("--itl-p50", type=float, default=40.0, help="SLO: itl_ms.p50 max")
    parser.add_argument("--input-tokens", default="256,1024", help="comma-separated: one search each")
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--plan-engines", default="tgi,vllm,sglang,lmi", help="comma-separated: `plan --engine` timed for each")
    parser.add_argument("--plan-only", action="store_true", help="time `plan` only (seconds, not minutes)")
    args = parser.parse_args()

    for engine in args.plan_engines.split(","):
        time_plan(args.runs, args.model, engine)
    if args.plan_only:
        return
    load = Load(request_rate=args.rate)
    rules = (Rule(metric="ttft_ms.p90", where=load.name, max=args.ttft_p90),
             Rule(metric="itl_ms.p50", where=load.name, max=args.itl_p50))
    for input_tokens in (int(n) for n in args.input_tokens.split(",")):
        for prune in (True, False):
            time_recommend(args.model, load, rules, Payload(input_tokens, args.output_tokens), args.runs, prune)


if __name__ == "__main__":
    main()

"""How long a whole-catalog `sagellm recommend` takes now that candidates are predicted from simulated requests,
and how much of it the simulations are. Target: ≲ 15 s for one model on a shared 2-core machine.

A library call (`search` then `choose`, what the command runs before writing its files), repeated from an empty
simulation cache (what one `sagellm recommend` costs); prints the median wall time, the candidates, how many were
simulated (distinct simulations: configs whose copies run alike share one), the share of time in the simulator,
and the pick. Then the same search under a looser and a tighter ITL bound, as the study's targets and the tests'
sweeps of limits run them in one process: they reuse the simulations at that load.

    .venv/bin/python benchmarks/recommend_speed.py [--runs 3] [--model llama2-7b] [--rate 2] [--ttft-p90 1000]
        [--itl-p50 60] [--input-tokens 256] [--output-tokens 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

from sagellm.catalog import find_model
from sagellm.planner import Payload
from sagellm.recommend import Load, Space, choose, instance_types, search
from sagellm.recommend import simulated as simulated_module
from sagellm.results.gate import Rule
from sagellm.results.schema import LevelSummary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="llama2-7b")
    parser.add_argument("--rate", type=float, default=2.0, help="target load, requests/s (open loop)")
    parser.add_argument("--ttft-p90", type=float, default=1000.0, help="SLO: ttft_ms.p90 max")
    parser.add_argument("--itl-p50", type=float, default=60.0, help="SLO: itl_ms.p50 max")
    parser.add_argument("--input-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=256)
    args = parser.parse_args()

    load = Load(request_rate=args.rate)
    rules = (Rule(metric="ttft_ms.p90", where=load.name, max=args.ttft_p90),
             Rule(metric="itl_ms.p50", where=load.name, max=args.itl_p50))
    payload = Payload(args.input_tokens, args.output_tokens)
    space = Space(find_model(args.model), payload, instance_types())

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
    walls, shares = [], []
    for _ in range(args.runs):
        simulated_module.SUMMARIES.clear()
        in_simulator = 0.0
        start = time.perf_counter()
        found = search(space, load, rules)
        rec = choose(found, load, rules, payload)
        wall = time.perf_counter() - start
        walls.append(wall)
        shares.append(in_simulator / wall)
    simulated = [c for c in found.candidates if c.summary is not None]
    distinct = len(simulated_module.SUMMARIES)
    print(f"{args.model} at {load.name}, {payload.input_tokens}/{payload.output_tokens} tokens, "
          f"ttft_ms.p90 ≤ {args.ttft_p90:g}, itl_ms.p50 ≤ {args.itl_p50:g}: {len(found.candidates)} candidates, "
          f"{len(simulated)} simulated ({distinct} distinct simulations of "
          f"{simulated_module.SIMULATED_REQUESTS} measured requests)")
    print(f"wall time: median {statistics.median(walls):.1f} s over {args.runs} runs "
          f"({', '.join(f'{w:.1f}' for w in walls)}); in the simulator: {statistics.median(shares):.0%}")
    print(f"pick: {rec.pick.label() if rec.pick else 'none'}")
    for factor in (2.0, 0.5):
        other = (rules[0], Rule(metric="itl_ms.p50", where=load.name, max=args.itl_p50 * factor))
        before = len(simulated_module.SUMMARIES)
        start = time.perf_counter()
        rec = choose(search(space, load, other), load, other, payload)
        print(f"then itl_ms.p50 ≤ {args.itl_p50 * factor:g}: {time.perf_counter() - start:.1f} s, "
              f"{len(simulated_module.SUMMARIES) - before} new simulations; pick: "
              f"{rec.pick.label() if rec.pick else 'none'}")


if __name__ == "__main__":
    main()

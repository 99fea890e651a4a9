"""Whether the prediction and the emulator agree on the local target: TTFT and ms/token, p50 and p90, at every
level, for each standard profile × three catalog models of different sizes on the profile's default instance.

Each pair is one `sagellm bench` on the local target (the emulator, `--time-scale` to keep it short) through the
library; the prediction beside each level is the results' own (simulated requests of the same workload at the load
the clients offered). Prints one row per level with predicted, measured and the difference, and the worst
difference of all; exit 1 where any is over `--within` (15 %).

    .venv/bin/python benchmarks/plan_vs_emulator.py [--profiles min-latency,max-throughput,…]
        [--models phi3-mini-4k,falcon-7b,qwen2.5-14b] [--concurrency 1,4,16] [--time-scale 0.2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from sagellm import bench
from sagellm.results.schema import Level

PROFILES = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")  # the standard ones
MODELS = ("phi3-mini-4k", "falcon-7b", "qwen2.5-14b")  # 3.8 B, 7.2 B, 14.8 B parameters, none gated
WITHIN = 0.15
# (name, the measured distribution, its statistic, the predicted field)
METRICS = (("TTFT p50", "ttft_ms", "p50", "ttft_ms"), ("TTFT p90", "ttft_ms", "p90", "ttft_ms_p90"),
           ("ms/token p50", "latency_ms_per_token", "p50", "ms_per_token"),
           ("ms/token p90", "latency_ms_per_token", "p90", "ms_per_token_p90"))


def compared(level: Level) -> list[tuple[str, float, float, float]]:
    """(metric, predicted, measured, measured ÷ predicted − 1) for each metric of a level; none for a level
    where nothing finished inside the invocation timeout (predicted and measured alike)."""
    p = level.predicted
    assert p is not None, f"level {level.load} has no prediction"
    if level.ok == 0:
        return []
    out = []
    for name, dist, stat, field in METRICS:
        predicted, measured = getattr(p, field), getattr(getattr(level, dist), stat)
        out.append((name, predicted, measured, measured / predicted - 1))
    return out


def bench_pair(profile: str, model: str, concurrency: tuple[int, ...], time_scale: float, out: Path) -> list[Level]:
    """One local bench of a profile × model at the given levels; its levels (measured and predicted)."""
    outcome = bench.run(bench.Bench(
        serving=bench.ServingSpec(profile=profile, model=model), target=bench.Local(time_scale=time_scale),
        load=bench.Closed(concurrency=concurrency), sweep=bench.Sweep(method="doubling"),
        output=bench.Output(out)))
    if outcome.error:
        raise SystemExit(f"{profile} × {model}: {outcome.error}")
    return outcome.results.levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--within", type=float, default=WITHIN)
    parser.add_argument("--out", type=Path, default=None, help="folder for each run's results (default: temporary)")
    args = parser.parse_args()
    levels = tuple(int(c) for c in args.concurrency.split(","))
    root = args.out or Path(tempfile.mkdtemp(prefix="plan-vs-emulator-"))
    rows, worst = [], 0.0
    print(f"{'profile':<15} {'model':<13} {'conc':>4}  " + "  ".join(f"{m[0] + ' pred/meas':>24}" for m in METRICS))
    for profile in args.profiles.split(","):
        for model in args.models.split(","):
            started = time.perf_counter()
            measured = bench_pair(profile, model, levels, args.time_scale, root / f"{profile}-{model}")
            for level in measured:
                cells = compared(level)
                if not cells:
                    alike = level.predicted is not None and not level.predicted.within_timeout
                    why = "measured and simulated alike" if alike else "the simulation finished some"
                    print(f"{profile:<15} {model:<13} {level.concurrency:>4}  no request finished inside the "
                          f"timeout ({why})")
                    continue
                worst = max(worst, *(abs(c[3]) for c in cells))
                rows.append({"profile": profile, "model": model, "concurrency": level.concurrency,
                             **{c[0]: {"predicted": c[1], "measured": c[2], "off": c[3]} for c in cells}})
                print(f"{profile:<15} {model:<13} {level.concurrency:>4}  "
                      + "  ".join(f"{c[1]:>8.1f} {c[2]:>8.1f} {c[3]:>+5.0%}" for c in cells), flush=True)
            print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    (root / "plan_vs_emulator.json").write_text(json.dumps(rows, indent=1))
    print(f"worst difference {worst:.1%} (limit {args.within:.0%}); table in {root / 'plan_vs_emulator.json'}")
    sys.exit(0 if worst <= args.within else 1)


if __name__ == "__main__":
    main()

"""Whether the prediction and the emulator agree on the local target: TTFT and ms/token, p50 and p90, at every
level, for each standard profile × three catalog models of different sizes on the profile's default instance.

Each pair is one `sagellm bench` on the local target (the emulator, `--time-scale` to keep it short) through the
library. Two predictions stand beside each measured level, both simulated requests of the same workload:
- `replay`: the results' own, replaying the arrivals the emulator stamped (what the bench reports);
- `plan`: what `plan` predicts without anything measured, its clients modelled (their measured turnaround, on
  the emulator's clock).
Prints one row per level and prediction with predicted, measured and the difference; then how many levels agree
within `--within` (15 %) per metric and prediction, and the clients' turnaround as the emulator saw it (wall ms:
what `results.simulated.CLIENT_TURNAROUND_S` holds). Exit 1 where any replayed difference is over `--within`.

A TTFT of a few passes rests on which pass each request joins, and a level of the bench's default length
(3 × concurrency requests) reads its p50 and p90 off a dozen requests at 4. So one run is a draw, and two ceilings
say how often any prediction of one run can agree:
- `--ceiling N`: the emulator's own engine on a virtual clock, run N times as long as each measured level (its
  warm-up and measured requests, the clients drawn N ways): how often such a run is within `--within` of `plan`'s
  prediction, i.e. what a perfect model of the server scores against one run of that length;
- `--repeat N`: each pair benched N times; how often two runs of the same level agree with each other.
`--requests` or `--duration` measures each level longer. `--ceiling N --simulated` benches nothing: each level's
stand-in is a simulated run of the bench's length (its default, or `--requests`).

    .venv/bin/python benchmarks/plan_vs_emulator.py [--profiles min-latency,max-throughput,…]
        [--models phi3-mini-4k,falcon-7b,qwen2.5-14b] [--concurrency 1,4,16] [--time-scale 0.2] [--out DIR]
        [--requests N | --duration S] [--ceiling N [--simulated]] [--repeat N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sagellm import bench
from sagellm.bench.planning import BenchPlan, plan_bench
from sagellm.bench.sweep.run import default_budget
from sagellm.clock import Clock
from sagellm.planner import StepModel
from sagellm.results.records import RequestRecord, read_records
from sagellm.results.schema import Level, Predicted, predicted_from
from sagellm.results.simulated import predicted_point, simulated_level

PROFILES = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")  # the standard ones
MODELS = ("phi3-mini-4k", "falcon-7b", "qwen2.5-14b")  # 3.8 B, 7.2 B, 14.8 B parameters, none gated
WITHIN = 0.15
# (name, the measured distribution, its statistic, the predicted field)
METRICS = (("TTFT p50", "ttft_ms", "p50", "ttft_ms"), ("TTFT p90", "ttft_ms", "p90", "ttft_ms_p90"),
           ("ms/token p50", "latency_ms_per_token", "p50", "ms_per_token"),
           ("ms/token p90", "latency_ms_per_token", "p90", "ms_per_token_p90"))


def compared(level: Level, p: Predicted) -> list[tuple[str, float, float, float]]:
    """(metric, predicted, measured, measured ÷ predicted − 1) for each metric of a level."""
    out = []
    for name, dist, stat, field in METRICS:
        predicted, measured = getattr(p, field), getattr(getattr(level, dist), stat)
        out.append((name, predicted, measured, measured / predicted - 1))
    return out


def spec_of(profile: str, model: str, concurrency: tuple[int, ...], time_scale: float, out: Path,
            requests: int | None = None, duration_s: float | None = None) -> bench.Bench:
    """The bench of a profile × model at the given levels on the local target (`requests` or `duration_s`
    simulated seconds per level, else the bench's default length)."""
    load = bench.Closed(concurrency=concurrency, requests_per_level=requests, duration_per_level_s=duration_s)
    return bench.Bench(
        serving=bench.ServingSpec(profile=profile, model=model), target=bench.Local(time_scale=time_scale),
        load=load, sweep=bench.Sweep(method="doubling"), output=bench.Output(out))


def bench_pair(spec: bench.Bench) -> list[Level]:
    """One local bench; its levels (measured and predicted)."""
    outcome = bench.run(spec)
    if outcome.error:
        raise SystemExit(f"{spec.serving.profile} × {spec.serving.model}: {outcome.error}")
    return outcome.results.levels


def planned(p: BenchPlan, concurrency: int, time_scale: float) -> Predicted:
    """`plan`'s prediction of a level: nothing measured, the clients modelled on the emulator's clock."""
    assert p.plan is not None and p.shape is not None
    point = predicted_point(p.plan, p.shape, p.workload.payload(), concurrency, sizes=p.workload.sizes,
                            clock=Clock(time_scale))
    return predicted_from(point)


def ceiling(p: BenchPlan, level: Level, plan_said: Predicted, time_scale: float, draws: int,
            within: float) -> dict[str, list[bool]]:
    """Per metric, for `draws` runs of the emulator's engine as long as the measured level (a warm-up request per
    client, then as many measured), its clients drawn a different way each time: whether the run's figure is within
    `within` of `plan`'s prediction."""
    assert p.plan is not None and p.shape is not None and level.concurrency is not None
    said = predicted_values(plan_said)
    out: dict[str, list[bool]] = {name: [] for name, *_ in METRICS}
    for seed in range(1, draws + 1):
        run = simulated_level(p.plan, StepModel(p.shape), p.workload.payload(), concurrency=level.concurrency,
                              sizes=p.workload.sizes, requests=level.requests, clock=Clock(time_scale), seed=seed,
                              warmup=level.concurrency)
        for name, dist, stat, _ in METRICS:
            got, predicted = getattr(getattr(run, dist), stat), said[name]
            if got and predicted:
                out[name].append(abs(got / predicted - 1) <= within)
    return out


def ceiling_alone(profiles: list[str], models: list[str], levels: tuple[int, ...], time_scale: float,
                  requests: int | None, draws: int, within: float) -> None:
    """`--ceiling` without a bench: each level's stand-in is a simulated run of the bench's length (its default,
    or `requests`); prints, per level and overall, how often a perfect model lands within `within` of one run."""
    budget = default_budget(open_loop=False)
    perfect: dict[str, list[bool]] = {}
    print(f"{'profile':<15} {'model':<13} {'conc':>4} {'requests':>8}  "
          + "  ".join(f"{name:>12}" for name, *_ in METRICS))
    for profile in profiles:
        for model in models:
            p = plan_bench(spec_of(profile, model, levels, time_scale, Path(tempfile.gettempdir()), requests))
            assert p.plan is not None and p.shape is not None
            for c in levels:
                said = planned(p, c, time_scale)
                if not said.within_timeout:
                    print(f"{profile:<15} {model:<13} {c:>4}  nothing finishes inside the timeout")
                    continue
                n = requests or budget(c)
                stand_in = simulated_level(p.plan, StepModel(p.shape), p.workload.payload(), concurrency=c,
                                           sizes=p.workload.sizes, requests=n, clock=Clock(time_scale), warmup=c)
                scored = ceiling(p, Level(**stand_in.model_dump()), said, time_scale, draws, within)
                for metric, h in scored.items():
                    perfect.setdefault(metric, []).extend(h)
                # No run this short finished inside the invocation timeout: nothing to score.
                print(f"{profile:<15} {model:<13} {c:>4} {n:>8}  "
                      + "  ".join(f"{sum(h) / len(h):>12.0%}" if h else f"{'-':>12}" for h in scored.values()),
                      flush=True)
    print_ceiling(perfect, within)


def print_ceiling(perfect: dict[str, list[bool]], within: float) -> None:
    """The ceiling per metric over every scored run."""
    for metric, hits in perfect.items():
        if hits:
            print(f"ceiling {metric:<12} a run of the engine as long as the level within {within:.0%} of plan: "
                  f"{sum(hits) / len(hits):.0%} of {len(hits)} runs")


def measured_values(level: Level) -> dict[str, float | None]:
    """A measured level's figure per metric."""
    return {name: getattr(getattr(level, dist), stat) for name, dist, stat, _ in METRICS}


def predicted_values(p: Predicted) -> dict[str, float | None]:
    """A prediction's figure per metric."""
    return {name: getattr(p, field) for name, _, _, field in METRICS}


def pairs_within(values: list[dict[str, float | None]], within: float) -> dict[str, list[bool]]:
    """Per metric, for every ordered pair of one level's runs: whether the second is within `within` of the first,
    as a prediction and a measurement are compared."""
    out: dict[str, list[bool]] = {}
    for name, *_ in METRICS:
        got = [x for v in values if (x := v[name])]
        out[name] = [abs(b / a - 1) <= within for a, b in itertools.permutations(got, 2)]
    return out


def nothing_finished(level: Level) -> str:
    """Why no measured request of a level finished, measured and predicted."""
    assert level.predicted is not None
    errors = ", ".join(f"{n} {kind}" for kind, n in level.errors.items() if n)
    said = ("refused (above the admission limit)" if level.predicted.rejected else
            "past the invocation timeout" if not level.predicted.within_timeout else "some finish")
    return f"no measured request finished ({errors}); predicted: {said}"


def turnarounds(records: list[RequestRecord]) -> tuple[list[float], list[float]]:
    """As the emulator saw the clients (wall seconds): each reply's last token to the same client's next request,
    and between successive clients' first requests of a level."""
    by_client: dict[tuple[str, int, int], list[RequestRecord]] = {}
    for r in records:
        if r.server_arrived_s is not None:
            by_client.setdefault((r.load, r.repeat, r.worker or 0), []).append(r)
    turns: list[float] = []
    firsts_by_level: dict[tuple[str, int], list[float]] = {}
    for (load, repeat, _), sent in by_client.items():
        sent.sort(key=lambda r: r.server_arrived_s or 0.0)
        firsts_by_level.setdefault((load, repeat), []).append(sent[0].server_arrived_s or 0.0)
        turns += [(b.server_arrived_s or 0.0) - (a.server_arrived_s or 0.0) - a.server_e2e_s
                  for a, b in itertools.pairwise(sent) if a.server_e2e_s is not None]
    gaps = [b - a for firsts in firsts_by_level.values() for a, b in itertools.pairwise(sorted(firsts))]
    return turns, gaps


def deciles(values: list[float]) -> str:
    """p10 … p90 in milliseconds."""
    if len(values) < 2:
        return "none"
    return " ".join(f"{q * 1000:.1f}" for q in statistics.quantiles(values, n=10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--within", type=float, default=WITHIN)
    parser.add_argument("--out", type=Path, default=None, help="folder for each run's results (default: temporary)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--requests", type=int, default=None,
                        help="measured requests per level (default: the bench's, 3 × concurrency, at least 8)")
    length.add_argument("--duration", type=float, default=None, help="simulated seconds per level instead")
    parser.add_argument("--ceiling", type=int, default=0,
                        help="score a perfect model: this many simulated runs as long as each measured level")
    parser.add_argument("--simulated", action="store_true",
                        help="with --ceiling: bench nothing, each level's stand-in a simulated run of the bench's length")
    parser.add_argument("--repeat", type=int, default=1, help="bench each pair this many times (run against run)")
    args = parser.parse_args()
    levels = tuple(int(c) for c in args.concurrency.split(","))
    if args.simulated:
        if not args.ceiling or args.duration is not None:
            parser.error("--simulated needs --ceiling N, and a length in requests (the default, or --requests)")
        ceiling_alone(args.profiles.split(","), args.models.split(","), levels, args.time_scale, args.requests,
                      args.ceiling, args.within)
        return
    root = args.out or Path(tempfile.mkdtemp(prefix="plan-vs-emulator-"))
    rows: list[dict] = []
    worst = 0.0
    within: dict[tuple[str, str], list[bool]] = {}
    turns: dict[int, list[float]] = {}
    gaps: list[float] = []
    perfect: dict[str, list[bool]] = {}  # metric → for each simulated run as long as a level, within of plan
    twins: dict[str, list[bool]] = {}  # metric → for each pair of runs of a level, within
    print(f"{'profile':<15} {'model':<13} {'conc':>4} {'pred':<6} "
          + "  ".join(f"{m[0] + ' pred/meas':>24}" for m in METRICS))
    for profile in args.profiles.split(","):
        for model in args.models.split(","):
            started = time.perf_counter()
            runs = [f"{profile}-{model}" + (f"-{k}" if k else "") for k in range(args.repeat)]
            specs = [spec_of(profile, model, levels, args.time_scale, root / run, args.requests, args.duration)
                     for run in runs]
            measured = [level for spec in specs for level in bench_pair(spec)]
            p = plan_bench(specs[0])
            plan_said = {conc: planned(p, conc, args.time_scale) for conc in levels}  # the same for every run
            for conc in levels:
                same = [measured_values(lv) for lv in measured if lv.concurrency == conc and lv.ok]
                for metric, hits in pairs_within(same, args.within).items():
                    twins.setdefault(metric, []).extend(hits)
            for level in measured:
                assert level.predicted is not None and level.concurrency is not None, level.load
                if level.ok == 0:  # refused above the admission limit, or past the invocation timeout
                    print(f"{profile:<15} {model:<13} {level.concurrency:>4}  {nothing_finished(level)}")
                    continue
                row: dict = {"profile": profile, "model": model, "concurrency": level.concurrency}
                if args.ceiling:
                    for metric, hits in ceiling(p, level, plan_said[level.concurrency], args.time_scale,
                                                args.ceiling, args.within).items():
                        perfect.setdefault(metric, []).extend(hits)
                for how, prediction in (("replay", level.predicted), ("plan", plan_said[level.concurrency])):
                    cells = compared(level, prediction)
                    if how == "replay":
                        worst = max(worst, *(abs(c[3]) for c in cells))
                    for c in cells:
                        within.setdefault((how, c[0]), []).append(abs(c[3]) <= args.within)
                    row[how] = {c[0]: {"predicted": c[1], "measured": c[2], "off": c[3]} for c in cells}
                    print(f"{profile:<15} {model:<13} {level.concurrency:>4} {how:<6} "
                          + "  ".join(f"{c[1]:>8.1f} {c[2]:>8.1f} {c[3]:>+5.0%}" for c in cells), flush=True)
                rows.append(row)
            for run in runs:
                records = read_records(root / run / "requests.jsonl")
                for conc in levels:
                    t, g = turnarounds([r for r in records if r.concurrency == conc])
                    turns.setdefault(conc, []).extend(t)
                    gaps += g
            print(f"  ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    (root / "plan_vs_emulator.json").write_text(json.dumps(rows, indent=1))
    for (how, metric), hits in within.items():
        print(f"{how:<6} {metric:<12} within {args.within:.0%} at {sum(hits)} of {len(hits)} levels")
    print_ceiling(perfect, args.within)
    for metric, hits in twins.items():
        if hits:
            print(f"runs   {metric:<12} one run against another of the same level within {args.within:.0%}: "
                  f"{sum(hits) / len(hits):.0%} of {len(hits)} pairs")
    for conc, t in turns.items():
        print(f"client turnaround as the emulator saw it at concurrency {conc}, wall ms, p10…p90: {deciles(t)} "
              f"({len(t)} replies)")
    print(f"between clients' first requests, wall ms, p10…p90: {deciles(gaps)}")
    print(f"worst replayed difference {worst:.1%} (limit {args.within:.0%}); table in {root / 'plan_vs_emulator.json'}")
    sys.exit(0 if worst <= args.within else 1)


if __name__ == "__main__":
    main()

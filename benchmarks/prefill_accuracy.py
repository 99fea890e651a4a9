"""Replay published long-input, short-output measurements through the planner and print how far off it is.

    python benchmarks/prefill_accuracy.py                 # predicted vs published per row, and the MAPE
    python benchmarks/prefill_accuracy.py --json out.json # ... and the figures as JSON
    python benchmarks/prefill_accuracy.py --fit           # re-fit the prefill constants, print them to paste
    python benchmarks/prefill_accuracy.py --holdout       # leave-one-source-out: fit on the others, score it

The rows are benchmarks/data/prefill.csv: FMBench's published SageMaker runs of TGI 1.1.0 (Llama 2 13B on
g5.12xlarge/g5.24xlarge at TP 4 and g5.48xlarge at TP 8, Llama 2 70B on g5.48xlarge, Mistral 7B on g5.2xlarge),
prompts of 304 to 3478 tokens (means per bucket), up to 100 output tokens, waves of 1 to 8 requests sent at once
through the client's pool of 6 threads (FMBENCH_CLIENT_THREADS in planner_accuracy.py says why: at 8, two wait).
Each is compared on its own definitions: ms/token = mean client e2e ÷ output tokens (as JumpStart's tables,
prefill included), throughput = output tokens ÷ wave wall time. A wave of up to 6 requests sent together is a
closed loop at its concurrency whose requests all start and end together, which is what the planner's closed loop
of TGI 1.x predicts (its router prefills a whole wave at once). Prefill-heavy: 900 input tokens or more. Requests
sampled and could stop early (mean outputs 6 to 102 of max_new_tokens 100): a wave then lasts as long as its
longest request, which the published means do not give, so throughput is comparable only where no request
stopped early (the "no early stop" groups); ms/token (mean e2e ÷ mean output) is comparable everywhere.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from planner_accuracy import FMBENCH_CLIENT_THREADS, fmbench_pool

from sagellm.catalog import find_instance, find_model
from sagellm.engines import Limits
from sagellm.planner import Payload, Shape, StepModel
from sagellm.planner import constants as planner_constants
from sagellm.planner.batching import CopyScheduler, Sequence

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "prefill.csv"
FITTED = "tgi-1"  # TGI 1.1.0: the generation these measurements are of
PREFILL_HEAVY_TOKENS = 900  # rows with at least this many input tokens (and ≤ 102 output tokens: all rows)
# max_new_tokens was 100: a mean of 100 or more (re-tokenised text reads 101-102) says no request stopped early,
# so the wave's wall time is every request's own and its throughput means what the planner predicts.
FULL_OUTPUT_TOKENS = 100
MODELS = {"Llama-2-13b": "llama2-13b", "Llama-2-70b": "llama2-70b", "Mistral-7B": "mistral-7b"}

# The prefill constant the fit may move, and its bounds: model FLOPs utilisation relative to the catalog's
# dense FP16 peak (above 1 would say the catalog's peak is low).
FIT_NAME, FIT_BOUNDS = "prefill_mfu", (0.1, 1.5)


@dataclass(frozen=True)
class Row:
    """One published level: a wave of `concurrency` requests of a payload on one shape."""

    source: str  # the experiment (one FMBench run)
    model: str
    instance_type: str
    tp: int
    input_tokens: int
    output_tokens: int
    concurrency: int
    e2e_s: float
    throughput: float
    max_batch_prefill_tokens: int

    @property
    def ms_per_token(self) -> float:
        """The published e2e ÷ output tokens (prefill included)."""
        return self.e2e_s / self.output_tokens * 1000

    @property
    def prefill_heavy(self) -> bool:
        """A long prompt with a short output."""
        return self.input_tokens >= PREFILL_HEAVY_TOKENS

    @property
    def label(self) -> str:
        """How the row prints: model, instance, TP, payload, concurrency."""
        return (f"{self.model} {self.instance_type} tp{self.tp} {self.input_tokens}/{self.output_tokens} "
                f"c={self.concurrency}")


def load_rows(path: Path) -> list[Row]:
    """Read the prefill CSV into rows."""
    with path.open() as f:
        return [Row(source=r["source"].split(" | ")[1].split("/")[2], model=MODELS[r["model"]],
                    instance_type=r["instance_type"], tp=int(r["tp_degree"]), input_tokens=int(r["input_tokens"]),
                    output_tokens=int(r["output_tokens"]), concurrency=int(r["concurrency"]),
                    e2e_s=float(r["e2e_latency_s"]), throughput=float(r["throughput_tokens_per_s"]),
                    max_batch_prefill_tokens=int(r["max_batch_prefill_tokens"]))
                for r in csv.DictReader(f)]


def shape_of(row: Row) -> Shape:
    """The serving shape a row ran (TGI 1.1.0: the measured generation's constants)."""
    return Shape(find_model(row.model), find_instance(row.instance_type), row.tp,
                 max_batch_prefill_tokens=row.max_batch_prefill_tokens)


def mean_model(row: Row) -> tuple[float, float]:
    """(ms/token, output tokens/s) of the planner's steady-state mean model, through FMBench's client pool."""
    return fmbench_pool(shape_of(row), Payload(row.input_tokens, row.output_tokens), row.concurrency)


def simulated(row: Row) -> tuple[float, float]:
    """(ms/token, output tokens/s) of one wave through the emulator's engine: the client's thread pool sends
    `concurrency` requests to an idle copy, as many at once as it has threads and each of the rest as a thread frees;
    the copy admits and prefills them within its budgets and decodes until all are done. Each request's latency runs
    from its own start, as FMBench times it inside its thread."""
    shape = shape_of(row)
    total = shape.model.max_context
    limits = Limits(max_input_tokens=total - 1, max_total_tokens=total,
                    max_batch_prefill_tokens=row.max_batch_prefill_tokens,
                    max_batch_total_tokens=shape.kv_capacity_tokens, max_concurrent_requests=None,
                    max_batch_size=None)
    copy = CopyScheduler(StepModel(shape), limits)
    wave = [Sequence(row.input_tokens, row.output_tokens, 0.0, None) for _ in range(row.concurrency)]
    waiting = deque(wave[FMBENCH_CLIENT_THREADS:])

    def next_request(_: Sequence) -> None:
        if waiting:
            seq = waiting.popleft()
            seq.arrived_s = copy.sim_s
            copy.submit(seq)

    copy.on_end = next_request
    for seq in wave[:FMBENCH_CLIENT_THREADS]:
        copy.submit(seq)
    while copy.queue or copy.running:
        for _ in copy.turn():
            pass
    ends = [seq.last_token_s or 0.0 for seq in wave]
    e2e = sum(end - seq.arrived_s for end, seq in zip(ends, wave)) / len(wave)
    return e2e / row.output_tokens * 1000, row.concurrency * row.output_tokens / max(ends)


PREDICTORS = {"simulated": simulated, "mean": mean_model}


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100


def _mape(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def score(rows: list[Row], predictor: str = "simulated") -> dict:
    """Per-row predictions and the MAPE tables (all rows, prefill-heavy rows, per source)."""
    scored = []
    for r in rows:
        ms, thr = PREDICTORS[predictor](r)
        scored.append({"row": r.label, "source": r.source, "prefill_heavy": r.prefill_heavy,
                       "full_output": r.output_tokens >= FULL_OUTPUT_TOKENS,
                       "ms_per_token": r.ms_per_token, "pred_ms_per_token": ms, "throughput": r.throughput,
                       "pred_throughput": thr, "ape_ms": _ape(ms, r.ms_per_token), "ape_thr": _ape(thr, r.throughput)})

    def table(sel: list[dict]) -> dict:
        return {"n": len(sel), "ms": _mape([s["ape_ms"] for s in sel]), "thr": _mape([s["ape_thr"] for s in sel])}

    groups = {"all rows": table(scored), "no early stop": table([s for s in scored if s["full_output"]]),
              "prefill-heavy": table([s for s in scored if s["prefill_heavy"]])}
    groups["prefill-heavy, no early stop"] = table([s for s in scored if s["prefill_heavy"] and s["full_output"]])
    for src in sorted({s["source"] for s in scored}):
        groups[f"prefill-heavy, {src}"] = table([s for s in scored if s["prefill_heavy"] and s["source"] == src])
    return {"groups": groups, "rows": scored}


def render(result: dict, out: TextIO = sys.stdout, rows: bool = True) -> None:
    """Print each row (published → predicted) and the MAPE tables."""
    def f(v: float | None) -> str:
        return "   -  " if v is None else f"{v:5.1f}%"

    if rows:
        print(f"{'row':58} {'ms/token published → predicted':>32} {'tokens/s published → predicted':>32}", file=out)
        for s in result["rows"]:
            print(f"{s['row']:58} {s['ms_per_token']:9.1f} → {s['pred_ms_per_token']:6.1f} ({s['ape_ms']:5.1f}%) "
                  f"{s['throughput']:9.0f} → {s['pred_throughput']:6.0f} ({s['ape_thr']:5.1f}%)", file=out)
        print(file=out)
    print(f"{'group':44} {'n':>4}  {'ms/token':>8} {'tokens/s':>8}", file=out)
    for name, g in result["groups"].items():
        print(f"{name:44} {g['n']:4d}  {f(g['ms']):>8} {f(g['thr']):>8}", file=out)


def _set(value: float) -> None:
    """Install a prefill MFU for the measured generation (every prediction after this uses it)."""
    consts, label = planner_constants.MEASURED[FITTED]
    planner_constants.MEASURED[FITTED] = (replace(consts, **{FIT_NAME: value}), label)


def fit(rows: list[Row]) -> float:
    """The prefill MFU that minimises the squared log error of ms/token over the prefill-heavy rows."""
    from scipy.optimize import minimize_scalar

    saved = getattr(planner_constants.MEASURED[FITTED][0], FIT_NAME)
    heavy = [r for r in rows if r.prefill_heavy]

    def loss(value: float) -> float:
        _set(value)
        return sum(math.log(simulated(r)[0] / r.ms_per_token) ** 2 for r in heavy)

    try:
        return float(minimize_scalar(loss, bounds=FIT_BOUNDS, method="bounded", options={"xatol": 1e-3}).x)
    finally:
        _set(saved)


def holdout(rows: list[Row]) -> dict[str, dict]:
    """Leave one source out: fit the prefill MFU on the other sources, score the held-out one's rows."""
    saved = getattr(planner_constants.MEASURED[FITTED][0], FIT_NAME)
    out = {}
    for src in sorted({r.source for r in rows}):
        value = fit([r for r in rows if r.source != src])
        try:
            _set(value)
            table = score([r for r in rows if r.source == src])["groups"]["prefill-heavy"]
            out[src] = {FIT_NAME: value, **table}
        finally:
            _set(saved)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="prefill CSV (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="also write the figures here as JSON")
    ap.add_argument("--fit", action="store_true", help="re-fit the prefill MFU on these rows and print it")
    ap.add_argument("--holdout", action="store_true", help="leave-one-source-out: fit on the rest, score each")
    args = ap.parse_args()
    rows = load_rows(args.csv.resolve())
    report = {name: score(rows, name) for name in PREDICTORS}
    print("Simulated requests (the emulator's engine, one wave per row):")
    render(report["simulated"])
    print("\nThe steady-state mean model (a closed loop at the row's concurrency, through the client's pool):")
    render(report["mean"], rows=False)
    if args.fit:
        value = report["fitted_" + FIT_NAME] = fit(rows)
        print(f"\nFitted on these rows: {FIT_NAME}={value:.3g} (now {getattr(planner_constants.MEASURED[FITTED][0], FIT_NAME)})")
    if args.holdout:
        report["holdout"] = holdout(rows)
        print("\nLeave one source out (prefill MFU fitted on the others; MAPE of the held-out prefill-heavy rows):")
        print(f"{'held out':44} {'n':>4}  {'ms/token':>8} {'tokens/s':>8}  {FIT_NAME}")
        for src, g in report["holdout"].items():
            print(f"{src:44} {g['n']:4d}  {g['ms']:7.1f}% {g['thr']:7.1f}%  {g[FIT_NAME]:.3g}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

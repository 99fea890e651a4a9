"""Replay the published SageMaker measurements through `sagellm.recommend`: under each published latency target,
is the recommended instance type the published cheapest one that met it, and what does it cost by comparison?

    python benchmarks/recommend_study.py                # the table and the agreement figure
    python benchmarks/recommend_study.py --json out.json
    python benchmarks/recommend_study.py --holdout      # each source with constants fitted without it, FMBench too

Groups: one per (source, model, quantization, payload) of benchmarks/data/calibration.csv (a copy of
../shared/reference/calibration.csv). Hugging Face rows are one ShareGPT mix at slightly different mean prompt
lengths per level, so a Hugging Face group is (model, quantization) at the median prompt of its rows.
Targets: each distinct published ms/token of the group, rounded up to a whole millisecond.
Published cheapest: among the group's rows at or under the target, the lowest $ per 1M output tokens at the
catalog's on-demand price (price ÷ published throughput).
The recommender: searched over the instance types that group measured (a pick elsewhere could not be checked
against the table), TGI only (both sources ran TGI), the group's quantization, with the SLO
`latency_ms_per_token.p50 max <target>` at the published cheapest row's concurrency as the load (a closed
loop, as both sources measured): both then answer "at this traffic, which instance meets the target for least".
The two sources define ms/token differently (calibration.csv's notes column): JumpStart's is client end-to-end ÷
output tokens, queueing included, as the planner predicts it; Hugging Face's is TGI's server-side time per token,
queue wait excluded, so against it the recommender's SLO is the stricter one wherever it predicts queueing.
Match: the pick is the published cheapest itself: the same instance type, TP and one instance on an instance
endpoint (two instances of that type, or inference-component copies on it, are another deployment). Headroom:
none (`--headroom 0`): the published cheapest met the target by any margin, so the pick is held to the same edge.
Cost ratio: the recommended deployment's $ per 1M tokens ÷ the published cheapest's, the recommended one at its
published throughput where the table has that shape (one instance, the published TP, that concurrency), else at
its predicted throughput (marked `pred`).
Held out (`--holdout`): the constants above were fitted on calibration.csv, so its targets are tables the planner
saw. With `--holdout` each source's targets are recommended with constants fitted without that source (as
planner_accuracy.py --holdout fits them, over both CSVs), and FMBench's levels (holdout.csv) join as a third source:
TGI 1.1.0, Llama 2 13B on three instance types among others, at concurrency 1 to 6 (at 8 its client's thread pool
kept fewer in flight, so those levels were not a closed loop at 8). The Hugging Face pilot (TGI 0.8.2) is in the
fits, as there, but not among the targets: its levels would compete with the final benchmark's TGI 1.0.3 ones.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner_accuracy import DEFAULT_CSV, FMBENCH_CLIENT_THREADS, HOLDOUT_CSV, Row, fitted_on, load_rows

from sagellm.catalog import find_instance, find_model
from sagellm.planner import Payload
from sagellm.recommend import Load, Space, choose, search
from sagellm.results.gate import Rule

REGION = "us-east-1"  # the catalog's prices the $/1M tokens are at
TAGS = {"jumpstart": "js", "huggingface": "hf", "fmbench": "fm"}  # how a group's name starts


@dataclass(frozen=True)
class Group:
    """The published rows of one (source, model, quantization, payload)."""

    source: str
    model: str
    quantization: str
    payload: Payload
    rows: tuple[Row, ...]

    @property
    def name(self) -> str:
        q = "" if self.quantization == "none" else f" {self.quantization}"
        return f"{TAGS[self.source]} {self.model}{q} {self.payload.input_tokens}/{self.payload.output_tokens}"


@dataclass(frozen=True)
class Outcome:
    """One target: the published cheapest that met it and what the recommender picked."""

    group: str
    target_ms: int
    concurrency: int
    published: str  # instance type, TP
    published_usd_per_1m: float
    recommended: str | None  # the pick's label, None when nothing was predicted to meet the target
    recommended_instance: str | None
    recommended_usd_per_1m: float | None
    cost_from: str  # "published" | "pred" | "-"
    recommended_shape: str | None = None  # `ml.g5.2xlarge TP1` for one instance endpoint, else the pick's label

    @property
    def matched(self) -> bool:
        """The pick is the published cheapest: its instance type and TP, on one instance endpoint."""
        return self.recommended_shape == self.published

    @property
    def same_instance_type(self) -> bool:
        """The pick runs on the published cheapest's instance type (any TP, copies or count)."""
        return self.recommended_instance == self.published.split()[0]

    @property
    def cost_ratio(self) -> float | None:
        """Recommended ÷ published cheapest, $ per 1M output tokens."""
        if self.recommended_usd_per_1m is None:
            return None
        return self.recommended_usd_per_1m / self.published_usd_per_1m


def usd_per_1m(instance_type: str, tokens_per_s: float, count: int = 1) -> float:
    """$ per 1M output tokens of `count` instances at a throughput, on demand."""
    price = find_instance(instance_type).price_per_h(REGION)
    assert price is not None, f"{instance_type}: no price in {REGION}"
    return price * count / 3600 / tokens_per_s * 1e6


# FMBench's prompt buckets: the upper bounds of its payload files (payload_en_1-500.jsonl … payload_en_3000-4000.jsonl).
FMBENCH_BUCKETS = (500, 1000, 2000, 3000, 4000)


def _payload_of(r: Row) -> tuple:
    """Which payload a row's group is: JumpStart's own; one ShareGPT mix per Hugging Face model; one of FMBench's
    prompt buckets (a level's mean prompt and completion differ a little from run to run)."""
    if r.source == "huggingface":
        return ("sharegpt",)
    if r.source == "fmbench":
        return ("bucket", bisect.bisect_left(FMBENCH_BUCKETS, r.input_tokens))
    return (r.input_tokens, r.output_tokens)


def groups(rows: Sequence[Row]) -> list[Group]:
    """Rows with both figures, one group per source × model × quantization × payload (a mix or a bucket at the
    median of its levels' prompts and completions)."""
    keyed: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.ms_per_token is None or r.throughput is None or r.replicas != 1:
            continue
        if r.source == "fmbench" and r.concurrency > FMBENCH_CLIENT_THREADS:
            continue  # fewer in flight than its concurrency: not the closed loop the recommender is asked about
        keyed.setdefault((r.source, r.model, r.quantization, _payload_of(r)), []).append(r)
    out = []
    for (source, model, quant, _), members in keyed.items():
        payload = Payload(round(statistics.median(r.input_tokens for r in members)),
                          round(statistics.median(r.output_tokens for r in members)))
        out.append(Group(source, model, quant, payload, tuple(members)))
    return out


def study_target(group: Group, target_ms: int) -> Outcome:
    """The published cheapest under a target against the recommender's pick at its concurrency."""
    met = [r for r in group.rows if r.ms_per_token is not None and r.ms_per_token <= target_ms]
    best = min(met, key=lambda r: usd_per_1m(r.instance_type, r.throughput or 0.0))
    published_cost = usd_per_1m(best.instance_type, best.throughput or 0.0)
    load = Load(concurrency=best.concurrency)
    rules = [Rule(metric="latency_ms_per_token.p50", max=float(target_ms))]
    measured = tuple(dict.fromkeys(r.instance_type for r in group.rows))
    space = Space(find_model(group.model), group.payload, tuple(find_instance(i) for i in measured),
                  engines=("tgi",), quantizations=(group.quantization,), region=REGION)
    rec = choose(search(space, load, rules, headroom=0.0), load, rules, group.payload)
    pick = rec.pick
    base = Outcome(group.name, target_ms, best.concurrency, f"{best.instance_type} TP{best.tp}", published_cost,
                   None, None, None, "-")
    if pick is None:
        return base
    cfg = pick.config
    same_shape = [r for r in group.rows if r.instance_type == cfg.instance_type and r.tp == cfg.tensor_parallel
                  and r.concurrency == best.concurrency]
    single = pick.instance_count == 1 and cfg.endpoint_kind == "instance"
    if single and same_shape:
        cost, source = usd_per_1m(cfg.instance_type, same_shape[0].throughput or 0.0), "published"
    else:
        cost, source = pick.usd_per_1m_tokens, "pred"
    return Outcome(group.name, target_ms, best.concurrency, base.published, published_cost, pick.label(),
                   cfg.instance_type, cost, source, f"{cfg.instance_type} TP{cfg.tensor_parallel}" if single else pick.label())


def run_study(rows: Sequence[Row], only: str | None = None) -> list[Outcome]:
    """Every target of every group (or of the groups whose name contains `only`)."""
    out = []
    for group in groups(rows):
        if only is not None and only not in group.name:
            continue
        for target in sorted({math.ceil(r.ms_per_token or 0.0) for r in group.rows}):
            out.append(study_target(group, target))
    return out


def held_out_study(only: str | None = None) -> list[Outcome]:
    """Each source's targets, recommended with the planner's constants fitted without that source."""
    fits = load_rows(DEFAULT_CSV) + load_rows(HOLDOUT_CSV)
    studied = load_rows(DEFAULT_CSV) + [r for r in load_rows(HOLDOUT_CSV) if r.source == "fmbench"]
    out = []
    for source in TAGS:
        with fitted_on([r for r in fits if r.source != source]):
            out += run_study([r for r in studied if r.source == source], only)
    return out


def agreement(outcomes: Sequence[Outcome]) -> tuple[float, float | None]:
    """(share of targets whose pick is the published cheapest deployment, median cost ratio)."""
    share = sum(o.matched for o in outcomes) / len(outcomes) if outcomes else 0.0
    ratios = [r for o in outcomes if (r := o.cost_ratio) is not None]
    return share, statistics.median(ratios) if ratios else None


def table(outcomes: Sequence[Outcome]) -> str:
    """The Markdown table: one line per target."""
    lines = ["| group | target ms/tok | c | published cheapest | $/1M | recommended | $/1M | ratio | match |",
             "|---|--:|--:|---|--:|---|--:|--:|:-:|"]
    for o in outcomes:
        rec_cost = "-" if o.recommended_usd_per_1m is None else f"{o.recommended_usd_per_1m:.2f}"
        if o.cost_from == "pred":
            rec_cost += " pred"
        ratio = "-" if o.cost_ratio is None else f"{o.cost_ratio:.2f}"
        lines.append(f"| {o.group} | {o.target_ms} | {o.concurrency} | {o.published} | "
                     f"{o.published_usd_per_1m:.2f} | {o.recommended or 'nothing meets'} | {rec_cost} | {ratio} | "
                     f"{'yes' if o.matched else 'no'} |")
    return "\n".join(lines)


def summary(outcomes: Sequence[Outcome]) -> str:
    """One line per source and per group: targets, share matched, median cost ratio."""
    keys = dict.fromkeys([o.group.split()[0] for o in outcomes] + [o.group for o in outcomes])
    lines = ["| targets of | n | pick = published cheapest | its instance type | median cost ratio |",
             "|---|--:|--:|--:|--:|"]
    for key in ["all", *keys]:
        members = [o for o in outcomes if key == "all" or o.group == key or o.group.split()[0] == key]
        share, median_ratio = agreement(members)
        same_type = sum(o.same_instance_type for o in members) / len(members)
        ratio = "-" if median_ratio is None else f"{median_ratio:.2f}"
        lines.append(f"| {key} | {len(members)} | {share * 100:.0f} % | {same_type * 100:.0f} % | {ratio} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the table and the agreement figure."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--only", help="only groups whose name contains this, e.g. 'js llama2-7b'")
    ap.add_argument("--json", type=Path, help="also write the outcomes here")
    ap.add_argument("--holdout", action="store_true",
                    help=f"each source with constants fitted without it; FMBench's levels of {HOLDOUT_CSV.name} join")
    args = ap.parse_args(argv)
    outcomes = held_out_study(args.only) if args.holdout else run_study(load_rows(args.csv), args.only)
    print(table(outcomes))
    print()
    print(summary(outcomes))
    share, median_ratio = agreement(outcomes)
    ratio = "-" if median_ratio is None else f"{median_ratio:.2f}"
    same_type = sum(o.same_instance_type for o in outcomes) / len(outcomes) if outcomes else 0.0
    print(f"\n{len(outcomes)} targets: the pick is the published cheapest deployment in {share * 100:.0f} % and "
          f"on its instance type in {same_type * 100:.0f} %; median cost ratio (recommended ÷ published cheapest) "
          f"{ratio}")
    if args.json:
        args.json.write_text(json.dumps([asdict(o) | {"matched": o.matched, "same_instance_type": o.same_instance_type,
                                                      "cost_ratio": o.cost_ratio} for o in outcomes], indent=2))


if __name__ == "__main__":
    main()

"""What a recommendation leaves in --out: frontier.md, recommendation.json, frontier.png, the pick's profile."""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from sagellm.errors import InputError
from sagellm.profiles import design_for
from sagellm.recommend.choose import (
    Recommendation,
    binding_limit,
    engine_verdict,
    passed_over_for_headroom,
    worst_tightness,
)
from sagellm.recommend.search import BASE_PROFILE, Candidate
from sagellm.recommend.slo import bounds, describe_rule, margin
from sagellm.results.gate import Rule
from sagellm.results.report import writable_folder_errors

MODEL_NOTE = ("predicted from simulated requests: each candidate's endpoint runs the emulator's engine on a virtual "
              "clock at the target load (Poisson arrivals for a rate, warm-up discarded), and every percentile is that "
              "of the simulated requests, queueing included; candidates the planner's mean model rules out (cannot "
              "fit, cannot sustain the load, far off the SLO) are not simulated, nor those costing more than their "
              "engine's cheapest that meets the SLO (--simulate-all simulates them), and each candidate's predicted_by "
              "says which; the step times are the planner's, so bench the pick before trusting a tight percentile")
# What recommendation.json keeps of a simulated level (the rest is in the bench's LevelSummary).
SIMULATED_FIELDS = {"requests", "error_rate", "throughput_tokens_per_s", "requests_per_s", "ttft_ms", "itl_ms",
                    "e2e_s", "latency_ms_per_token"}


def profile_name(model_id: str) -> str:
    """`recommended-llama-2-7b-hf`: a profile name from the model id."""
    return "recommended-" + re.sub(r"[^a-z0-9]+", "-", model_id.split("/")[-1].lower()).strip("-")


def profile_body(rec: Recommendation, model_id: str) -> dict[str, Any]:
    """The pick as a profile: the matching standard profile with instance, TP, copies, count and engine pinned."""
    pick = rec.pick
    assert pick is not None
    c = pick.config
    ic = c.endpoint_kind == "inference-component"
    extends = BASE_PROFILE[c.endpoint_kind] if rec.peak is None or ic else "autoscale"
    serving: dict[str, Any] = {"tensor_parallel": c.tensor_parallel}
    if c.quantization != "none":
        serving["quantization"] = c.quantization
    body: dict[str, Any] = {
        "name": profile_name(model_id),
        "description": f"sagellm recommend: {model_id} at {rec.load.name}, {pick.label()}",
        "extends": extends,
        "container": {"kind": c.engine},
        "instance_type": c.instance_type,
        "initial_instance_count": pick.instance_count,
        "serving": serving,
    }
    if ic:
        body["components"] = {"copies": c.copies}
    if rec.peak is not None:
        body["autoscaling"] = {"min_capacity": rec.peak.min_capacity, "max_capacity": rec.peak.max_capacity,
                               "target_value": rec.peak.target_value}
    body["payload"] = {"input_tokens": rec.payload.input_tokens, "output_tokens": rec.payload.output_tokens}
    return body


def write_profile(rec: Recommendation, model_id: str, folder: Path) -> Path:
    """Write the pick's profile into `folder` and resolve it through the one validation path (what `profiles
    validate` and `cdk synth` run): a profile the recommendation cannot deploy is a bug, not a file."""
    body = profile_body(rec, model_id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{body['name']}.yaml"
    header = f"# Written by `sagellm recommend`; {MODEL_NOTE}.\n"
    path.write_text(header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True), encoding="utf-8")
    design_for(body["name"], model_id, payload=rec.payload, region=rec.design.region if rec.design else "us-east-1",
               profiles_dir=folder)
    return path


def _fmt(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _with_margin(rule: Rule, value: float | None) -> str:
    """`55.4 (93 %)`: a rule's value and its margin to the limit (negative: it misses by that much)."""
    if value is None:
        return _fmt(value)
    m = margin(rule, value)
    return _fmt(value) + (f" ({m * 100:.0f} %)" if math.isfinite(m) else "")


def frontier_markdown(rec: Recommendation) -> str:
    """The frontier as a Markdown table: the deployment (its instance count included), $/h of all its instances
    and $/1M tokens against each SLO rule with its margin, the pick marked."""
    head = ["", "deployment", "$/h", "$/1M tokens", *(f"{r.label} (margin)" for r in rec.rules), "meets SLO"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in rec.frontier:
        mark = "**pick**" if c is rec.pick else ""
        cells = [mark, c.label(), _fmt(c.usd_per_h), _fmt(c.usd_per_1m_tokens),
                 *(_with_margin(r, c.values.get(r.label)) for r in rec.rules), "yes" if c.meets else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + _verified_markdown(rec)) + "\n"


def _verified_markdown(rec: Recommendation) -> list[str]:
    """--verify: where it benched, each verified candidate's measured ÷ predicted, and the correction."""
    if not rec.verification:
        return []
    v = rec.verification
    lines = ["", f"Verified on the {v['target']} target (measured ÷ predicted at {rec.load.name}):", ""]
    for bench in v["candidates"]:
        ratios = ", ".join(f"{label} ×{r:.2f}" for label, r in bench["measured_over_predicted"].items()
                           if r is not None)
        state = "meets" if bench["meets_slo_measured"] else "misses"
        lines.append(f"- {bench['deployment']}: {state} the SLO as measured; {ratios or bench['error'] or '–'}")
    lines += ["", *(f"Correction: {line}" for line in v["correction"])]
    return lines


def _candidate(c: Candidate, rec: Recommendation) -> dict[str, Any]:
    return {
        "deployment": c.label(),
        **asdict(c.config),
        "instance_count": c.instance_count,
        "usd_per_h": c.usd_per_h,
        "usd_per_1m_tokens": c.usd_per_1m_tokens,
        "concurrency": c.concurrency,
        "predicted_by": c.predicted_by,
        "prediction": asdict(c.point) if c.point is not None else None,  # the mean model's
        "simulated": c.summary.model_dump(include=SIMULATED_FIELDS) if c.summary is not None else None,
        "slo": c.values,
        "margins": {r.label: _margin_json(r, c.values.get(r.label)) for r in rec.rules},
        "meets_slo": c.meets,
        "why_not": rec.reason(c) or None,
    }


def _margin_json(rule: Rule, value: float | None) -> dict[str, Any]:
    m = margin(rule, value) if value is not None else None
    return {"predicted": value, "limit": bounds(rule), "margin_pct": round(m * 100, 1) if m is not None and
            math.isfinite(m) else None, "text": describe_rule(rule, value)}


def recommendation_json(rec: Recommendation, model_id: str, profile: Path | None) -> dict[str, Any]:
    """Every candidate with its prediction, the pick, the frontier, and why each loser lost."""
    gaps = None
    if rec.closest is not None:
        gaps = {g.rule.label: {"predicted": g.value, "gap_pct": round(g.relative * 100, 1)} for g in rec.closest.gaps}
    return {
        "model": model_id,
        "payload": asdict(rec.payload),
        "load": asdict(rec.load),
        "slo": [r.label for r in rec.rules],
        "model_note": MODEL_NOTE,
        "pick": _candidate(rec.pick, rec) if rec.pick is not None else None,
        "engines": sorted({c.config.engine for c in rec.candidates if c.config.engine != "-"}),
        "engine_verdict": engine_verdict(rec),
        "profile": str(profile) if profile is not None else None,
        "peak": asdict(rec.peak) | {"peak": asdict(rec.peak.peak)} if rec.peak is not None else None,
        "closest": (_candidate(rec.closest, rec) | {"gaps": gaps}) if rec.closest is not None else None,
        "binding_limit": binding_limit(rec) if rec.pick is None else None,
        "headroom_pct": round(rec.headroom * 100, 1),
        "passed_over_for_headroom": [c.label() for c in passed_over_for_headroom(rec)],
        "frontier": [c.label() for c in rec.frontier],
        "notes": rec.notes,
        "verify": rec.verification or None,
        "candidates": [_candidate(c, rec) for c in rec.candidates],
    }


def plot_frontier(rec: Recommendation, path: Path) -> None:
    """frontier.png: every predicted candidate's $/h against its worst SLO tightness, the frontier and the pick."""
    # Object-oriented Agg canvas imported here: no pyplot state, no cost unless a plot is drawn.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    # Only finite, positive tightness goes on the log axis (a rule at an unsustainable load has none).
    predicted = [c for c in rec.candidates if c.problem is None and 0 < worst_tightness(c, rec.rules) < math.inf]
    for meets, color, label in ((True, "tab:green", "meets the SLO"), (False, "tab:gray", "misses it")):
        group = [c for c in predicted if c.meets == meets]
        ax.scatter([c.usd_per_h for c in group], [worst_tightness(c, rec.rules) for c in group], s=12,
                   color=color, alpha=0.6, label=label)
    front = [c for c in rec.frontier if c in predicted]
    ax.step([c.usd_per_h for c in front], [worst_tightness(c, rec.rules) for c in front], where="post",
            color="tab:blue", label="frontier")
    if rec.pick is not None and rec.pick in predicted:
        ax.scatter([rec.pick.usd_per_h], [worst_tightness(rec.pick, rec.rules)], marker="*", s=250,
                   color="tab:red", zorder=5, label=f"pick: {rec.pick.label()}")
    ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1)
    if predicted:
        ax.set_xscale("log")
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no candidate with a prediction to plot", ha="center", transform=ax.transAxes)
    ax.set_xlabel("$/h (whole endpoint)")
    ax.set_ylabel("worst SLO metric ÷ its limit (≤ 1 meets)")
    ax.set_title(f"Predicted frontier at {rec.load.name}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def check_out(out: Path) -> None:
    """InputError, before any search or bench, when `out` cannot be made or written (a file in the way, no
    permission)."""
    if problems := writable_folder_errors(out, "--out"):
        raise InputError(problems)


def write_all(rec: Recommendation, model_id: str, out: Path) -> dict[str, Any]:
    """Write every output into `out`; → the JSON written. An OS error is one InputError line naming the path, and
    what this call wrote is removed again (no half-written recommendation)."""
    existed = out.exists()
    before = set(out.rglob("*")) if out.is_dir() else set()
    try:
        out.mkdir(parents=True, exist_ok=True)
        profile = write_profile(rec, model_id, out / "profiles") if rec.pick is not None else None
        (out / "frontier.md").write_text(frontier_markdown(rec), encoding="utf-8")
        data = recommendation_json(rec, model_id, profile)
        (out / "recommendation.json").write_text(json.dumps(data, indent=2, allow_nan=False, default=str) + "\n",
                                                 encoding="utf-8")
        plot_frontier(rec, out / "frontier.png")
    except OSError as exc:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        for path in sorted(set(out.rglob("*")) - before, reverse=True):  # deepest first: files, then their folders
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()
        raise InputError(f"--out: cannot write {exc.filename or out}: {exc.strerror or exc}; choose a folder you "
                         "can write to (nothing of this recommendation was kept)") from None
    return data

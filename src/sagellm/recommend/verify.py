"""`--verify K`: bench the K cheapest candidates predicted to meet the SLO, one at a time, and re-rank on what
was measured (the local emulator by default)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sagellm.recommend.choose import Recommendation, size_for_peak
from sagellm.recommend.search import Candidate
from sagellm.recommend.slo import Gap, Load, gap_of
from sagellm.recommend.write import profile_body
from sagellm.results.schema import Level, Results

# The step above the target load that shows the headroom left (× the rate or the concurrency).
HEADROOM_STEP = 1.5


@dataclass
class Verified:
    """One candidate benched: what it measured at the target load against what was predicted."""

    candidate: Candidate
    results: Path
    measured: dict[str, float | None] = field(default_factory=dict)  # rule label → measured value
    gaps: list[Gap] = field(default_factory=list)
    headroom: dict[str, float | None] = field(default_factory=dict)  # rule metric → measured one step above
    error: str | None = None  # the bench did not finish, or the target load was not measured

    @property
    def meets(self) -> bool:
        """Measured to meet every rule at the target load."""
        return self.error is None and not self.gaps

    def ratios(self) -> dict[str, float | None]:
        """Measured ÷ predicted, per rule."""
        out: dict[str, float | None] = {}
        for label, measured in self.measured.items():
            predicted = self.candidate.values.get(label)
            out[label] = measured / predicted if measured is not None and predicted else None
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form for recommendation.json."""
        return {"deployment": self.candidate.label(), "results": str(self.results), "measured": self.measured,
                "measured_over_predicted": self.ratios(), "headroom": self.headroom,
                "meets_slo_measured": self.meets, "error": self.error}


def step_above(load: Load) -> Load:
    """The next load up, for headroom."""
    if load.request_rate is not None:
        return Load(request_rate=round(load.request_rate * HEADROOM_STEP, 3))
    assert load.concurrency is not None
    return Load(concurrency=math.ceil(load.concurrency * HEADROOM_STEP))


def _level(results: Results, load: Load) -> Level | None:
    return next((lv for lv in results.levels
                 if lv.concurrency == load.concurrency and lv.request_rate == load.request_rate), None)


def _measured(metric: str, level: Level, usd_per_h: float) -> float | None:
    """A rule's metric off a measured level (cost at its measured throughput)."""
    if metric == "cost.usd_per_h":
        return usd_per_h
    if metric == "cost.usd_per_1m_tokens":
        tput = level.throughput_tokens_per_s
        return 1e6 / tput / 3600 * usd_per_h if tput > 0 else None
    value: Any = level
    for part in metric.split("."):
        value = getattr(value, part, None) if value is not None else None
    return None if value is None else float(value)


def verify(rec: Recommendation, model_id: str, k: int, out: Path, *, time_scale: float, budget_minutes: float,
           say: Callable[[str], None]) -> list[Verified]:
    """Bench the K cheapest SLO-meeting candidates on the local emulator, one at a time, within the budget;
    then make the cheapest measured to meet the SLO the pick (or none, when none does)."""
    from sagellm import bench

    meeting = sorted((c for c in rec.candidates if c.meets and id(c) not in rec.skipped_for_peak),
                     key=lambda c: c.usd_per_h)
    rules = rec.rules
    above = step_above(rec.load)
    folder = out / "verify"
    profiles = folder / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done: list[Verified] = []
    for i, candidate in enumerate(meeting[:k], 1):
        if time.monotonic() - started > budget_minutes * 60:
            say(f"verify: budget of {budget_minutes:g} min spent after {len(done)} candidate(s)")
            break
        body = profile_body(_fixed(rec, candidate), model_id) | {"name": f"verify-{i}"}
        (profiles / f"verify-{i}.yaml").write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        load: bench.Load
        if rec.load.request_rate is not None and above.request_rate is not None:
            load = bench.Open(request_rate=(rec.load.request_rate, above.request_rate), arrivals="poisson")
        else:
            load = bench.Closed(concurrency=(rec.load.concurrency or 1, above.concurrency or 1))
        say(f"verify {i}/{min(k, len(meeting))}: {candidate.label()} at {rec.load.name} and {above.name}")
        result_dir = folder / f"run-{i}"
        outcome = bench.run(bench.Bench(
            serving=bench.Serving(profile=body["name"], model=model_id, profiles_dir=profiles),
            target=bench.Local(time_scale=time_scale), load=load, output=bench.Output(result_dir)),
            say=lambda *_a, **_k: None)
        v = Verified(candidate, result_dir)
        level = _level(outcome.results, rec.load)
        if outcome.error is not None or level is None:
            v.error = outcome.error or f"{rec.load.name} was not measured"
        else:
            for rule in rules:
                v.measured[rule.label] = value = _measured(rule.metric, level, candidate.usd_per_h)
                if (gap := gap_of(rule, value)) is not None:
                    v.gaps.append(gap)
            if (top := _level(outcome.results, above)) is not None:
                v.headroom = {r.metric: _measured(r.metric, top, candidate.usd_per_h) for r in rules}
        done.append(v)
    _rerank(rec, done)
    return done


def _fixed(rec: Recommendation, candidate: Candidate) -> Recommendation:
    """The recommendation as if this candidate were the pick, without autoscaling (benched at a fixed count)."""
    return Recommendation(rec.load, rec.rules, rec.payload, rec.candidates, candidate, None, None, None, [], {})


def _rerank(rec: Recommendation, verified: list[Verified]) -> None:
    """The cheapest candidate measured to meet the SLO (and sizable for the peak) becomes the pick; when none
    measured does, there is no pick and the closest is the verified one with the smallest measured miss."""
    if not verified:
        return
    rec.verification = [v.to_dict() for v in verified]
    for v in verified:
        if not v.meets:
            rec.measured_misses[id(v.candidate)] = "measured: " + (v.error or "; ".join(g.describe() for g in v.gaps))
    peak = rec.peak.peak if rec.peak is not None else None
    rec.pick = rec.design = rec.peak = None
    for v in sorted((v for v in verified if v.meets), key=lambda v: v.candidate.usd_per_h):
        design = rec.designs[v.candidate.config]
        sizing = size_for_peak(v.candidate, design, rec.payload, peak, rec.rules) if peak is not None else None
        if peak is None or sizing is not None:
            rec.pick, rec.design, rec.peak = v.candidate, design, sizing
            return
    rec.closest = min((v.candidate for v in verified if v.error is None), default=verified[0].candidate,
                      key=lambda c: max((g.relative for g in _gaps(verified, c)), default=math.inf))


def _gaps(verified: list[Verified], candidate: Candidate) -> list[Gap]:
    return next(v.gaps for v in verified if v.candidate is candidate)

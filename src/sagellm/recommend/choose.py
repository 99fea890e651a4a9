"""From the predicted candidates to the pick: the cheapest that meets the SLO (sized for a peak if asked),
the Pareto frontier, and why each other candidate lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sagellm.planner import Payload
from sagellm.profiles import Design
from sagellm.recommend.search import MAX_INSTANCES, Candidate, Config, Search, evaluate
from sagellm.recommend.simulated import Simulator
from sagellm.recommend.slo import Load, tightness
from sagellm.results.gate import Rule


@dataclass(frozen=True)
class PeakSizing:
    """Autoscaling for a peak rate: from the target load's count to the peak's, tracking a per-container target."""

    peak: Load
    min_capacity: int  # instances (inference components: copies)
    max_capacity: int
    target_value: float  # concurrent requests per instance (per copy) at the peak, with max_capacity running
    peak_concurrency: int  # endpoint-wide, at the peak


@dataclass
class Recommendation:
    """Everything `sagellm recommend` found."""

    load: Load
    rules: tuple[Rule, ...]
    payload: Payload
    candidates: list[Candidate]
    pick: Candidate | None
    closest: Candidate | None  # when nothing meets the SLO
    peak: PeakSizing | None
    design: Design | None  # the pick's design (for its profile)
    notes: list[str]
    skipped_for_peak: dict[int, str]  # id(candidate) → why a cheaper SLO-meeting candidate was passed over
    designs: dict[Config, Design] = field(default_factory=dict)  # every config's design (to size and write)
    measured_misses: dict[int, str] = field(default_factory=dict)  # id(candidate) → what --verify measured
    verification: dict[str, Any] = field(default_factory=dict)  # --verify: target, benches, correction

    @property
    def frontier(self) -> list[Candidate]:
        """Predicted candidates no other beats on both $/h and worst SLO tightness (cheapest first)."""
        return pareto(self.candidates, self.rules)

    def reason(self, candidate: Candidate) -> str:
        """Why a candidate is not the pick (empty for the pick)."""
        if candidate is self.pick:
            return ""
        if candidate.problem is not None:
            return candidate.problem
        if candidate.gaps:
            return "; ".join(g.describe() for g in candidate.gaps)
        if id(candidate) in self.measured_misses:
            return self.measured_misses[id(candidate)]
        if id(candidate) in self.skipped_for_peak:
            return self.skipped_for_peak[id(candidate)]
        if self.pick is not None and self.pick.usd_per_h > 0:
            return f"costs {candidate.usd_per_h / self.pick.usd_per_h:.2f}× the pick"
        return "not picked"


def worst_tightness(candidate: Candidate, rules: Sequence[Rule]) -> float:
    """The rule the candidate comes closest to breaking, as value ÷ limit (above 1 misses)."""
    return max((tightness(r, candidate.values.get(r.label)) for r in rules), default=0.0)


def pareto(candidates: Sequence[Candidate], rules: Sequence[Rule]) -> list[Candidate]:
    """The cost–latency frontier: sorted by $/h, keep each one tighter than every cheaper one."""
    predicted = [c for c in candidates if c.problem is None]
    predicted.sort(key=lambda c: (c.usd_per_h, worst_tightness(c, rules)))
    out: list[Candidate] = []
    best = float("inf")
    for c in predicted:
        t = worst_tightness(c, rules)
        if t < best:
            out.append(c)
            best = t
    return out


def closest(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate whose worst miss is smallest (cheapest on a tie)."""
    predicted = [c for c in candidates if c.problem is None]
    return min(predicted, key=lambda c: (max((g.relative for g in c.gaps), default=0.0), c.usd_per_h), default=None)


def size_for_peak(candidate: Candidate, design: Design, payload: Payload, peak: Load,
                  rules: Sequence[Rule], simulator: Simulator | None = None) -> PeakSizing | None:
    """The fewest instances (copies for inference components) that meet the SLO at the peak; None past the cap."""
    copies = candidate.config.copies
    for count in range(candidate.instance_count, MAX_INSTANCES + 1):
        at_peak = Candidate(candidate.config, count, candidate.usd_per_h / candidate.instance_count * count)
        evaluate(at_peak, design.shape(count), payload, peak, rules, simulator)
        if at_peak.meets:
            assert at_peak.concurrency is not None
            containers = count * copies
            return PeakSizing(peak, candidate.instance_count * copies, containers,
                              round(max(1.0, at_peak.concurrency / containers), 2), at_peak.concurrency)
    return None


def choose(found: Search, load: Load, rules: Sequence[Rule], payload: Payload,
           peak: Load | None = None) -> Recommendation:
    """The cheapest candidate meeting the SLO at the load (and, with a peak, sizable for it within the cap)."""
    meeting = sorted((c for c in found.candidates if c.meets),
                     key=lambda c: (c.usd_per_h, worst_tightness(c, rules)))
    skipped: dict[int, str] = {}
    pick = sizing = None
    for c in meeting:
        design = found.designs[c.config]
        if peak is None:
            pick = c
            break
        sizing = size_for_peak(c, design, payload, peak, rules, found.simulators.get(c.config))
        if sizing is not None:
            pick = c
            break
        skipped[id(c)] = f"cannot meet the SLO at the peak {peak.name} within {MAX_INSTANCES} instances"
    return Recommendation(
        load=load, rules=tuple(rules), payload=payload, candidates=found.candidates, pick=pick,
        closest=None if pick is not None else closest(found.candidates), peak=sizing,
        design=found.designs[pick.config] if pick is not None else None, notes=list(found.notes),
        skipped_for_peak=skipped, designs=found.designs)

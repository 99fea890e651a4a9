"""From the predicted candidates to the pick: the cheapest that meets the SLO (sized for a peak if asked),
the Pareto frontier, and why each other candidate lost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sagellm.catalog import find_instance
from sagellm.engines import ENGINES
from sagellm.planner import Payload
from sagellm.planner.constants import MEASURED
from sagellm.profiles import Design
from sagellm.recommend.search import (
           CONTEXT,
           DEFAULT_HEADROOM,
           INSTANCES,
           MAX_INSTANCES,
           MEMORY,
           Candidate,
           Config,
           Search,
           evaluate,
           least_margin,
           margin_to,
)
from sagellm.recommend.simulated import Simulator
from sagellm.recommend.slo import Load, bounds, describe_rule, tightness
from sagellm.results.gate import Rule
from sagellm.results.schema import RequestSlo


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
    headroom: float = DEFAULT_HEADROOM  # the relative margin to every rule a pick needs
    short_of_headroom: dict[int, str] = field(default_factory=dict)  # id(candidate) → meets only without headroom
    slo: RequestSlo | None = None  # per-request SLOs of the attainment and goodput rules (a verify bench's too)

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
        if id(candidate) in self.short_of_headroom:
            return self.short_of_headroom[id(candidate)]
        if self.pick is not None and self.pick.usd_per_h > 0:
            return f"costs {candidate.usd_per_h / self.pick.usd_per_h:.2f}× the pick"
        return "not picked"


def worst_tightness(candidate: Candidate, rules: Sequence[Rule]) -> float:
    """The rule the candidate comes closest to breaking, as value ÷ limit (above 1 misses)."""
    return max((tightness(r, candidate.values.get(r.label)) for r in rules), default=0.0)


def rank(candidate: Candidate, rules: Sequence[Rule]) -> tuple[float, float, bool]:
    """Cheapest first, then the most margin; an exact tie goes to an engine upstream still develops (TGI is in
    maintenance mode), then to registry order (the sort is stable)."""
    return candidate.usd_per_h, worst_tightness(candidate, rules), _unmaintained(candidate.config.engine)


def pareto(candidates: Sequence[Candidate], rules: Sequence[Rule]) -> list[Candidate]:
    """The cost–latency frontier: sorted by $/h, keep each one tighter than every cheaper one."""
    predicted = [c for c in candidates if c.problem is None]
    predicted.sort(key=lambda c: rank(c, rules))
    out: list[Candidate] = []
    best = float("inf")
    for c in predicted:
        t = worst_tightness(c, rules)
        if t < best:
            out.append(c)
            best = t
    return out


def closest(candidates: Sequence[Candidate], rules: Sequence[Rule], load: Load) -> Candidate | None:
    """The candidate nearest to being picked (cheapest on a tie). First those that run at the load, by their
    thinnest margin to any rule (a miss is a negative margin); then those too few instances carry the load, by
    how far short their capacity falls of the rate; then those that cannot run, the most GPU memory first."""
    def distance(c: Candidate) -> tuple[int, float, float]:
        if c.problem is None:
            return 0, -least_margin(c, rules), c.usd_per_h
        if c.limit == INSTANCES:
            short = load.request_rate / c.capacity_rps - 1 if load.request_rate and c.capacity_rps else math.inf
            return 1, short, c.usd_per_h
        inst = find_instance(c.config.instance_type)
        return 2, -inst.n_accelerators * inst.mem_per_accel_gb, c.usd_per_h
    return min(candidates, key=distance, default=None)


def binding_limit(rec: Recommendation) -> str:
    """Why nothing is picked: the limit that stops the closest candidate (its numbers: `closest_numbers`)."""
    c = rec.closest
    if c is None:
        skipped = "; ".join(n for n in rec.notes if "not searched" in n) or "no instance type given"
        return f"binding limit: no instance searched ({skipped}; name GPU instance types, or leave --instances out)"
    if id(c) in rec.measured_misses:
        return f"binding limit: {rec.measured_misses[id(c)]}"
    if c.limit == INSTANCES:
        return f"binding limit: instance count (no searched deployment carries {rec.load.name} at up to " \
               f"{MAX_INSTANCES} instances, one for inference components)"
    if c.limit == MEMORY:
        return "binding limit: memory (the model does not fit any searched instance type)"
    if c.limit == CONTEXT:
        return f"binding limit: context ({c.problem}: shorten --input-tokens / --output-tokens)"
    if c.problem is not None:
        return f"binding limit: {c.limit} ({c.problem})"
    if c.meets:
        thinnest = min(rec.rules, key=lambda r: margin_to(c, r))
        return (f"binding limit: headroom (the closest meets {thinnest.metric} with "
                f"{margin_to(c, thinnest) * 100:.0f} % margin; --headroom asks {rec.headroom * 100:.0f} %)")
    worst = max(c.gaps, key=lambda g: g.relative)
    value = "no prediction" if worst.value is None else f"predicted {worst.value:.4g}"
    return f"binding limit: {worst.rule.metric} ({value} on the closest, allowed {bounds(worst.rule)})"


def closest_numbers(rec: Recommendation, c: Candidate) -> str:
    """The candidate, its $/h and its value and margin at each rule (or why it has none)."""
    numbers = c.problem or "; ".join(describe_rule(r, c.values.get(r.label)) for r in rec.rules)
    return f"{c.label()} at ${c.usd_per_h:.2f}/h: {numbers}"


def size_for_peak(candidate: Candidate, design: Design, payload: Payload, peak: Load,
                  rules: Sequence[Rule], simulator: Simulator | None = None,
                  headroom: float = 0.0) -> PeakSizing | None:
    """The fewest instances (copies for inference components) that meet the SLO at the peak with the headroom;
    None past the cap."""
    copies = candidate.config.copies
    for count in range(candidate.instance_count, MAX_INSTANCES + 1):
        at_peak = Candidate(candidate.config, count, candidate.usd_per_h / candidate.instance_count * count)
        evaluate(at_peak, design.shape(count), payload, peak, rules, simulator)
        if at_peak.meets and least_margin(at_peak, rules) >= headroom:
            assert at_peak.concurrency is not None
            containers = count * copies
            return PeakSizing(peak, candidate.instance_count * copies, containers,
                              round(max(1.0, at_peak.concurrency / containers), 2), at_peak.concurrency)
    return None


def choose(found: Search, load: Load, rules: Sequence[Rule], payload: Payload,
           peak: Load | None = None) -> Recommendation:
    """The cheapest candidate meeting the SLO at the load with the search's headroom to every rule (and, with
    a peak, sizable for it within the cap); cheaper ones that meet it only without the headroom say so."""
    meeting = sorted((c for c in found.candidates if c.meets), key=lambda c: rank(c, rules))
    skipped: dict[int, str] = {}
    short: dict[int, str] = {}
    pick = sizing = None
    for c in meeting:
        if (thinnest := least_margin(c, rules)) < found.headroom:
            short[id(c)] = (f"meets the SLO with only {thinnest * 100:.0f} % margin on "
                            f"{min(rules, key=lambda r: margin_to(c, r)).label} "
                            f"(--headroom {found.headroom * 100:.0f} %)")
            continue
        design = found.designs[c.config]
        if peak is None:
            pick = c
            break
        sizing = size_for_peak(c, design, payload, peak, rules, found.simulators.get(c.config), found.headroom)
        if sizing is not None:
            pick = c
            break
        skipped[id(c)] = f"cannot meet the SLO at the peak {peak.name} within {MAX_INSTANCES} instances"
    return Recommendation(
        load=load, rules=tuple(rules), payload=payload, candidates=found.candidates, pick=pick,
        closest=None if pick is not None else closest(found.candidates, rules, load), peak=sizing,
        design=found.designs[pick.config] if pick is not None else None, notes=list(found.notes),
        skipped_for_peak=skipped, designs=found.designs, headroom=found.headroom, short_of_headroom=short,
        slo=found.slo)


def engine_verdict(rec: Recommendation) -> str | None:
    """Which engine the pick runs and why it won, against each other engine searched (None with one engine, or
    without a pick: the binding limit says why then)."""
    engines = list(dict.fromkeys(c.config.engine for c in rec.candidates if c.config.engine in ENGINES))
    if rec.pick is None or len(engines) < 2:
        return None
    pick, won = rec.pick, rec.pick.config.engine
    lines, cheaper_elsewhere, tied = [], False, {}
    for engine in (e for e in engines if e != won):
        own = [c for c in rec.candidates if c.config.engine == engine]
        best = _cheapest_meeting(rec, own)
        if best is None:
            near = closest(own, rec.rules, rec.load)
            lines.append(f"{engine} meets it nowhere" + (f" (closest: {near.label()}: {rec.reason(near)})"
                                                          if near is not None else ""))
            continue
        cheaper_elsewhere = True
        if (line := _lost_by(engine, best, pick, rec.rules)) is not None:
            lines.append(line)
        else:
            tied[engine] = best
    if tied:
        named = _and([f"{engine}'s {best.label()}" for engine, best in tied.items()])
        lines.append(f"{named} tie{'s' if len(tied) == 1 else ''} on $/h and margin{_tie_reason([won, *tied])} "
                     f"({_tie_break(won, list(tied), engines)})")
    why = "the cheapest deployment that meets the SLO" if cheaper_elsewhere else \
        "the only engine predicted to meet the SLO"
    headroom = f" with {rec.headroom * 100:.0f} % headroom" if rec.headroom else ""
    return f"engine: {won} won, {why}{headroom} (${pick.usd_per_h:.2f}/h); {'; '.join(lines)}"


def _cheapest_meeting(rec: Recommendation, own: Sequence[Candidate]) -> Candidate | None:
    """An engine's cheapest candidate that the pick could have been: it meets the SLO with the headroom, at the
    peak, and no measurement refuted it (the tighter one first on equal $/h)."""
    return min((c for c in own if c.meets and least_margin(c, rec.rules) >= rec.headroom
                and id(c) not in rec.skipped_for_peak and id(c) not in rec.measured_misses),
               key=lambda c: (c.usd_per_h, worst_tightness(c, rec.rules)), default=None)


def _lost_by(engine: str, best: Candidate, pick: Candidate, rules: Sequence[Rule]) -> str | None:
    """How an engine's cheapest lost to the pick: on $/h, or on margin at the same $/h; None on a tie."""
    if best.usd_per_h > pick.usd_per_h:
        return f"{engine}'s cheapest is {best.label()} at ${best.usd_per_h:.2f}/h"
    if worst_tightness(best, rules) > worst_tightness(pick, rules):
        return (f"{engine}'s cheapest, {best.label()}, costs the same with less margin "
                f"({least_margin(best, rules) * 100:.0f} % against {least_margin(pick, rules) * 100:.0f} %)")
    return None


def _unmaintained(engine: str) -> bool:
    """Whether upstream no longer develops the engine (an exact tie goes to one it does)."""
    return engine in ENGINES and ENGINES[engine].unmaintained is not None


def _tie_break(won: str, tied: Sequence[str], engines: Sequence[str]) -> str:
    """Why the pick's engine won a tie: the others are no longer developed upstream, or registry order."""
    stale = [e for e in tied if _unmaintained(e)]
    if stale and not _unmaintained(won):
        reasons = "; ".join(dict.fromkeys(str(ENGINES[e].unmaintained) for e in stale))
        return f"{won} is chosen over {_and(stale)}: {reasons}" + (
            f"; {_and([e for e in tied if e not in stale])} come after it in the registry: {', '.join(engines)}"
            if len(stale) < len(tied) else "")
    return f"{won} comes first in the registry: {', '.join(engines)}"


def _tie_reason(engines: Sequence[str]) -> str:
    """Why engines tie: predicted equal where they schedule alike and run one generation's fitted step constants
    (else a tie at this load only, said without a reason)."""
    constants = {ENGINES[e].generation(None).constants_from for e in engines}
    schedulers = {ENGINES[e].scheduling for e in engines}
    if len(constants) > 1 or len(schedulers) > 1:
        return ""
    labels = [ENGINES[e].label for e in engines]
    both = "both" if len(labels) == 2 else "all"
    return (f": predicted equal, as {_and(labels)} {both} schedule as {SCHEDULER_LABELS[schedulers.pop()]} does and "
            f"run one set of step times ({MEASURED[constants.pop()][1]}), and no published measurement compares "
            "the pinned versions on one GPU and model (docs/containers.md)")


# How the schedulers are named in a verdict (Engine.scheduling).
SCHEDULER_LABELS = {"tgi": "TGI", "vllm": "vLLM V1", "sglang": "SGLang"}


def _and(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1])))


def passed_over_for_headroom(rec: Recommendation) -> list[Candidate]:
    """Candidates cheaper than the pick that meet the SLO but without the headroom (cheapest first)."""
    if rec.pick is None:
        return []
    return sorted((c for c in rec.candidates if id(c) in rec.short_of_headroom and c.usd_per_h < rec.pick.usd_per_h),
                  key=lambda c: c.usd_per_h)

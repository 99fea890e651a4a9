"""`--verify K`: bench the K cheapest candidates predicted to meet the SLO, one at a time, and re-rank on what
was measured (the local emulator by default, or `--target sagemaker` in the user's account); from a sagemaker
verify, store the measured step-time correction the way `sagellm calibrate` does."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sagellm.errors import ExitStatus, InputError
from sagellm.recommend.choose import Recommendation, size_for_peak
from sagellm.recommend.search import Candidate
from sagellm.recommend.simulated import Simulator
from sagellm.recommend.slo import Gap, Load, gap_of, level_value
from sagellm.recommend.write import profile_body
from sagellm.results.schema import Level, Results

if TYPE_CHECKING:
    from sagellm import bench

# The step above the target load that shows the headroom left (× the rate or the concurrency).
HEADROOM_STEP = 1.5
LOCAL_REPLAYS_PLANNER = ("not stored: the local emulator replays the planner, so it has nothing to correct "
                         "(verify with --target sagemaker to store one)")
OPEN_LOOP_UNFITTABLE = ("not stored: open-loop levels have no concurrency for the step-time fit (verify at "
                        "--concurrency to store one)")


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


@dataclass
class Verification:
    """What `--verify` did: where it benched, each bench, whether it was cut short, and the correction."""

    target: str  # local | sagemaker
    benches: list[Verified] = field(default_factory=list)
    interrupted: bool = False  # a signal stopped the bench in flight (torn down); no other was started
    correction: list[str] = field(default_factory=list)  # calibrate's lines per file written, or why none

    @property
    def ranked(self) -> list[Verified]:
        """The benches to re-rank on: an interrupted one measured nothing about its candidate."""
        return self.benches[:-1] if self.interrupted else self.benches

    def to_dict(self) -> dict[str, Any]:
        """JSON form for recommendation.json."""
        return {"target": self.target, "interrupted": self.interrupted, "correction": self.correction,
                "candidates": [v.to_dict() for v in self.benches]}


def step_above(load: Load) -> Load:
    """The next load up, for headroom."""
    if load.request_rate is not None:
        return Load(request_rate=round(load.request_rate * HEADROOM_STEP, 3))
    assert load.concurrency is not None
    return Load(concurrency=math.ceil(load.concurrency * HEADROOM_STEP))


def _level(results: Results, load: Load) -> Level | None:
    return next((lv for lv in results.levels
                 if lv.concurrency == load.concurrency and lv.request_rate == load.request_rate), None)


def finalists(rec: Recommendation, k: int) -> list[Candidate]:
    """The K cheapest candidates predicted to meet the SLO with the headroom (and not passed over for the peak)."""
    meeting = (c for c in rec.candidates if c.meets and id(c) not in rec.skipped_for_peak
               and id(c) not in rec.short_of_headroom)
    return sorted(meeting, key=lambda c: c.usd_per_h)[:k]


def cost_line(chosen: list[Candidate], budget_minutes: float, region: str) -> str:
    """What benching these in the user's account costs at most: the dearest $/h × the budget."""
    dearest = max(c.usd_per_h for c in chosen)
    return (f"verify on sagemaker ({region}): {len(chosen)} deployment(s) in your account, one at a time; at most "
            f"about ${dearest * budget_minutes / 60:.2f} on demand (${dearest:.2f}/h, the dearest, × the "
            f"{budget_minutes:g}-min budget, plus the bench in flight when it runs out)")


def verify(rec: Recommendation, model_id: str, k: int, out: Path, *, target: bench.Local | bench.SageMaker,
           budget_minutes: float, say: Callable[[str], None], region: str = "us-east-1",
           hf_token_secret: str | None = None, profiles_dir: Path | None = None) -> Verification:
    """Bench the K cheapest SLO-meeting candidates on the target, one at a time, within the budget; make the
    cheapest measured to meet the SLO the pick (or none, when none does); from a sagemaker verify, store the
    correction in `<profiles_dir>/calibration/`. A signal stops the bench in flight (its own teardown runs)
    and starts no other."""
    from sagellm.bench.interrupts import Interrupted, Interrupts

    chosen = finalists(rec, k)
    folder = out / "verify"
    profiles = folder / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    if target.kind == "sagemaker" and chosen:
        say(cost_line(chosen, budget_minutes, region))
    started = time.monotonic()
    done = Verification(target.kind)
    # Each bench catches signals while it runs (its own teardown finishes). Between benches no stack exists: a
    # signal there ends the loop at once, and the candidates benched so far still re-rank and are written.
    with Interrupts(say) as signals:
        try:
            with signals.armed():
                _bench_each(rec, chosen, model_id, target, folder, region, hf_token_secret, budget_minutes,
                            started, done, say)
        except Interrupted as exc:
            done.interrupted = True
            say(f"verify: {exc} between benches; no other candidate benched")
    _rerank(rec, done)
    if not done.interrupted:
        done.correction = _store_correction(done, rec.load, profiles, profiles_dir)
        for line in done.correction:
            say(f"correction: {line}")
    rec.verification = done.to_dict() if done.benches else {}
    return done


def _bench_each(rec: Recommendation, chosen: list[Candidate], model_id: str, target: bench.Local | bench.SageMaker,
                folder: Path, region: str, hf_token_secret: str | None, budget_minutes: float, started: float,
                done: Verification, say: Callable[[str], None]) -> None:
    """Bench the finalists one at a time into `done`, until the budget is spent or a bench is interrupted."""
    from sagellm import bench

    profiles = folder / "profiles"
    for i, candidate in enumerate(chosen, 1):
        if time.monotonic() - started > budget_minutes * 60:
            say(f"verify: budget of {budget_minutes:g} min spent after {len(done.benches)} candidate(s)")
            break
        body = profile_body(_fixed(rec, candidate), model_id) | {"name": f"verify-{i}"}
        (profiles / f"verify-{i}.yaml").write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        say(f"verify {i}/{len(chosen)} on {target.kind}: {candidate.label()} at {rec.load.name} and "
            f"{step_above(rec.load).name}")
        outcome = bench.run(bench.Bench(
            serving=bench.ServingSpec(profile=body["name"], model=model_id, profiles_dir=profiles, region=region,
                                  hf_token_secret=hf_token_secret),
            # The two levels asked for and no others (an adaptive sweep would go on to the knee and the max).
            target=target, load=_bench_load(rec.load), sweep=bench.Sweep(method="doubling"),
            gate=bench.Gate(slo=rec.slo), output=bench.Output(folder / f"run-{i}")),
            # In the user's account, deploy and teardown progress (and "tearing down — please wait") are shown.
            say=say if target.kind == "sagemaker" else lambda _line: None)
        done.benches.append(_verified(candidate, folder / f"run-{i}", outcome.results, outcome.error, rec))
        if outcome.exit_status == ExitStatus.INTERRUPTED:
            done.interrupted = True
            say(f"verify: {outcome.error}; no other candidate benched")
            break


def _bench_load(load: Load) -> bench.LoadSpec:
    """The target load and one step above it, as the bench's load."""
    from sagellm import bench

    above = step_above(load)
    if load.request_rate is not None and above.request_rate is not None:
        return bench.Open(request_rate=(load.request_rate, above.request_rate), arrivals="poisson")
    return bench.Closed(concurrency=(load.concurrency or 1, above.concurrency or 1))


def _verified(candidate: Candidate, result_dir: Path, results: Results, error: str | None,
              rec: Recommendation) -> Verified:
    """One bench's outcome against the candidate's prediction, rule by rule."""
    v = Verified(candidate, result_dir)
    level = _level(results, rec.load) if error is None else None
    if level is None:
        v.error = error or f"{rec.load.name} was not measured"
        return v
    for rule in rec.rules:
        v.measured[rule.label] = value = level_value(rule.metric, level, candidate.usd_per_h)
        if (gap := gap_of(rule, value)) is not None:
            v.gaps.append(gap)
    if (top := _level(results, step_above(rec.load))) is not None:
        v.headroom = {r.metric: level_value(r.metric, top, candidate.usd_per_h) for r in rec.rules}
    return v


def _store_correction(done: Verification, load: Load, verify_profiles: Path, profiles_dir: Path | None) -> list[str]:
    """Fit and store the step-time correction from the finished benches through `sagellm calibrate`'s own path,
    one model × instance type × engine at a time; → the lines it wrote, or one line per group saying why not."""
    from sagellm.results.calibrate_planner import calibrate_runs

    if done.target != "sagemaker":
        return [LOCAL_REPLAYS_PLANNER]
    if load.request_rate is not None:
        return [OPEN_LOOP_UNFITTABLE]
    groups: dict[tuple[str, str], list[Path]] = {}
    for v in done.benches:
        if v.error is None:
            groups.setdefault((v.candidate.config.instance_type, v.candidate.config.engine), []).append(v.results)
    lines = []
    for (instance_type, engine), runs in groups.items():
        try:
            lines += calibrate_runs(runs, profiles_dir, runs_profiles_dir=verify_profiles, accept_emulated=True)
        except InputError as exc:
            lines.append(f"not stored for {instance_type} {engine}: {exc.messages[0]}")
    return lines or ["not stored: no bench finished"]


def _fixed(rec: Recommendation, candidate: Candidate) -> Recommendation:
    """The recommendation as if this candidate were the pick, without autoscaling (benched at a fixed count)."""
    return Recommendation(rec.load, rec.rules, rec.payload, rec.candidates, candidate, None, None, None, [], {})


def _rerank(rec: Recommendation, done: Verification) -> None:
    """The cheapest candidate measured to meet the SLO (and sizable for the peak) becomes the pick; when none
    measured does, there is no pick and the closest is the verified one with the smallest measured miss."""
    verified = done.ranked
    if not verified:
        return
    for v in verified:
        if not v.meets:
            rec.measured_misses[id(v.candidate)] = "measured: " + (v.error or "; ".join(g.describe() for g in v.gaps))
    peak = rec.peak.peak if rec.peak is not None else None
    rec.pick = rec.design = rec.peak = None
    for v in sorted((v for v in verified if v.meets), key=lambda v: v.candidate.usd_per_h):
        design = rec.designs[v.candidate.config]
        # An attainment or goodput rule is a share of requests, which only simulated ones have.
        simulator = Simulator(design, rec.payload, slo=rec.slo) if rec.slo is not None else None
        sizing = size_for_peak(v.candidate, design, rec.payload, peak, rec.rules, simulator) \
            if peak is not None else None
        if peak is None or sizing is not None:
            rec.pick, rec.design, rec.peak = v.candidate, design, sizing
            return
    rec.closest = min((v.candidate for v in verified if v.error is None), default=verified[0].candidate,
                      key=lambda c: max((g.relative for g in _gaps(verified, c)), default=math.inf))


def _gaps(verified: list[Verified], candidate: Candidate) -> list[Gap]:
    return next(v.gaps for v in verified if v.candidate is candidate)

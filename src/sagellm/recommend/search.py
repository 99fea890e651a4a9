"""The search: every deployable shape of the model in the catalog, predicted at the target load."""

from __future__ import annotations

import heapq
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sagellm.catalog import Instance, Model, check_offered, find_instance, instances
from sagellm.catalog.pricing import PRICES_ENV, unknown_why
from sagellm.engines import ENGINES, engine_for, kinds_on
from sagellm.errors import InputError
from sagellm.planner import Payload, Point, Shape, fitting_tps, predict_point, usd_per_1m_tokens, valid_tp
from sagellm.profiles import Design, design_for
from sagellm.profiles.calibration import calibration_dir
from sagellm.recommend.simulated import Simulator
from sagellm.recommend.slo import Gap, Load, gap_of, level_value, margin, predicted_value
from sagellm.results.gate import SLO_METRICS, Rule, level_name
from sagellm.results.schema import LevelSummary, RequestSlo

# Most instances one endpoint is sized to (SageMaker quotas are usually lower; beyond this, say so).
MAX_INSTANCES = 64
# The standard profile each endpoint kind extends (inference components: copies = GPUs ÷ TP).
BASE_PROFILE = {"instance": "max-throughput", "inference-component": "replicas"}
# A rule the mean model misses by more than this (relative to its limit) is missed: queueing only adds to
# latency percentiles, so such a candidate is not simulated.
FAR_OFF = 0.5
ANALYTIC = "analytic model"
# A pick meets every rule with at least this relative margin (`--headroom`): predictions are not exact.
DEFAULT_HEADROOM = 0.10
# A candidate that meets the SLO short of the headroom gets another instance only while that widens its
# thinnest margin by this much (a step-time floor such as ITL at batch 1 no instance count lowers).
HEADROOM_GAIN = 0.01
# What stops a candidate that has no prediction to hold against the SLO (Candidate.limit).
MEMORY, CONTEXT, PROFILE, INSTANCES = "memory", "context", "profile", "instance count"


@dataclass(frozen=True)
class Config:
    """One deployable shape before its instance count: where, how split, on which server."""

    instance_type: str
    endpoint_kind: str  # instance | inference-component
    tensor_parallel: int
    copies: int  # per instance
    engine: str
    quantization: str

    def describe(self) -> str:
        """`ml.g5.12xlarge IC 4×TP1 tgi`."""
        split = f"IC {self.copies}×TP{self.tensor_parallel}" if self.endpoint_kind == "inference-component" else f"TP{self.tensor_parallel}"
        quant = f" {self.quantization}" if self.quantization != "none" else ""
        return f"{self.instance_type} {split} {self.engine}{quant}"


@dataclass
class Candidate:
    """A config at an instance count, with its prediction at the target load and how it fares."""

    config: Config
    instance_count: int
    usd_per_h: float  # the whole fleet, on demand
    concurrency: int | None = None  # endpoint-wide concurrency at the target load (Little's law for a rate)
    point: Point | None = None
    values: dict[str, float | None] = field(default_factory=dict)  # rule label → predicted value
    gaps: list[Gap] = field(default_factory=list)
    problem: str | None = None  # does not fit, refused by the profile, cannot sustain the load
    limit: str | None = None  # with a problem, what binds: MEMORY, CONTEXT, PROFILE or INSTANCES
    capacity_rps: float | None = None  # the most requests/s it carries, where it cannot sustain the target rate
    summary: LevelSummary | None = None  # the simulated requests at the target load, where simulated
    predicted_by: str = ANALYTIC  # what the values come from: the simulation, or why the mean model decided

    @property
    def meets(self) -> bool:
        """Predicted to meet every rule of the SLO at the target load."""
        return self.problem is None and not self.gaps

    @property
    def usd_per_1m_tokens(self) -> float | None:
        """$ per 1M output tokens at the target load."""
        throughput = self.summary.throughput_tokens_per_s if self.summary is not None \
            else self.point.throughput_tokens_per_s if self.point is not None else None
        return usd_per_1m_tokens(throughput, self.usd_per_h)

    def label(self) -> str:
        """The config and its count: `2 × ml.g5.2xlarge TP1 tgi`."""
        return f"{self.instance_count} × {self.config.describe()}"


def margin_to(candidate: Candidate, rule: Rule) -> float:
    """The candidate's relative margin to a rule (negative: it misses; -1 where it has no value)."""
    value = candidate.values.get(rule.label)
    return margin(rule, value) if value is not None else -1.0


def least_margin(candidate: Candidate, rules: Sequence[Rule]) -> float:
    """The smallest relative margin of the candidate to any rule."""
    return min((margin_to(candidate, r) for r in rules), default=math.inf)


def saturated(shape: Shape, payload: Payload) -> tuple[int, Point]:
    """The endpoint at its most concurrent requests (every copy's batch or admission limit, whichever is
    lower): (that concurrency, its predicted point)."""
    per_copy = max(1, shape.max_sequences(payload))
    if shape.max_concurrent_requests is not None:
        per_copy = min(per_copy, shape.max_concurrent_requests)
    top = shape.total_copies * per_copy
    return top, predict_point(shape, payload, top)


def concurrency_for_rate(shape: Shape, payload: Payload, rate: float) -> int | None:
    """Little's law N = rate × e2e(N) at its fixed point: the smallest endpoint concurrency whose predicted
    requests/s reach the rate (requests/s = N ÷ e2e grows with N up to saturation, so bisection finds it);
    None where even a saturated endpoint cannot sustain the rate inside the timeout."""
    top, at_top = saturated(shape, payload)
    if at_top.requests_per_s < rate or not at_top.within_timeout:
        return None
    lo, hi = 0, top  # rps(lo) < rate ≤ rps(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if predict_point(shape, payload, mid).requests_per_s >= rate:
            hi = mid
        else:
            lo = mid
    return hi


def predict_at(shape: Shape, payload: Payload, load: Load) -> tuple[int | None, Point | None, str | None]:
    """(concurrency, point, problem) of a shape at a load."""
    if load.request_rate is not None:
        n = concurrency_for_rate(shape, payload, load.request_rate)
        if n is None:
            at_top = saturated(shape, payload)[1]
            most = f" (carries at most {at_top.requests_per_s:.3g}/s)" if at_top.within_timeout else ""
            return None, None, f"cannot sustain {load.name} inside the 60 s timeout{most}"
    else:
        assert load.concurrency is not None
        n = load.concurrency
    point = predict_point(shape, payload, n)
    if point.rejected:
        return n, point, (f"{n} concurrent requests exceed the admission limit of "
                          f"{shape.max_concurrent_requests} per copy (TGI answers 429)")
    if not point.within_timeout:
        return n, point, f"requests take {point.e2e_s:.0f} s, past the 60 s invocation timeout"
    return n, point, None


def evaluate(candidate: Candidate, shape: Shape, payload: Payload, load: Load, rules: Sequence[Rule],
             simulator: Simulator | None = None) -> None:
    """Predict a candidate at the target load (and at any other load a rule names) and check every rule: with
    the mean model, then from simulated requests unless the mean model is decisive (cannot fit, cannot
    sustain the load, or far off the SLO)."""
    candidate.concurrency, candidate.point, candidate.problem = predict_at(shape, payload, load)
    if candidate.point is None or candidate.problem is not None:
        candidate.predicted_by = f"{ANALYTIC}: {candidate.problem}" if candidate.problem else ANALYTIC
        candidate.limit = INSTANCES  # the fleet cannot carry the load: too few copies for it
        if candidate.point is None and load.request_rate is not None:
            at_top = saturated(shape, payload)[1]
            candidate.capacity_rps = at_top.requests_per_s if at_top.within_timeout else None
        return
    points: dict[str, Point | None] = {load.name: candidate.point}
    for rule in rules:
        where = _where(rule, load)
        if rule.metric in SLO_METRICS and simulator is not None:
            points.setdefault(where, predict_at(shape, payload, Load.at(where))[1])
            continue  # a share of requests: only the simulated requests have one
        if where not in points:
            points[where] = predict_at(shape, payload, Load.at(where))[1]
        at = points[where]
        value = predicted_value(rule.metric, at, candidate.usd_per_h) if at is not None else None
        candidate.values[rule.label] = value
        if (gap := gap_of(rule, value)) is not None:
            candidate.gaps.append(gap)
    if simulator is None:
        return
    far = [g for g in candidate.gaps if g.value is None or g.relative > FAR_OFF]
    if far:
        candidate.predicted_by = f"{ANALYTIC}: {far[0].describe()}, more than queueing could close"
        return
    _simulate(candidate, shape.instance_count, load, rules, simulator, points)


def _simulate(candidate: Candidate, count: int, load: Load, rules: Sequence[Rule], simulator: Simulator,
              points: dict[str, Point | None]) -> None:
    """Replace the mean model's values with the simulated requests' (at every load the mean model sustains)."""
    candidate.values, candidate.gaps = {}, []
    summaries = {where: simulator.summary(count, Load.at(where) if where != load.name else load)
                 for where, point in points.items() if point is not None}
    candidate.summary = summaries[load.name]
    candidate.predicted_by = f"simulation ({simulator.requests} requests at {load.name})"
    # Failed requests fail the candidate, unless the SLO says how many it tolerates (an attainment counts them
    # as misses).
    if candidate.summary.error_rate > 0 and not any(r.metric in ("error_rate", "slo_attainment") for r in rules):
        failed = {kind: n for kind, n in candidate.summary.errors.items() if n}
        candidate.problem = (f"{candidate.summary.error_rate:.1%} of simulated requests fail at {load.name} "
                             f"({', '.join(f'{n} {kind}' for kind, n in failed.items())})")
        candidate.limit = INSTANCES
        return
    for rule in rules:
        at = summaries.get(_where(rule, load))
        value = level_value(rule.metric, at, candidate.usd_per_h) if at is not None else None
        candidate.values[rule.label] = value
        if (gap := gap_of(rule, value)) is not None:
            candidate.gaps.append(gap)


def _where(rule: Rule, load: Load) -> str:
    """The level a rule applies at, named as the load names itself (1000000/s and 1e+06/s are one level)."""
    return load.name if rule.where is None else level_name(rule.where) or str(rule.where)


@dataclass(frozen=True)
class Space:
    """What to search: the model, the payload, the instance types, the engines, the quantizations."""

    model: Model
    payload: Payload
    instance_types: tuple[Instance, ...]
    engines: tuple[str, ...] = tuple(ENGINES)  # every registered engine; those without an image are skipped
    quantizations: tuple[str, ...] = ("none",)
    region: str = "us-east-1"
    profiles_dir: Path | None = None  # whose calibration/ corrects the predictions (./profiles by default)
    # Search Inferentia types too, with the engines that have an image there: only when an Inferentia-only engine is
    # asked for (`--engines tgi,vllm-neuronx`), as their step times extrapolate GPU measurements.
    inferentia: bool = False


def instance_types(names: Sequence[str] = (), families: Sequence[str] = (),
                   region: str = "us-east-1") -> tuple[Instance, ...]:
    """The catalog's instance types, or those named (`--instances`: each one the region offers), or those of some
    families (`--families`)."""
    if names:
        named = tuple(find_instance(n, "--instances") for n in names)
        for inst in named:
            check_offered(inst.instance_type, region, "--instances")
        return named
    catalog = list(instances().values())
    if not families:
        return tuple(catalog)
    out, unknown = [], []
    for fam in families:
        prefix = f"ml.{fam.removeprefix('ml.').rstrip('.')}."
        hits = [i for i in catalog if i.instance_type.startswith(prefix)]
        out += hits
        if not hits:
            unknown.append(fam)
    if unknown:
        known = sorted({i.instance_type.split(".")[1] for i in catalog})
        raise InputError(f"--families: {', '.join(unknown)}: no such family in the catalog (known: {', '.join(known)})")
    return tuple(out)


def base_profiles(folder: Path, engines: Sequence[str], quantizations: Sequence[str]) -> dict[tuple[str, str, str], str]:
    """Write one profile per endpoint kind × engine × quantization, extending the standard one (design_for
    pins the rest); → {(kind, engine, quantization): profile name}."""
    names = {}
    for kind, standard in BASE_PROFILE.items():
        for engine in engines:
            for quant in quantizations:
                name = f"recommend-{standard}-{engine}-{quant}"
                body = {"name": name, "extends": standard, "container": {"kind": engine},
                        "serving": {"quantization": quant}}
                (folder / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
                names[(kind, engine, quant)] = name
    return names


def configs(space: Space, inst: Instance, quant: str) -> Iterator[Config]:
    """Every config of one instance type: each fitting TP on an instance endpoint, and as inference-component
    copies (GPUs ÷ TP, two or more: one copy is the instance endpoint again), on each engine with an image there."""
    for engine in kinds_on(space.engines, neuron=inst.is_neuron):
        gen = engine_for(engine, neuron=inst.is_neuron).generation(None).name  # how its server shards
        for tp in fitting_tps(space.model, inst, quant, space.payload, gen):
            yield Config(inst.instance_type, "instance", tp, 1, engine, quant)
            if inst.n_accelerators // tp >= 2:
                yield Config(inst.instance_type, "inference-component", tp, inst.n_accelerators // tp, engine, quant)


@dataclass
class Search:
    """Every candidate, and the designs behind the configs (to size a peak and write the pick)."""

    candidates: list[Candidate]
    designs: dict[Config, Design]
    notes: list[str]
    simulators: dict[Config, Simulator] = field(default_factory=dict)  # every design's (to size a peak)
    headroom: float = DEFAULT_HEADROOM  # the relative margin to every rule a pick needs
    slo: RequestSlo | None = None  # the per-request SLOs attainment and goodput rules are taken against


def _count_range(design: Design, config: Config, space: Space, load: Load) -> range:
    """Instance counts worth predicting: from the fewest that could carry the load; one for inference
    components (a pinned profile places all copies of one instance; more need autoscaling)."""
    if config.endpoint_kind == "inference-component":
        return range(1, 2)
    if load.request_rate is None:
        return range(1, MAX_INSTANCES + 1)
    rps = saturated(design.shape(1), space.payload)[1].requests_per_s
    start = max(1, math.ceil(load.request_rate / rps)) if rps > 0 else MAX_INSTANCES
    return range(min(start, MAX_INSTANCES), MAX_INSTANCES + 1)


def search(space: Space, load: Load, rules: Sequence[Rule], progress: Callable[[int, int, int], None] | None = None,
           headroom: float = DEFAULT_HEADROOM, slo: RequestSlo | None = None, prune: bool = False) -> Search:
    """Predict every config of every instance type at the target load, from its fewest instances up to the
    first count that meets the SLO with the headroom (or until more instances no longer lower the per-copy
    load), attainment and goodput against the per-request `slo`; `progress(instance types done, of, candidates
    so far)` after each instance type. `prune`: candidates go cheapest first, and one that costs more than its
    engine's cheapest candidate predicted to meet the SLO with the headroom cannot be the pick nor its engine's
    best, so it is not simulated (the mean model's values, said in predicted_by) and its config's count stops
    there (more instances only cost more); the pick, every engine's best and the candidates cheaper than them are
    what a full search predicts (not for a peak or --verify, which read candidates past the pick)."""
    found: list[Candidate | _Ramp] = []  # in the order the candidates are listed (a ramp: its config's counts)
    ramps: list[_Ramp] = []  # prune: every config's counts, run cheapest first once all are known
    listed = 0
    designs: dict[Config, Design] = {}
    simulators: dict[Config, Simulator] = {}
    notes: list[str] = []
    unpriced: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sagellm-recommend-") as tmp:
        profiles = base_profiles(Path(tmp), space.engines, space.quantizations)
        if calibration_dir(space.profiles_dir).is_dir():  # the stored corrections, as `plan` reads them
            shutil.copytree(calibration_dir(space.profiles_dir), calibration_dir(Path(tmp)))
        total = len(space.instance_types)
        if progress:
            progress(0, total, 0)
        for done, inst in enumerate(space.instance_types, 1):
            price = inst.price_per_h(space.region)
            if skipped := _not_searched(inst, space):
                notes.append(skipped)
            elif price is None:
                unpriced.append(inst.instance_type)
            else:
                for item in _instance_candidates(inst, price, space, load, rules, profiles, Path(tmp), designs,
                                                 simulators, headroom, slo):
                    found.append(item)
                    if isinstance(item, Candidate):
                        listed += 1
                    elif prune:
                        item.order = len(ramps)
                        ramps.append(item)
                    else:
                        listed += len(item.run())
            if progress and not (prune and done == total):  # pruned: the last once the ramps have run
                progress(done, total, listed)
        _cheapest_first(ramps)
    candidates = [c for item in found for c in ([item] if isinstance(item, Candidate) else item.out)]
    if progress and prune and total:
        progress(total, total, len(candidates))
    return Search(candidates, designs, notes + _closing_notes(space, unpriced, designs), simulators, headroom, slo)


def _not_searched(inst: Instance, space: Space) -> str | None:
    """Why an instance type is left out of the search (None: it is searched)."""
    if inst.offered_in(space.region) is False:
        return f"{inst.instance_type}: not searched (not offered in {space.region})"
    if inst.is_neuron and not space.inferentia:
        return (f"{inst.instance_type}: not searched (Inferentia needs compiled artefacts and the planner's step "
                "times are GPU measurements)")
    return None


def _closing_notes(space: Space, unpriced: list[str], designs: dict[Config, Design]) -> list[str]:
    """What the search says of itself: the types it could not price, the predictions a stored correction made."""
    notes = []
    if unpriced:  # never costed at another region's price
        notes.append(f"{', '.join(unpriced)}: not searched (no {space.region} price: {unknown_why(space.region)}; "
                     f"give your own with {PRICES_ENV}, docs/regions.md)")
    corrected = dict.fromkeys(f"{c.instance_type} {c.engine}" for c, d in designs.items() if d.calibration)
    if corrected:
        notes.append(f"{', '.join(corrected)}: predicted with the measured correction stored in "
                     f"{calibration_dir(space.profiles_dir)}")
    return notes


def over_context(space: Space) -> bool:
    """The payload is longer than the model's context (where the catalog knows it)."""
    return 0 < space.model.max_context < space.payload.input_tokens + space.payload.output_tokens


def context_problem(space: Space) -> str:
    """What is wrong with a payload over the model's context."""
    return (f"{space.payload.input_tokens}+{space.payload.output_tokens} tokens exceed the "
            f"{space.model.max_context}-token context of {space.model.hf_id}")


def _instance_candidates(inst: Instance, price: float, space: Space, load: Load, rules: Sequence[Rule],
                         profiles: dict[tuple[str, str, str], str], folder: Path, designs: dict[Config, Design],
                         simulators: dict[Config, Simulator], headroom: float,
                         slo: RequestSlo | None = None) -> list[Candidate | _Ramp]:
    """Every candidate of one instance type (one that says it does not fit, where nothing fits), or the ramp of
    counts that predicts a config's, in order."""
    out: list[Candidate | _Ramp] = []
    for quant in space.quantizations:
        found = list(configs(space, inst, quant))
        if not found:
            tps = valid_tp(space.model, inst.n_accelerators)
            config = Config(inst.instance_type, "instance", max(tps, default=1), 1, "-", quant)
            out.append(Candidate(config, 1, price, problem=context_problem(space) if over_context(space) else (
                f"does not fit: {space.model.hf_id} ({quant}) with one {space.payload.input_tokens}+"
                f"{space.payload.output_tokens}-token sequence needs more than the "
                f"{inst.n_accelerators} × {inst.mem_per_accel_gb:g} GB of {inst.instance_type}"),
                limit=CONTEXT if over_context(space) else MEMORY))
        for config in found:
            out.append(_ramp(config, space, load, rules, profiles, folder, designs, simulators, headroom, slo))
    return out


@dataclass
class _Ramp:
    """One config's candidates, one instance count at a time from its fewest: each predicted at the target load,
    until one meets the SLO with the headroom (or more instances no longer widen its thinnest margin, or no
    longer lower a copy's load)."""

    config: Config
    space: Space
    load: Load
    rules: Sequence[Rule]
    headroom: float
    design: Design
    simulator: Simulator
    counts: Iterator[int]
    out: list[Candidate] = field(default_factory=list)
    next_count: int | None = None
    before: float = -math.inf  # the last count's thinnest margin
    order: int = 0  # where its candidates come in the search's list

    def __post_init__(self) -> None:
        self.next_count = next(self.counts, None)

    def usd_per_h(self) -> float:
        """The next count's fleet $/h."""
        assert self.next_count is not None
        return (find_instance(self.config.instance_type).price_per_h(self.space.region) or 0.0) * self.next_count

    def step(self, pruned_by: str | None = None) -> Candidate:
        """Predict the next count (`pruned_by`: it cannot win, so the mean model's values, and no further count)."""
        assert self.next_count is not None
        count, space, rules = self.next_count, self.space, self.rules
        candidate = Candidate(self.config, count, self.usd_per_h())
        shape = self.design.shape(count)
        evaluate(candidate, shape, space.payload, self.load, rules, None if pruned_by else self.simulator)
        self.out.append(candidate)
        if pruned_by:
            candidate.predicted_by = f"{candidate.predicted_by}: not simulated, {pruned_by}"
            self.next_count = None
            return candidate
        per_copy = (candidate.concurrency or 0) / shape.total_copies
        thinnest = least_margin(candidate, rules)
        if (candidate.meets and (thinnest >= self.headroom or thinnest < self.before + HEADROOM_GAIN)) \
                or (candidate.concurrency is not None and per_copy <= 1):
            self.next_count = None  # more instances only cost more, no longer widen the margin, or no longer lower a
            return candidate  # copy's load
        self.before = thinnest
        self.next_count = next(self.counts, None)
        return candidate

    def run(self) -> list[Candidate]:
        """Every count, in order."""
        while self.next_count is not None:
            self.step()
        return self.out


def _cheapest_first(ramps: list[_Ramp]) -> None:
    """Run the ramps' counts cheapest first across configs, not simulating a candidate that costs more than its
    engine's cheapest one that meets the SLO with the headroom (see `search`)."""
    queue = [(r.usd_per_h(), r.order, r) for r in ramps if r.next_count is not None]
    heapq.heapify(queue)
    best: dict[str, Candidate] = {}  # engine → its cheapest candidate meeting the SLO with the headroom so far
    while queue:
        usd, _, ramp = heapq.heappop(queue)
        engine = ramp.config.engine
        winner = best.get(engine)
        pruned_by = (f"costs more than {engine}'s {winner.label()} (${winner.usd_per_h:.2f}/h), which meets the SLO"
                     if winner is not None and usd > winner.usd_per_h else None)
        candidate = ramp.step(pruned_by)
        if pruned_by is None and winner is None and candidate.meets \
                and least_margin(candidate, ramp.rules) >= ramp.headroom:
            best[engine] = candidate  # the first found is the cheapest: they come in order of $/h
        if ramp.next_count is not None:
            heapq.heappush(queue, (ramp.usd_per_h(), ramp.order, ramp))


def _ramp(config: Config, space: Space, load: Load, rules: Sequence[Rule],
          profiles: dict[tuple[str, str, str], str], folder: Path,
          designs: dict[Config, Design], simulators: dict[Config, Simulator],
          headroom: float, slo: RequestSlo | None = None) -> _Ramp | Candidate:
    """A config's ramp of counts, or its one candidate where the profile refuses it."""
    inst = find_instance(config.instance_type)
    price = inst.price_per_h(space.region) or 0.0
    ic = config.endpoint_kind == "inference-component"
    try:
        design = design_for(profiles[(config.endpoint_kind, config.engine, config.quantization)],
                            space.model.hf_id, config.instance_type, payload=space.payload, region=space.region,
                            profiles_dir=folder, tensor_parallel=config.tensor_parallel, copies=config.copies if ic else None,
                            instance_count=1)
    except InputError as exc:
        if over_context(space):
            return Candidate(config, 1, price, problem=context_problem(space), limit=CONTEXT)
        return Candidate(config, 1, price, problem=f"refused by the profile: {exc.messages[0]}", limit=PROFILE)
    designs[config] = design
    simulators[config] = simulator = Simulator(design, space.payload, slo=slo)  # alike configs share simulations
    return _Ramp(config, space, load, rules, headroom, design, simulator, iter(_count_range(design, config, space, load)))

"""The target: a load (open or closed loop) and an SLO written as a thresholds file in the gate's language."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sagellm.errors import InputError
from sagellm.planner import Point, usd_per_1m_tokens
from sagellm.results.gate import HIGHER_IS_BETTER, SLO_METRICS, Rule, Thresholds, load_thresholds
from sagellm.results.schema import LevelSummary, Stats, load_name, parse_load

# Latency distributions the planner predicts, and the Point field each reads. The planner gives a steady-state
# mean, so every statistic (p50 … p99, mean) of a distribution reads the same value; a simulation gives each
# statistic of its requests (`level_value`).
_DISTRIBUTIONS = {"latency_ms_per_token": "ms_per_token", "ttft_ms": "ttft_ms", "itl_ms": "itl_ms",
                  "tpot_ms": "itl_ms", "e2e_s": "e2e_s"}
PREDICTABLE = (*(f"{d}.{s}" for d in _DISTRIBUTIONS for s in Stats.model_fields),
               "throughput_tokens_per_s", "requests_per_s", "error_rate", *SLO_METRICS,
               "cost.usd_per_h", "cost.usd_per_1m_tokens")


@dataclass(frozen=True)
class Load:
    """The traffic to serve: a request rate (open loop, Poisson arrivals) or a concurrency (closed loop)."""

    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def name(self) -> str:
        """How thresholds write it as `where`: `16` or `4/s`."""
        return load_name(self.concurrency, self.request_rate)

    @staticmethod
    def at(where: int | str) -> Load:
        """The load a rule's `where` names."""
        value = parse_load(where)
        return Load(request_rate=value) if isinstance(value, float) else Load(concurrency=value)


@dataclass(frozen=True)
class Gap:
    """A rule a candidate misses, with its predicted value and by how much (relative to the limit)."""

    rule: Rule
    value: float | None  # None: not predictable there (the load named by the rule cannot be sustained)
    relative: float  # 0.35 = 35 % on the wrong side of the limit

    def describe(self) -> str:
        """`misses ttft_ms.p90 by 35 % (1080 against max 800)`."""
        if self.value is None:
            return f"misses {self.rule.label}: no prediction there (that load cannot be sustained)"
        bound = f"max {self.rule.max:g}" if self.rule.max is not None and self.value > self.rule.max \
            else f"min {self.rule.min:g}"
        return f"misses {self.rule.metric} by {self.relative * 100:.0f} % ({self.value:.4g} against {bound})"


def load_slo(path: Path, load: Load) -> Thresholds:
    """Read the SLO: a level rule without `where` applies at the target load; only predictable rules. An
    attainment is a rule in the gate's own words: `slo: {ttft_ms: 800}` and `{metric: slo_attainment, min: 0.95}`."""
    thresholds = load_thresholds(path, default_where=load.concurrency or load.name)
    problems = []
    for i, rule in enumerate(thresholds.rules):
        if rule.metric not in PREDICTABLE:
            problems.append(f"{path}: rules[{i}].metric: {rule.metric} cannot be predicted (recommend predicts: "
                            "latency_ms_per_token, ttft_ms, itl_ms, tpot_ms, e2e_s at any statistic, "
                            "throughput_tokens_per_s, requests_per_s, error_rate, slo_attainment, "
                            "goodput.requests_per_s, goodput.tokens_per_s, cost.usd_per_h, cost.usd_per_1m_tokens)")
        elif rule.where in ("knee", "max"):
            problems.append(f"{path}: rules[{i}].where: {rule.where} depends on a measured sweep; recommend "
                            f"predicts at a load (leave where out for the target load {load.name}, or name one)")
    if thresholds.baseline is not None:
        problems.append(f"{path}: baseline: recommend predicts and has no run to compare (remove baseline)")
    if not thresholds.rules and not problems:
        problems.append(f"{path}: rules: none, so every candidate would pass (add e.g. {{metric: ttft_ms.p90, "
                        "max: 800}})")
    if problems:
        raise InputError(problems)
    return thresholds


def _cost(metric: str, throughput_tokens_per_s: float, usd_per_h: float | None) -> float | None:
    return usd_per_h if metric == "cost.usd_per_h" else usd_per_1m_tokens(throughput_tokens_per_s, usd_per_h)


def predicted_value(metric: str, point: Point, usd_per_h: float | None) -> float | None:
    """A rule's metric read off a predicted point (cost at that point's throughput)."""
    if metric.startswith("cost."):
        return _cost(metric, point.throughput_tokens_per_s, usd_per_h)
    if metric in SLO_METRICS:  # a share of requests: the mean model has one request, the mean, and no share
        return None
    if metric == "error_rate":
        # TGI answers 429 above its admission limit; a request past the 60 s timeout fails too.
        return 1.0 if point.rejected or not point.within_timeout else 0.0
    if metric in ("throughput_tokens_per_s", "requests_per_s"):
        return float(getattr(point, metric))
    return float(getattr(point, _DISTRIBUTIONS[metric.split(".")[0]]))


def level_value(metric: str, level: LevelSummary, usd_per_h: float | None) -> float | None:
    """A rule's metric read off a level, simulated or measured, as the gate reads one (cost at its throughput);
    None where the level has no value for it (no request succeeded)."""
    if metric.startswith("cost."):
        return _cost(metric, level.throughput_tokens_per_s, usd_per_h)
    value: object = level
    for part in metric.split("."):
        value = getattr(value, part, None) if value is not None else None
    return None if value is None else float(value)  # type: ignore[arg-type]


def margin(rule: Rule, value: float) -> float:
    """How far inside the rule a value lies, relative to its limit (0.93: 93 % under a max; negative: misses
    by that much); against a limit of 0 a relative margin is undefined: inf when met, -1 (100 %) when missed. An
    attainment's minimum is taken on the misses it allows (0.97 against 0.95: 40 % of the allowed 5 % unused), as
    a margin relative to 0.95 could never reach a 10 % headroom."""
    if rule.metric == "slo_attainment" and rule.min is not None and rule.max is None:
        return margin(Rule(metric="misses", max=1 - rule.min), 1 - value)
    out = math.inf
    if rule.max is not None:
        out = min(out, (rule.max - value) / rule.max if rule.max > 0 else (math.inf if value <= rule.max else -1.0))
    if rule.min is not None:
        out = min(out, (value - rule.min) / rule.min if rule.min > 0 else (math.inf if value >= rule.min else -1.0))
    return out


def gap_of(rule: Rule, value: float | None) -> Gap | None:
    """How far a value lies outside the rule (None: inside it); an unknown value misses by 100 %."""
    if value is None:
        return Gap(rule, None, 1.0)
    m = margin(rule, value)
    return Gap(rule, value, -m) if m < 0 else None


def describe_rule(rule: Rule, value: float | None) -> str:
    """A rule's verdict on a value: `ttft_ms.p90 55.4 <= 800 (93 % margin)`, or how it misses."""
    gap = gap_of(rule, value)
    if gap is not None:
        return gap.describe()
    assert value is not None  # an unknown value misses
    m = margin(rule, value)
    return f"{rule.metric} {value:.4g} {bounds(rule)}" + (f" ({m * 100:.0f} % margin)" if m < math.inf else "")


def bounds(rule: Rule) -> str:
    """`<= 800`, `>= 100`, or both."""
    return " and ".join(b for b in (f">= {rule.min:g}" if rule.min is not None else "",
                                    f"<= {rule.max:g}" if rule.max is not None else "") if b)


def tightness(rule: Rule, value: float | None) -> float:
    """Value ÷ limit, oriented so that above 1 misses (the frontier's y axis)."""
    if value is None:
        return float("inf")
    if rule.metric == "slo_attainment" and rule.min is not None and rule.max is None:  # on the misses, as margin
        return tightness(Rule(metric="misses", max=1 - rule.min), 1 - value)
    if rule.max is not None:
        return value / rule.max if rule.max > 0 else (0.0 if value <= 0 else float("inf"))
    assert rule.min is not None
    if rule.metric in HIGHER_IS_BETTER or rule.min > 0:
        return rule.min / value if value > 0 else float("inf")
    return 0.0

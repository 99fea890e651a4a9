"""Thresholds as data, and the pure function that finds the violations of a run."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

from sagellm.errors import InputError
from sagellm.results.schema import Gate, Level, Results, Violation, parse_load

_STATS = ("p50", "p90", "p95", "p99", "mean")
# Metrics read from one level (a rule says which one with `where`).
LEVEL_METRICS: tuple[str, ...] = (
    *(f"{m}.{s}" for m in ("latency_ms_per_token", "ttft_ms", "itl_ms", "tpot_ms", "token_gap_ms", "e2e_s",
                           "lateness_ms") for s in _STATS),
    "throughput_tokens_per_s", "requests_per_s", "error_rate",
)
# Metrics of the whole run (cost is taken at the max-throughput point).
RUN_METRICS: tuple[str, ...] = ("cost.usd_per_1m_tokens", "cost.usd_per_h")
METRICS = LEVEL_METRICS + RUN_METRICS
# Where lower is worse; for every other metric higher is worse (latency, errors, cost).
HIGHER_IS_BETTER = frozenset({"throughput_tokens_per_s", "requests_per_s"})
DEFAULT_BASELINE_METRICS = ("latency_ms_per_token.p50", "ttft_ms.p50", "throughput_tokens_per_s")

# A concurrency (16), a request rate ("4/s"), the knee or the max-throughput point.
Where = int | str


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rule(_Strict):
    """A bound on one metric, at one level (a concurrency, the knee, or the max-throughput point)."""

    metric: str
    where: Where | None = None  # required for level metrics, absent for cost
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _has_limit(self) -> Rule:
        if self.min is None and self.max is None:
            raise ValueError("a rule needs min or max")
        return self

    @property
    def label(self) -> str:
        """Short human name, e.g. `latency_ms_per_token.p90@16 <= 80` (JUnit test case name)."""
        text = self.metric + (f"@{self.where}" if self.where is not None else "")
        if self.min is not None:
            text += f" >= {self.min:g}"
        if self.max is not None:
            text += f" <= {self.max:g}"
        return text


class Baseline(_Strict):
    """Compare with an earlier run: each metric at every concurrency measured in both."""

    results: Path | None = None  # resolved against the thresholds file; `--baseline` overrides it
    max_regression_pct: float = 10.0
    metrics: tuple[str, ...] = DEFAULT_BASELINE_METRICS

    def label(self, metric: str) -> str:
        """JUnit test case name of one baseline metric."""
        return f"baseline {metric} within {self.max_regression_pct:g}%"


class Thresholds(_Strict):
    """A thresholds file."""

    rules: tuple[Rule, ...] = ()
    baseline: Baseline | None = None
    slo_ms_per_token: float | None = None


# ---------------------------------------------------------------------------------------------- loading

_FIELDS = {
    "": ("rules", "baseline", "slo_ms_per_token"),
    "rules": ("metric", "where", "min", "max"),
    "baseline": ("results", "max_regression_pct", "metrics"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _close(value: str, choices: tuple[str, ...]) -> list[str]:
    return difflib.get_close_matches(value, choices, n=3, cutoff=0.6)


def _unknown_keys(data: dict, allowed: tuple[str, ...], prefix: str) -> list[str]:
    out = []
    for key in data:
        if key in allowed:
            continue
        hint = f"did you mean {_close(str(key), allowed)[0]}? " if _close(str(key), allowed) else ""
        out.append(f"{prefix}{key}: unknown field ({hint}allowed: {', '.join(allowed)})")
    return out


def _metric_problem(metric: Any) -> str | None:
    if not isinstance(metric, str):
        return f"{metric!r} is not a metric path (use e.g. latency_ms_per_token.p90)"
    if metric in METRICS:
        return None
    close = _close(metric, METRICS)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known: {', '.join(METRICS)}"
    return f"{metric!r} is not a known metric ({hint})"


def _rule_problems(raw: Any, i: int) -> list[str]:
    at = f"rules[{i}]"
    if not isinstance(raw, dict):
        return [f"{at}: expected a mapping with metric, where and min/max, got {raw!r}"]
    out = _unknown_keys(raw, _FIELDS["rules"], f"{at}.")
    metric = raw.get("metric")
    if "metric" not in raw:
        out.append(f"{at}.metric: missing (add a metric path such as latency_ms_per_token.p90)")
    elif problem := _metric_problem(metric):
        out.append(f"{at}.metric: {problem}")
    where = raw.get("where")
    if isinstance(where, str) and where.isdigit():
        where = int(where)
    if metric in RUN_METRICS and where is not None:
        out.append(f"{at}.where: {metric} is taken at the max-throughput point (remove where)")
    elif where is None and metric in LEVEL_METRICS:
        out.append(f"{at}.where: missing (add a concurrency level such as 16, knee or max)")
    elif where is not None and where not in ("knee", "max") and parse_load(where) is None:
        out.append(f"{at}.where: {where!r} is not a measured level "
                   "(use a concurrency level such as 16, a request rate such as 4/s, knee or max)")
    for bound in ("min", "max"):
        if bound in raw and not _is_number(raw[bound]):
            out.append(f"{at}.{bound}: {raw[bound]!r} is not a number")
    if "min" not in raw and "max" not in raw:
        out.append(f"{at}: no limit (add min, max or both)")
    elif _is_number(raw.get("min")) and _is_number(raw.get("max")) and raw["min"] > raw["max"]:
        out.append(f"{at}: min {raw['min']} is above max {raw['max']} (no value could pass)")
    return out


def _baseline_problems(raw: Any, base_dir: Path) -> list[str]:
    if not isinstance(raw, dict):
        return [f"baseline: expected a mapping with results, max_regression_pct, metrics, got {raw!r}"]
    out = _unknown_keys(raw, _FIELDS["baseline"], "baseline.")
    if "results" in raw:
        if not isinstance(raw["results"], str):
            out.append(f"baseline.results: {raw['results']!r} is not a path")
        elif not (base_dir / raw["results"]).is_file():
            out.append(f"baseline.results: {raw['results']} does not exist "
                       "(paths are relative to the thresholds file)")
    pct = raw.get("max_regression_pct", 0)
    if not _is_number(pct) or pct < 0:
        out.append(f"baseline.max_regression_pct: {pct!r} is not a percentage (use e.g. 10)")
    metrics = raw.get("metrics", [])
    if not isinstance(metrics, list):
        out.append(f"baseline.metrics: expected a list of metric paths, got {metrics!r}")
        metrics = []
    for j, metric in enumerate(metrics):
        if problem := _metric_problem(metric):
            out.append(f"baseline.metrics[{j}]: {problem}")
    return out


def load_thresholds(path: Path) -> Thresholds:
    """Read a thresholds YAML; InputError listing every problem as `file: field: what (fix)`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"{path}: {where}invalid YAML: {problem}") from None
    if data is None:
        raise InputError(f"{path}: empty (add rules: [{{metric: ..., where: ..., max: ...}}])")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping with rules, baseline, slo_ms_per_token")
    problems = _unknown_keys(data, _FIELDS[""], "")
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        problems.append(f"rules: expected a list of rules, got {rules!r}")
        rules = []
    for i, raw in enumerate(rules):
        problems += _rule_problems(raw, i)
    if "baseline" in data:
        problems += _baseline_problems(data["baseline"], path.parent)
    slo = data.get("slo_ms_per_token")
    if slo is not None and not (_is_number(slo) and slo > 0):
        problems.append(f"slo_ms_per_token: {slo!r} is not a positive number of ms per token")
    if problems:
        raise InputError([f"{path}: {p}" for p in problems])
    if isinstance(data.get("baseline"), dict) and "results" in data["baseline"]:
        data["baseline"]["results"] = path.parent / data["baseline"]["results"]
    return Thresholds.model_validate(data)


# -------------------------------------------------------------------------------------------- evaluation

def _value(level: Level, metric: str) -> float | None:
    obj: Any = level
    for part in metric.split("."):
        obj = getattr(obj, part) if obj is not None else None  # lateness_ms is None in a closed loop
    return obj


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"


def _resolve(results: Results, where: Where) -> tuple[Level | None, str]:
    """The level a rule points at, or why there is none."""
    if where in ("knee", "max"):
        pick = results.knee if where == "knee" else results.max_throughput
        if pick is None:
            name = "knee" if where == "knee" else "max-throughput point"
            return None, f"no {name}: no level was usable (every level had timeouts or too many errors)"
        return results.level(pick.load), ""
    level = results.level(where)
    if level is not None:
        return level, ""
    if not results.levels:
        return None, f"level {where} was not measured (no level was measured)"
    last = max(results.levels, key=lambda lv: lv.load_value).load
    measured = ", ".join(lv.load for lv in results.levels)
    why = f"stopped at {last}: {results.stopped_reason}" if results.stopped_reason else f"measured: {measured}"
    return None, f"level {where} was not measured ({why})"


def _check_rule(results: Results, rule: Rule) -> Violation | None:
    where = None if rule.where is None else str(rule.where)
    at = f"{rule.metric}@{where}" if where else rule.metric
    limit = rule.max if rule.max is not None else rule.min

    def violation(measured: float | None, limit: float | None, message: str) -> Violation:
        return Violation(rule=rule.label, metric=rule.metric, where=where, measured=measured, limit=limit,
                         message=f"{at}: {message}")

    if rule.metric in RUN_METRICS:
        measured = getattr(results.cost, rule.metric.split(".", 1)[1])
        if measured is None:
            return violation(None, limit, "not available (no catalog price, or no usable level)")
    else:
        assert rule.where is not None, "load_thresholds requires where for level metrics"
        level, why = _resolve(results, rule.where)
        if level is None:
            return violation(None, limit, why)
        measured = _value(level, rule.metric)
        if measured is None:
            return violation(None, limit, f"not measured at concurrency {level.concurrency} "
                                          "(no successful request)")
    if rule.max is not None and measured > rule.max:
        return violation(measured, rule.max, f"{_fmt(measured)} > max {_fmt(rule.max)}")
    if rule.min is not None and measured < rule.min:
        return violation(measured, rule.min, f"{_fmt(measured)} < min {_fmt(rule.min)}")
    return None


def _regressions(results: Results, baseline: Results, config: Baseline) -> list[Violation]:
    loads = {lv.load: lv.load_value for lv in results.levels}
    common = sorted(loads.keys() & {lv.load for lv in baseline.levels}, key=loads.__getitem__)
    out = []
    for metric in config.metrics:
        label = config.label(metric)
        pairs: list[tuple[str | None, float | None, float | None]]
        if metric in RUN_METRICS:
            name = metric.split(".", 1)[1]
            pairs = [(None, getattr(results.cost, name), getattr(baseline.cost, name))]
        elif not common:
            out.append(Violation(rule=label, metric=metric, where=None, measured=None, limit=None,
                                 message=f"baseline {metric}: no level in common with the baseline run "
                                         "(run the same --concurrency or --request-rate levels)"))
            continue
        else:
            now_levels = {lv.load: lv for lv in results.levels}
            base_levels = {lv.load: lv for lv in baseline.levels}
            pairs = [(c, _value(now_levels[c], metric), _value(base_levels[c], metric)) for c in common]
        sign = -1 if metric in HIGHER_IS_BETTER else 1
        for where, now, before in pairs:
            if before is None:
                continue  # nothing to compare with
            at = f"{metric}@{where}" if where else metric
            if now is None:
                out.append(Violation(rule=label, metric=metric, where=where, measured=None, limit=before,
                                     message=f"baseline {at}: not measured in this run (baseline "
                                             f"{_fmt(before)})"))
                continue
            allowed = before * (1 + sign * config.max_regression_pct / 100)
            worse = (now - allowed) * sign > 0
            if worse:
                change = f"{(now - before) / before * 100:+.1f}%" if before else "from 0"
                out.append(Violation(rule=label, metric=metric, where=where, measured=now, limit=allowed,
                                     message=f"baseline {at}: {_fmt(now)} vs {_fmt(before)} ({change}; "
                                             f"allowed {config.max_regression_pct:g}%)"))
    return out


def evaluate(results: Results, thresholds: Thresholds, baseline: Results | None = None) -> list[Violation]:
    """Every violation of the thresholds (and of the baseline, when one is given); empty means pass."""
    out = [v for rule in thresholds.rules if (v := _check_rule(results, rule)) is not None]
    if baseline is not None:
        out += _regressions(results, baseline, thresholds.baseline or Baseline())
    return out


def gate(results: Results, thresholds: Thresholds, baseline: Results | None = None) -> Gate:
    """The gate block of results.json: every rule checked and the violations."""
    rules = [rule.label for rule in thresholds.rules]
    if baseline is not None:
        config = thresholds.baseline or Baseline()
        rules += [config.label(m) for m in config.metrics]
    violations = evaluate(results, thresholds, baseline)
    return Gate(passed=not violations, rules=rules, violations=violations)

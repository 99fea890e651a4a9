"""Thresholds as data, and the pure function that finds the violations of a run."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

from sagellm.errors import InputError
from sagellm.results.schema import (
    SERVER_METRICS,
    GateVerdict,
    Level,
    LevelSummary,
    Pick,
    RequestSlo,
    Results,
    Run,
    ServerStats,
    Stats,
    Violation,
    load_name,
    load_results,
    parse_load,
)

# Every distribution a level records (a Stats field), at every statistic Stats holds: a new one is gateable at once.
_DISTRIBUTIONS = tuple(name for name, field in LevelSummary.model_fields.items()
                       if Stats in (field.annotation, *get_args(field.annotation)))
# Taken against the thresholds' per-request SLOs (`slo:`), so a rule on one needs them.
SLO_METRICS: tuple[str, ...] = ("slo_attainment", "goodput.requests_per_s", "goodput.tokens_per_s")
# Metrics read from one level (a rule says which one with `where`).
LEVEL_METRICS: tuple[str, ...] = (
    *(f"{m}.{s}" for m in _DISTRIBUTIONS for s in Stats.model_fields),
    "throughput_tokens_per_s", "requests_per_s", "error_rate", *SLO_METRICS,
    # What the endpoint itself reported over the level (`server` block): e.g. server.model_latency_ms.p90.
    *(f"server.{m}.{s}" for m in SERVER_METRICS for s in ServerStats.model_fields),
)
# Metrics of the whole run (cost is taken at the max-throughput point).
# Whole-run figures: the cost, and a scale-to-zero ramp's cold start (`ramp.cold_start_s`).
RUN_METRICS: tuple[str, ...] = ("cost.usd_per_1m_tokens", "cost.usd_per_h", "ramp.cold_start_s")
METRICS = LEVEL_METRICS + RUN_METRICS
# Where lower is worse; for every other metric higher is worse (latency, errors, cost).
HIGHER_IS_BETTER = frozenset({"throughput_tokens_per_s", "requests_per_s", *SLO_METRICS})
DEFAULT_BASELINE_METRICS = ("latency_ms_per_token.p50", "ttft_ms.p50", "throughput_tokens_per_s")
# Run fields a baseline may differ in: what is under test (the profile and its environment), where, when and
# how it was invoked, and the per-request SLOs it was judged by. Every other field (model, instance, container, target, workload, …) must match.
MAY_DIFFER = frozenset({"profile", "environment", "request_slo", "emulated", "time_scale", "region", "endpoint", "concurrency",
                        "request_rate", "repeats", "clock", "bench_run", "workers", "ray",
                        "tool_version", "started_at", "ended_at", "command"})

# A concurrency (16), a request rate ("4/s"), the knee or the max-throughput point.
LevelWhere = int | str


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rule(_Strict):
    """A bound on one metric, at one level (a concurrency, the knee, or the max-throughput point)."""

    metric: str
    where: LevelWhere | None = None  # required for level metrics, absent for cost
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
    slo: RequestSlo | None = None  # per-request SLOs: each level's slo_attainment and goodput


# ---------------------------------------------------------------------------------------------- loading

_FIELDS = {
    "": ("rules", "baseline", "slo_ms_per_token", "slo"),
    "slo": tuple(RequestSlo.model_fields),
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
    server_name = metric.split(".")[1] if metric.startswith("server.") else None
    if server_name is not None and server_name not in SERVER_METRICS:  # a list of names helps more than near misses
        hint = (f"use server.<name>.<stat>, name one of {', '.join(SERVER_METRICS)}, "
                f"stat one of {', '.join(ServerStats.model_fields)}")
    elif close:
        hint = f"did you mean {' or '.join(close)}?"
    else:
        plain = [m for m in LEVEL_METRICS if not m.startswith("server.")]
        hint = f"known: {', '.join([*plain, 'server.<name>.<stat>', *RUN_METRICS])}"
    return f"{metric!r} is not a known metric ({hint})"


def _rule_problems(raw: Any, i: int, default_where: LevelWhere | None = None) -> list[str]:
    at = f"rules[{i}]"
    if not isinstance(raw, dict):
        return [f"{at}: expected a mapping with metric, where and min/max, got {raw!r}"]
    out = _unknown_keys(raw, _FIELDS["rules"], f"{at}.")
    metric = raw.get("metric")
    if "metric" not in raw:
        out.append(f"{at}.metric: missing (add a metric path such as latency_ms_per_token.p90)")
    elif problem := _metric_problem(metric):
        out.append(f"{at}.metric: {problem}")
    where = raw.get("where", default_where if metric in LEVEL_METRICS else None)
    if isinstance(where, str) and where.isdigit():
        where = int(where)
    return out + _where_problems(at, metric, where) + _limit_problems(at, raw)


def _where_problems(at: str, metric: Any, where: Any) -> list[str]:
    """A level metric needs a level to be read at; a run metric is read at the max-throughput point alone."""
    if metric in RUN_METRICS and where is not None:
        return [f"{at}.where: {metric} is taken at the max-throughput point (remove where)"]
    if where is None and metric in LEVEL_METRICS:
        return [f"{at}.where: missing (add a concurrency level such as 16, knee or max)"]
    if where is not None and where not in ("knee", "max") and parse_load(where) is None:
        return [(f"{at}.where: {where!r} is not a measured level "
                "(use a concurrency level such as 16, a request rate such as 4/s, knee or max)")]
    return []


def _limit_problems(at: str, raw: dict) -> list[str]:
    """A rule's min and max: numbers, at least one, and a range some value could pass."""
    out = [f"{at}.{bound}: {raw[bound]!r} is not a number"
           for bound in ("min", "max") if bound in raw and not _is_number(raw[bound])]
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
    metrics = raw.get("metrics", list(DEFAULT_BASELINE_METRICS))
    if not isinstance(metrics, list):
        out.append(f"baseline.metrics: expected a list of metric paths, got {metrics!r}")
        metrics = []
    elif not metrics:
        out.append("baseline.metrics: empty, so nothing would be compared (list metric paths, or remove it for "
                   f"the defaults: {', '.join(DEFAULT_BASELINE_METRICS)})")
    for j, metric in enumerate(metrics):
        if problem := _metric_problem(metric):
            out.append(f"baseline.metrics[{j}]: {problem}")
    return out


def _slo_problems(raw: Any) -> list[str]:
    if not isinstance(raw, dict) or not raw:
        return [(f"slo: expected a mapping of per-request limits in ms such as {{ttft_ms: 800, itl_ms: 50}}, "
                 f"got {raw!r} (limits: {', '.join(_FIELDS['slo'])})")]
    out = _unknown_keys(raw, _FIELDS["slo"], "slo.")
    for key, value in raw.items():
        if key in _FIELDS["slo"] and not (_is_number(value) and value > 0):
            out.append(f"slo.{key}: {value!r} is not a positive number of ms (use e.g. {key}: 800)")
    if "itl_ms" in raw and "tpot_ms" in raw:
        out.append("slo: itl_ms and tpot_ms name one figure, the request's mean inter-token time (give one of them)")
    return out


def _slo_needed(data: dict, rules: list) -> list[str]:
    """Rules and baseline metrics on attainment or goodput, where the file gives no per-request SLOs."""
    if "slo" in data:
        return []
    named = [(f"rules[{i}].metric", raw.get("metric")) for i, raw in enumerate(rules) if isinstance(raw, dict)]
    base = data.get("baseline")
    if isinstance(base, dict) and isinstance(base.get("metrics"), list):
        named += [(f"baseline.metrics[{j}]", m) for j, m in enumerate(base["metrics"])]
    return [f"{at}: {metric} is taken against per-request SLOs, and there are none (add e.g. slo: {{ttft_ms: 800}})"
            for at, metric in named if metric in SLO_METRICS]


def load_thresholds(path: Path, default_where: LevelWhere | None = None) -> Thresholds:
    """Read a thresholds YAML; InputError listing every problem as `file: field: what (fix)`.

    `default_where` is the level a level rule without `where` applies at (`sagellm recommend`: the target load).
    """
    data = _read_yaml(path)
    problems = _unknown_keys(data, _FIELDS[""], "")
    rules, rule_problems = _rules(data, default_where)
    problems += rule_problems
    if "baseline" in data:
        problems += _baseline_problems(data["baseline"], path.parent)
    slo = data.get("slo_ms_per_token")
    if slo is not None and not (_is_number(slo) and slo > 0):
        problems.append(f"slo_ms_per_token: {slo!r} is not a positive number of ms per token")
    if "slo" in data:
        problems += _slo_problems(data["slo"])
    problems += _slo_needed(data, rules)
    if problems:
        raise InputError([f"{path}: {p}" for p in problems])
    if isinstance(data.get("baseline"), dict) and "results" in data["baseline"]:
        data["baseline"]["results"] = path.parent / data["baseline"]["results"]
    return Thresholds.model_validate(data)


def _read_yaml(path: Path) -> dict:
    """The thresholds file's top-level mapping, or an InputError saying why there is none."""
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
        raise InputError(f"{path}: expected a mapping with rules, baseline, slo_ms_per_token, slo")
    return data


def _rules(data: dict, default_where: LevelWhere | None) -> tuple[list, list[str]]:
    """The file's rules (a level rule without `where` gets the default level) and their problems."""
    out: list[str] = []
    rules = data.get("rules", [])
    if not isinstance(rules, list):
        out.append(f"rules: expected a list of rules, got {rules!r}")
        rules = []
    elif "rules" in data and not rules:
        out.append("rules: empty, so the gate would pass anything (add a rule such as "
                   "{metric: error_rate, where: max, max: 0.01}, or remove rules: to gate on a baseline alone)")
    elif "rules" not in data and "baseline" not in data:
        out.append("nothing to check: add rules (e.g. {metric: error_rate, where: max, max: 0.01}) "
                   "or a baseline")
    for i, raw in enumerate(rules):
        out += _rule_problems(raw, i, default_where)
        if default_where is not None and isinstance(raw, dict) and raw.get("metric") in LEVEL_METRICS:
            raw.setdefault("where", default_where)
    return rules, out


# -------------------------------------------------------------------------------------------- evaluation

def _value(level: Level, metric: str) -> float | None:
    if metric.startswith("server."):  # server.<name>.<stat>: None where the source did not report it
        _, name, stat = metric.split(".")
        reported = level.server.metrics.get(name) if level.server is not None else None
        return getattr(reported.stats, stat) if reported is not None else None
    obj: Any = level
    for part in metric.split("."):
        obj = getattr(obj, part) if obj is not None else None  # lateness_ms is None in a closed loop
    return obj


def _run_value(results: Results, metric: str) -> float | None:
    """A whole-run figure by its dotted path (`cost.usd_per_h`, `ramp.cold_start_s`); None where absent."""
    obj: Any = results
    for part in metric.split("."):
        obj = getattr(obj, part) if obj is not None else None
    return obj


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"


# Levels are named by their load: `16` (concurrency) or `4/s` (request rate). These functions are the only
# places that know it; rules, baselines and reports follow them.

def where_of(level: LevelSummary | Pick) -> str:
    """How a rule's `where:` names this level (and how a run's levels are matched with a baseline's)."""
    return level.load


def level_name(where: LevelWhere) -> str | None:
    """A `where:` as a level name (`16`, `4/s`), or None when it names no level."""
    key = parse_load(where)
    if key is None:
        return None
    return load_name(None, key) if isinstance(key, float) else load_name(key, None)


def sweep_levels(run: Run) -> list[str]:
    """The levels a run sets out to measure: its planned sweep (it may stop earlier)."""
    return [load_name(c, None) for c in run.concurrency] + [load_name(None, r) for r in run.request_rate]


def planned_levels(results: Results) -> list[str]:
    """The levels a finished run set out to measure; its measured levels where it names no sweep."""
    return sweep_levels(results.run) or [where_of(lv) for lv in results.levels]


def find_level(results: Results, where: LevelWhere) -> tuple[Level | None, str]:
    """The measured level a `where:` names (a level, `knee` or `max`), or why there is none."""
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


def unplanned_levels(thresholds: Thresholds, planned: Sequence[str]) -> list[str]:
    """Rules whose `where:` names a level outside the sweep: bad input (no run could measure it), not a failure."""
    levels = ", ".join(planned)
    return [f"rules[{i}].where: {rule.where} is not a level of the sweep ({levels}); use one of its levels, "
            "knee or max" for i, rule in enumerate(thresholds.rules)
            if rule.where not in (None, "knee", "max") and level_name(rule.where) not in planned]


def differences(run: Run, baseline: Run) -> list[str]:
    """How a baseline's run differs from this one where they must match (MAY_DIFFER lists what may not).

    A field the baseline's file does not hold (written by an older sagellm) is unknown, not different."""
    now, before = run.model_dump(), baseline.model_dump()
    return [f"{key} {now[key]!r} (baseline {before[key]!r})" for key in Run.model_fields
            if key not in MAY_DIFFER and key in baseline.model_fields_set and now[key] != before[key]]


def slo_mismatch(thresholds: Thresholds, run: Run) -> list[str]:
    """Rules on attainment or goodput whose file's `slo:` is not the one the run's levels were summarised with
    (`sagellm gate` on a finished run: its figures cannot be re-taken against other limits)."""
    if thresholds.slo is None or thresholds.slo == run.request_slo:
        return []
    was = run.request_slo.describe() if run.request_slo is not None else "none"
    return [f"rules[{i}].metric: {rule.metric} was taken against the run's own per-request SLOs ({was}), not this "
            f"file's slo: ({thresholds.slo.describe()}) (re-run the bench with this file, or give the run's slo:)"
            for i, rule in enumerate(thresholds.rules) if rule.metric in SLO_METRICS]


def load_baseline(thresholds: Thresholds, run: Run, path: Path | None = None, *,
                  allow_incomparable: bool = False) -> Results | None:
    """The baseline run (`path`, else the thresholds' baseline.results); InputError when it cannot be compared
    with `run`, unless that is allowed."""
    path = path or (thresholds.baseline.results if thresholds.baseline else None)
    if path is None:
        if not thresholds.rules:
            raise InputError("--baseline: required: the thresholds have no rules, and their baseline block "
                             "names no results file to compare with")
        return None
    baseline = load_results(path)
    diffs = differences(run, baseline.run)
    if diffs and not allow_incomparable:
        raise InputError(f"{path}: baseline not comparable with this run: {'; '.join(diffs)} (compare runs of "
                         "the same model, instance, container and workload, or pass --allow-incomparable)")
    return baseline


def read_gate(thresholds_path: Path | None, baseline_path: Path | None, run: Run, planned: Sequence[str], *,
              allow_incomparable: bool = False) -> tuple[Thresholds | None, Results | None]:
    """The thresholds and the baseline a run is judged by, checked against that run (its sweep, its model,
    instance, container and workload); (None, None) when neither is given; InputError on bad input."""
    if thresholds_path is None and baseline_path is None:
        return None, None
    # --baseline alone compares with it on the default metrics.
    thresholds = load_thresholds(thresholds_path) if thresholds_path else Thresholds()
    if problems := unplanned_levels(thresholds, planned):
        raise InputError([f"{thresholds_path}: {p}" for p in problems])
    return thresholds, load_baseline(thresholds, run, baseline_path, allow_incomparable=allow_incomparable)


def _check_rule(results: Results, rule: Rule) -> Violation | None:
    where = None if rule.where is None else str(rule.where)
    at = f"{rule.metric}@{where}" if where else rule.metric
    limit = rule.max if rule.max is not None else rule.min

    def violation(measured: float | None, limit: float | None, message: str) -> Violation:
        return Violation(rule=rule.label, metric=rule.metric, where=where, measured=measured, limit=limit,
                         message=f"{at}: {message}")

    if rule.metric in RUN_METRICS:
        measured = _run_value(results, rule.metric)
        if measured is None:
            why = ("no scale from zero copies in the ramp" if rule.metric.startswith("ramp.")
                   else "no catalog price, or no usable level")
            return violation(None, limit, f"not available ({why})")
    else:
        assert rule.where is not None, "load_thresholds requires where for level metrics"
        level, why = find_level(results, rule.where)
        if level is None:
            return violation(None, limit, why)
        measured = _value(level, rule.metric)
        if measured is None:
            why = ("the server did not report it" if rule.metric.startswith("server.")
                   else "the run had no per-request SLOs (run.request_slo)" if rule.metric in SLO_METRICS
                   else "no successful request")
            return violation(None, limit, f"not measured at {level.describe_load()} ({why})")
    if rule.max is not None and measured > rule.max:
        return violation(measured, rule.max, f"{_fmt(measured)} > max {_fmt(rule.max)}")
    if rule.min is not None and measured < rule.min:
        return violation(measured, rule.min, f"{_fmt(measured)} < min {_fmt(rule.min)}")
    return None


def _regressions(results: Results, baseline: Results, config: Baseline) -> list[Violation]:
    matched = [(lv, baseline.level(where_of(lv))) for lv in results.levels]
    pairs_at = [(now, base) for now, base in matched if base is not None]
    out = []
    for metric in config.metrics:
        label = config.label(metric)
        pairs: list[tuple[str | None, float | None, float | None]]
        if metric in RUN_METRICS:
            pairs = [(None, _run_value(results, metric), _run_value(baseline, metric))]
        elif not pairs_at:
            out.append(Violation(rule=label, metric=metric, where=None, measured=None, limit=None,
                                 message=f"baseline {metric}: no level in common with the baseline run "
                                         "(run the same --concurrency or --request-rate levels)"))
            continue
        else:
            pairs = [(where_of(now), _value(now, metric), _value(base, metric)) for now, base in pairs_at]
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


def gate(results: Results, thresholds: Thresholds, baseline: Results | None = None) -> GateVerdict:
    """The gate block of results.json: every rule checked, the violations, how the baseline's run differs."""
    rules = [rule.label for rule in thresholds.rules]
    if baseline is not None:
        config = thresholds.baseline or Baseline()
        rules += [config.label(m) for m in config.metrics]
    if not rules:
        raise InputError("nothing to check: no rules, and no baseline results to compare with (add rules, "
                         "or pass --baseline)")
    violations = evaluate(results, thresholds, baseline)
    return GateVerdict(passed=not violations, rules=rules, violations=violations,
                incomparable=differences(results.run, baseline.run) if baseline is not None else [])


def violation_lines(verdict: GateVerdict) -> list[str]:
    """The lines a verdict is printed as where CI shows it, one per violated rule (`sagellm gate`, and the last
    lines on stderr of a failing `sagellm bench`)."""
    return [f"FAIL {v.rule}: {v.message}" for v in verdict.violations]

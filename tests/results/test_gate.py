"""Thresholds files (every error message) and evaluate() on synthetic results."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sagellm.errors import InputError
from sagellm.results.gate import Baseline, Rule, Thresholds, evaluate, gate, load_thresholds
from sagellm.results.schema import ERROR_KINDS, Level, Results, Run, Stats, Teardown
from sagellm.results.sweep import make_results

RUN = Run(profile="max-throughput", model="meta-llama/Llama-2-7b-hf", instance_type="ml.g5.2xlarge",
          instance_count=1, target="local", emulated=True, region="us-east-1", environment={},
          input_tokens=256, output_tokens=256, tool_version="0.1.0",
          started_at=datetime(2025, 1, 2, tzinfo=UTC), command="sagellm bench")


def level(c: int, tput: float, p50: float, *, p90: float | None = None, overloaded: int = 0,
          ok: int = 100) -> Level:
    errors = dict.fromkeys(ERROR_KINDS, 0) | {"overloaded": overloaded}
    lat = Stats(p50=p50, p90=p90 or p50 * 1.2, p99=p50 * 1.5, mean=p50) if ok else Stats()
    return Level(
        concurrency=c, requests=ok + overloaded, ok=ok, errors=errors, error_rate=overloaded / (ok + overloaded),
        retries=0, window_s=10, output_tokens=int(tput * 10), throughput_tokens_per_s=tput,
        requests_per_s=tput / 256, latency_ms_per_token=lat, ttft_ms=Stats(p50=50, p90=60, p99=70, mean=55),
        itl_ms=Stats(p50=9, p90=10, p99=12, mean=9.5), e2e_s=Stats(p50=3, p90=4, p99=5, mean=3))


def results(levels: list[Level] | None = None, *, usd_per_h: float | None = 1.2,
            stopped_reason: str | None = "error rate 12% at 32") -> Results:
    levels = levels or [level(8, 360, 25), level(16, 500, 40, p90=48), level(32, 520, 80, overloaded=14)]
    return make_results(RUN, levels, usd_per_h=usd_per_h, teardown=Teardown(status="destroyed"),
                        stopped_reason=stopped_reason)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gates.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_thresholds(path)
    return [m.removeprefix(f"{path}: ") for m in exc.value.messages]


# ----------------------------------------------------------------------------------------- loading

def test_loads_rules_baseline_and_slo_with_the_baseline_path_resolved_next_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "base.json").write_text("{}")
    path = write(tmp_path, """
        slo_ms_per_token: 100
        rules:
          - {metric: latency_ms_per_token.p90, where: 16, max: 80}
          - {metric: throughput_tokens_per_s, where: max, min: 400}
          - {metric: error_rate, where: knee, max: 0.01}
          - {metric: cost.usd_per_1m_tokens, max: 5}
        baseline: {results: base.json, max_regression_pct: 5, metrics: [ttft_ms.p99]}
    """)
    t = load_thresholds(path)
    assert t.slo_ms_per_token == 100
    assert t.rules[0] == Rule(metric="latency_ms_per_token.p90", where=16, max=80)
    assert [r.where for r in t.rules] == [16, "max", "knee", None]
    assert t.baseline == Baseline(results=tmp_path / "base.json", max_regression_pct=5, metrics=("ttft_ms.p99",))


def test_reports_malformed_yaml_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, """
        rules:
          - metric: error_rate
            where: max
           max: 0.01
    """)
    assert problems(path) == ["line 5: invalid YAML: expected <block end>, but found '<block mapping start>'"]


def test_reports_a_missing_file_and_an_empty_one(tmp_path: Path) -> None:
    assert problems(tmp_path / "gates.yaml") == ["file not found"]
    assert problems(write(tmp_path, "")) == ["empty (add rules: [{metric: ..., where: ..., max: ...}])"]


def test_reports_a_top_level_that_is_not_a_mapping(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "- metric: error_rate\n")) == [
        "expected a mapping with rules, baseline, slo_ms_per_token"]


def test_reports_an_unknown_metric_with_close_matches(tmp_path: Path) -> None:
    path = write(tmp_path, "rules: [{metric: latency_ms_per_tokn.p90, where: 16, max: 80}]")
    assert problems(path) == [("rules[0].metric: 'latency_ms_per_tokn.p90' is not a known metric "
                              "(did you mean latency_ms_per_token.p90 or latency_ms_per_token.p99 or "
                              "latency_ms_per_token.p95?)")]


def test_reports_an_unknown_metric_without_close_matches_by_listing_the_known_ones(tmp_path: Path) -> None:
    [message] = problems(write(tmp_path, "rules: [{metric: gpu_util, where: 16, max: 80}]"))
    assert message.startswith("rules[0].metric: 'gpu_util' is not a known metric (known: latency_ms_per_token.p50, ")
    assert message.endswith("cost.usd_per_1m_tokens, cost.usd_per_h)")


def test_reports_a_rule_without_any_limit(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "rules: [{metric: error_rate, where: max}]")) == [
        "rules[0]: no limit (add min, max or both)"]


def test_reports_limits_that_are_not_numbers_or_cannot_both_hold(tmp_path: Path) -> None:
    path = write(tmp_path, """
        rules:
          - {metric: error_rate, where: max, max: low}
          - {metric: throughput_tokens_per_s, where: 16, min: 500, max: 400}
    """)
    assert problems(path) == ["rules[0].max: 'low' is not a number",
                              "rules[1]: min 500 is above max 400 (no value could pass)"]


def test_reports_where_that_is_not_a_level(tmp_path: Path) -> None:
    path = write(tmp_path, """
        rules:
          - {metric: error_rate, where: p90, max: 0.01}
          - {metric: error_rate, where: 0, max: 0.01}
          - {metric: error_rate, max: 0.01}
          - {metric: cost.usd_per_h, where: max, max: 2}
    """)
    assert problems(path) == [
        ("rules[0].where: 'p90' is not a measured level (use a concurrency level such as 16, a request rate "
         "such as 4/s, knee or max)"),
        ("rules[1].where: 0 is not a measured level (use a concurrency level such as 16, a request rate such "
         "as 4/s, knee or max)"),
        "rules[2].where: missing (add a concurrency level such as 16, knee or max)",
        "rules[3].where: cost.usd_per_h is taken at the max-throughput point (remove where)",
    ]


def test_reports_unknown_fields_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, """
        rule: []
        rules: [{metric: error_rate, where: max, maximum: 0.01}]
    """)
    assert problems(path) == [
        "rule: unknown field (did you mean rules? allowed: rules, baseline, slo_ms_per_token)",
        "rules[0].maximum: unknown field (did you mean max? allowed: metric, where, min, max)",
        "rules[0]: no limit (add min, max or both)",
    ]


def test_reports_every_problem_of_every_rule_together(tmp_path: Path) -> None:
    path = write(tmp_path, """
        rules:
          - {where: 16, max: 80}
          - not a rule
          - {metric: ttft_ms.p99, where: knee, max: 500}
          - {metric: e2e_s.p50}
        baseline: {results: missing.json, max_regression_pct: -5, metrics: [throughput]}
        slo_ms_per_token: 0
    """)
    assert problems(path) == [
        "rules[0].metric: missing (add a metric path such as latency_ms_per_token.p90)",
        "rules[1]: expected a mapping with metric, where and min/max, got 'not a rule'",
        "rules[3].where: missing (add a concurrency level such as 16, knee or max)",
        "rules[3]: no limit (add min, max or both)",
        "baseline.results: missing.json does not exist (paths are relative to the thresholds file)",
        "baseline.max_regression_pct: -5 is not a percentage (use e.g. 10)",
        "baseline.metrics[0]: 'throughput' is not a known metric (did you mean throughput_tokens_per_s?)",
        "slo_ms_per_token: 0 is not a positive number of ms per token",
    ]


def test_rules_list_must_be_a_list(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "rules: {metric: error_rate}\n")) == [
        "rules: expected a list of rules, got {'metric': 'error_rate'}"]


# -------------------------------------------------------------------------------------- evaluation

def test_passes_when_every_rule_holds() -> None:
    t = Thresholds(rules=(Rule(metric="latency_ms_per_token.p90", where=16, max=48),
                          Rule(metric="throughput_tokens_per_s", where="max", min=500),
                          Rule(metric="error_rate", where="knee", max=0.0),
                          Rule(metric="cost.usd_per_1m_tokens", max=1)))
    assert evaluate(results(), t) == []


def test_reports_each_violated_limit_with_measured_and_limit() -> None:
    t = Thresholds(rules=(Rule(metric="latency_ms_per_token.p90", where=16, max=45),
                          Rule(metric="throughput_tokens_per_s", where="max", min=600),
                          Rule(metric="ttft_ms.p50", where=8, min=0, max=100)))
    [v1, v2] = evaluate(results(), t)
    assert (v1.rule, v1.metric, v1.where, v1.measured, v1.limit) == (
        "latency_ms_per_token.p90@16 <= 45", "latency_ms_per_token.p90", "16", 48, 45)
    assert v1.message == "latency_ms_per_token.p90@16: 48 > max 45"
    assert v2.message == "throughput_tokens_per_s@max: 500 < min 600"
    assert (v2.measured, v2.limit) == (500, 600)


def test_max_and_knee_resolve_to_the_picked_levels() -> None:
    r = results()
    assert r.max_throughput is not None and r.max_throughput.concurrency == 16  # 32 had 12 % errors
    assert r.knee is not None and r.knee.concurrency == 8  # 360 / 25 beats 500 / 40
    [v1, v2] = evaluate(r, Thresholds(rules=(Rule(metric="latency_ms_per_token.p50", where="max", max=30),
                                             Rule(metric="latency_ms_per_token.p50", where="knee", max=20))))
    assert v1.message == "latency_ms_per_token.p50@max: 40 > max 30"
    assert v2.message == "latency_ms_per_token.p50@knee: 25 > max 20"


def test_a_level_that_was_not_reached_is_a_violation_saying_why() -> None:
    [v] = evaluate(results(), Thresholds(rules=(Rule(metric="ttft_ms.p99", where=64, max=500),)))
    assert v.measured is None and v.limit == 500
    assert v.message == "ttft_ms.p99@64: level 64 was not measured (stopped at 32: error rate 12% at 32)"


def test_a_missing_level_without_a_stop_reason_lists_the_measured_levels() -> None:
    [v] = evaluate(results(stopped_reason=None), Thresholds(rules=(Rule(metric="error_rate", where=4, max=0),)))
    assert v.message == "error_rate@4: level 4 was not measured (measured: 8, 16, 32)"


def test_no_usable_level_fails_knee_and_max_rules() -> None:
    r = results([level(8, 360, 25, overloaded=50)])
    violations = evaluate(r, Thresholds(rules=(Rule(metric="error_rate", where="knee", max=1),
                                               Rule(metric="cost.usd_per_h", max=10),
                                               Rule(metric="cost.usd_per_1m_tokens", max=10))))
    assert [v.message for v in violations] == [
        "error_rate@knee: no knee: no level was usable (every level had timeouts or too many errors)",
        "cost.usd_per_1m_tokens: not available (no catalog price, or no usable level)",
    ]


def test_a_level_with_no_successful_request_fails_its_latency_rules() -> None:
    r = results([level(8, 0, 0, ok=0, overloaded=10)])
    [v] = evaluate(r, Thresholds(rules=(Rule(metric="latency_ms_per_token.p90", where=8, max=100),)))
    assert v.message == "latency_ms_per_token.p90@8: not measured at concurrency 8 (no successful request)"


def test_cost_rules_read_the_cost_at_max_throughput() -> None:
    # $1.2/h at 500 tokens/s = 0.6667 $/1M tokens
    [v] = evaluate(results(), Thresholds(rules=(Rule(metric="cost.usd_per_1m_tokens", max=0.5),)))
    assert v.message == "cost.usd_per_1m_tokens: 0.6667 > max 0.5"


def test_baseline_flags_latency_that_rose_and_throughput_that_fell_beyond_the_allowance() -> None:
    before = results([level(8, 360, 25), level(16, 500, 40)])
    now = results([level(8, 330, 27), level(16, 420, 45)])  # 8: -8.3 %, +8 %; 16: -16 %, +12.5 %
    config = Thresholds(baseline=Baseline(max_regression_pct=10,
                                          metrics=("latency_ms_per_token.p50", "throughput_tokens_per_s")))
    violations = evaluate(now, config, baseline=before)
    assert [v.message for v in violations] == [
        "baseline latency_ms_per_token.p50@16: 45 vs 40 (+12.5%; allowed 10%)",
        "baseline throughput_tokens_per_s@16: 420 vs 500 (-16.0%; allowed 10%)",
    ]
    assert violations[0].limit == pytest.approx(44) and violations[1].limit == pytest.approx(450)


def test_baseline_improvements_pass() -> None:
    before = results([level(8, 360, 25), level(16, 500, 40)])
    now = results([level(8, 500, 20), level(16, 700, 30)])
    assert evaluate(now, Thresholds(), baseline=before) == []


def test_baseline_compares_cost_run_wide() -> None:
    before = results(usd_per_h=1.0)
    [v] = evaluate(results(usd_per_h=1.2), Thresholds(baseline=Baseline(metrics=("cost.usd_per_h",))),
                   baseline=before)
    assert v.message == "baseline cost.usd_per_h: 1.2 vs 1 (+20.0%; allowed 10%)"


def test_baseline_without_a_common_level_is_a_violation() -> None:
    before = results([level(1, 100, 10)])
    [v] = evaluate(results(), Thresholds(baseline=Baseline(metrics=("throughput_tokens_per_s",))),
                   baseline=before)
    assert v.message == ("baseline throughput_tokens_per_s: no level in common with the baseline run (run "
                         "the same --concurrency or --request-rate levels)")


def test_gate_lists_every_rule_and_baseline_metric_and_passes_only_without_violations() -> None:
    t = Thresholds(rules=(Rule(metric="error_rate", where="max", max=0.01),))
    passed = gate(results(), t, baseline=results())
    assert passed.passed and passed.violations == []
    assert passed.rules == ["error_rate@max <= 0.01", "baseline latency_ms_per_token.p50 within 10%",
                            "baseline ttft_ms.p50 within 10%", "baseline throughput_tokens_per_s within 10%"]
    failed = gate(results(), Thresholds(rules=(Rule(metric="error_rate", where=32, max=0.01),)))
    assert not failed.passed and [v.rule for v in failed.violations] == ["error_rate@32 <= 0.01"]


def test_a_rule_built_in_code_needs_a_limit() -> None:
    with pytest.raises(ValueError, match="a rule needs min or max"):
        Rule(metric="error_rate", where="max")


def test_a_rule_names_a_rate_level_as_n_per_second(tmp_path: Path) -> None:
    rate = level(16, 380, 50).model_copy(update={"concurrency": None, "request_rate": 4.0})
    run = results([level(1, 100, 10), rate])
    assert run.level("4/s") is rate and run.level(4) is None and run.level("16") is None
    path = write(tmp_path, "rules: [{metric: latency_ms_per_token.p50, where: 4/s, max: 40}]")
    [v] = evaluate(run, load_thresholds(path))
    assert v.message == "latency_ms_per_token.p50@4/s: 50 > max 40"
    [missing] = evaluate(run, Thresholds(rules=(Rule(metric="ttft_ms.p95", where="2.5/s", max=1),)))
    assert missing.message == "ttft_ms.p95@2.5/s: level 2.5/s was not measured (stopped at 4/s: error rate 12% at 32)"

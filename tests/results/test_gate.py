"""Thresholds files (every error message) and evaluate() on synthetic results."""

from __future__ import annotations

import json
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from results_helpers import RUN, level
from sagellm.errors import InputError
from sagellm.results.gate import (
    DEFAULT_BASELINE_METRICS,
    LEVEL_METRICS,
    Baseline,
    Rule,
    Thresholds,
    differences,
    evaluate,
    find_level,
    gate,
    load_baseline,
    load_thresholds,
    planned_levels,
    slo_mismatch,
    unplanned_levels,
)
from sagellm.results.picks import make_results
from sagellm.results.schema import (
    Goodput,
    Level,
    LevelSummary,
    RequestSlo,
    Results,
    ServerMetric,
    ServerMetrics,
    ServerStats,
    Stats,
    Teardown,
    load_results,
    write_results,
)


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
        "expected a mapping with rules, baseline, slo_ms_per_token, slo"]


def test_reports_an_unknown_metric_with_close_matches(tmp_path: Path) -> None:
    path = write(tmp_path, "rules: [{metric: latency_ms_per_tokn.p90, where: 16, max: 80}]")
    assert problems(path) == [("rules[0].metric: 'latency_ms_per_tokn.p90' is not a known metric "
                              "(did you mean latency_ms_per_token.p90 or latency_ms_per_token.p99 or "
                              "latency_ms_per_token.p95?)")]


def test_reports_an_unknown_metric_without_close_matches_by_listing_the_known_ones(tmp_path: Path) -> None:
    [message] = problems(write(tmp_path, "rules: [{metric: gpu_util, where: 16, max: 80}]"))
    assert message.startswith("rules[0].metric: 'gpu_util' is not a known metric (known: latency_ms_per_token.p50, ")
    assert message.endswith("cost.usd_per_1m_tokens, cost.usd_per_h, ramp.cold_start_s)")


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
        "rule: unknown field (did you mean rules? allowed: rules, baseline, slo_ms_per_token, slo)",
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


# ------------------------------------------------------------------------------- nothing to check

def test_an_empty_rule_list_is_bad_input(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "rules: []\n")) == [
        ("rules: empty, so the gate would pass anything (add a rule such as {metric: error_rate, where: max, "
        "max: 0.01}, or remove rules: to gate on a baseline alone)")]


def test_a_file_without_rules_or_baseline_is_bad_input(tmp_path: Path) -> None:
    assert problems(write(tmp_path, "slo_ms_per_token: 50\n")) == [
        "nothing to check: add rules (e.g. {metric: error_rate, where: max, max: 0.01}) or a baseline"]


def test_an_empty_baseline_metric_list_is_bad_input(tmp_path: Path) -> None:
    [message] = problems(write(tmp_path, "baseline: {metrics: []}\n"))
    assert message.startswith("baseline.metrics: empty, so nothing would be compared")


def test_a_baseline_block_alone_loads_with_the_default_metrics(tmp_path: Path) -> None:
    t = load_thresholds(write(tmp_path, "baseline: {max_regression_pct: 5}\n"))
    assert t.rules == () and t.baseline == Baseline(max_regression_pct=5)
    assert t.baseline.metrics == DEFAULT_BASELINE_METRICS


def test_gate_with_nothing_to_check_is_bad_input() -> None:
    with pytest.raises(InputError, match="nothing to check"):
        gate(results(), Thresholds())


# ---------------------------------------------------------------------------- levels and metrics

def test_every_statistic_of_every_distribution_a_level_records_is_a_gate_metric() -> None:
    distributions = [name for name, field in LevelSummary.model_fields.items() if "Stats" in str(field.annotation)]
    assert {"latency_ms_per_token", "ttft_ms", "itl_ms", "e2e_s", "client_overhead_ms"} <= set(distributions)
    assert {f"{d}.{s}" for d in distributions for s in Stats.model_fields} <= set(LEVEL_METRICS)


def test_find_level_reads_a_level_the_knee_and_the_max_throughput_point() -> None:
    r = results()
    assert [find_level(r, where)[0].concurrency for where in (8, "knee", "max")] == [8, 8, 16]  # type: ignore[union-attr]
    assert find_level(r, 64) == (None, "level 64 was not measured (stopped at 32: error rate 12% at 32)")


def test_rules_at_levels_outside_the_sweep_are_named_with_the_sweeps_levels() -> None:
    t = Thresholds(rules=(Rule(metric="error_rate", where=16, max=0.1), Rule(metric="error_rate", where=3, max=0.1),
                          Rule(metric="error_rate", where="knee", max=0.1), Rule(metric="cost.usd_per_h", max=2)))
    assert unplanned_levels(t, ["1", "2", "4", "8", "16"]) == [
        "rules[1].where: 3 is not a level of the sweep (1, 2, 4, 8, 16); use one of its levels, knee or max"]
    assert planned_levels(results()) == ["1", "2", "4", "8", "16", "32"]
    no_sweep = results().model_copy(update={"run": RUN.model_copy(update={"concurrency": []})})
    assert planned_levels(no_sweep) == ["8", "16", "32"]  # a run that names no sweep: the measured levels stand in


# ------------------------------------------------------------------------------------ comparability

def test_differences_name_what_must_match_and_ignore_what_may_differ() -> None:
    other = RUN.model_copy(update={"model": "mistralai/Mistral-7B-v0.1", "input_tokens": 64, "profile": "replicas",
                                   "environment": {"MAX_BATCH_TOTAL_TOKENS": "1"}, "command": "other",
                                   "started_at": datetime(2026, 1, 1, tzinfo=UTC), "region": "eu-west-1"})
    assert differences(RUN, other) == ["model 'meta-llama/Llama-2-7b-hf' (baseline 'mistralai/Mistral-7B-v0.1')",
                                       "input_tokens 256 (baseline 64)"]
    assert differences(RUN, RUN.model_copy(update={"profile": "min-latency", "time_scale": 1.0})) == []


def test_a_field_an_older_baseline_did_not_record_is_not_a_difference(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    write_results(path, results())
    data = json.loads(path.read_text())
    del data["run"]["container"]  # results.json before run.container existed
    path.write_text(json.dumps(data))

    assert differences(RUN, load_results(path).run) == []
    assert differences(RUN, RUN.model_copy(update={"container": None})) == [
        f"container {RUN.container!r} (baseline None)"]


@pytest.mark.parametrize(("field", "value"), [
    ("model", "mistralai/Mistral-7B-v0.1"), ("instance_type", "ml.g5.12xlarge"), ("instance_count", 2),
    ("container", "djl-inference:0.29.0-lmi11.0.0-cu124"), ("target", "sagemaker"), ("input_tokens", 64),
    ("output_tokens", 128),
])
def test_load_baseline_refuses_another_model_instance_container_target_or_workload(
        tmp_path: Path, field: str, value: object) -> None:
    path = tmp_path / "base.json"
    write_results(path, results().model_copy(update={"run": RUN.model_copy(update={field: value})}))

    with pytest.raises(InputError) as exc:
        load_baseline(Thresholds(), RUN, path)

    assert exc.value.messages == [
        (f"{path}: baseline not comparable with this run: {field} {getattr(RUN, field)!r} (baseline {value!r}) "
        "(compare runs of the same model, instance, container and workload, or pass --allow-incomparable)")]
    assert load_baseline(Thresholds(), RUN, path, allow_incomparable=True) is not None


def test_load_baseline_takes_the_thresholds_file_unless_given_one(tmp_path: Path) -> None:
    write_results(tmp_path / "a.json", results())
    write_results(tmp_path / "b.json", results([level(1, 100, 10)]))
    t = Thresholds(rules=(Rule(metric="error_rate", where="max", max=1),),
                   baseline=Baseline(results=tmp_path / "a.json"))

    assert len(load_baseline(t, RUN).levels) == 3  # type: ignore[union-attr]
    assert len(load_baseline(t, RUN, tmp_path / "b.json").levels) == 1  # type: ignore[union-attr]
    assert load_baseline(Thresholds(rules=t.rules), RUN) is None  # rules alone: nothing to compare with


def test_load_baseline_without_rules_needs_a_results_file() -> None:
    with pytest.raises(InputError, match="--baseline: required: the thresholds have no rules"):
        load_baseline(Thresholds(baseline=Baseline()), RUN)


def test_gate_records_how_an_allowed_baseline_differs() -> None:
    before = results().model_copy(update={"run": RUN.model_copy(update={"output_tokens": 128})})
    verdict = gate(results(), Thresholds(rules=(Rule(metric="error_rate", where="max", max=1),)), before)
    assert verdict.incomparable == ["output_tokens 256 (baseline 128)"]
    assert gate(results(), Thresholds(), results()).incomparable == []


def test_a_rule_names_a_rate_level_as_n_per_second(tmp_path: Path) -> None:
    rate = level(16, 380, 50).model_copy(update={"concurrency": None, "request_rate": 4.0})
    run = results([level(1, 100, 10), rate])
    assert run.level("4/s") is rate and run.level(4) is None and run.level("16") is None
    path = write(tmp_path, "rules: [{metric: latency_ms_per_token.p50, where: 4/s, max: 40}]")
    [v] = evaluate(run, load_thresholds(path))
    assert v.message == "latency_ms_per_token.p50@4/s: 50 > max 40"
    [missing] = evaluate(run, Thresholds(rules=(Rule(metric="ttft_ms.p95", where="2.5/s", max=1),)))
    assert missing.message == "ttft_ms.p95@2.5/s: level 2.5/s was not measured (stopped at 4/s: error rate 12% at 32)"


# ------------------------------------------------------------------------------------- server metrics

def _with_server(lv: Level, p90_ms: float) -> Level:
    server = ServerMetrics(
        source="cloudwatch", window_start=datetime(2026, 1, 1, tzinfo=UTC), window_end=datetime(2026, 1, 1, 0, 1,
                                                                                                   tzinfo=UTC),
        period_s=60, metrics={"model_latency_ms": ServerMetric(
            unit="ms", name="AWS/SageMaker ModelLatency", stats=ServerStats(p50=p90_ms / 2, p90=p90_ms))})
    return lv.model_copy(update={"server": server})


def test_rules_on_server_metrics_are_checked_and_name_what_the_server_did_not_report() -> None:
    r = results([_with_server(level(8, 360, 25), 900), _with_server(level(16, 500, 40), 1500)],
                stopped_reason=None)
    violations = evaluate(r, Thresholds(rules=(
        Rule(metric="server.model_latency_ms.p90", where=8, max=1000),
        Rule(metric="server.model_latency_ms.p90", where=16, max=1000),
        Rule(metric="server.gpu_utilization_pct.avg", where=8, max=90),
    )))
    assert [v.message for v in violations] == [
        "server.model_latency_ms.p90@16: 1500 > max 1000",
        "server.gpu_utilization_pct.avg@8: not measured at concurrency 8 (the server did not report it)",
    ]


def test_server_metric_paths_are_validated_with_a_hint(tmp_path: Path) -> None:
    assert "server.model_latency_ms.p90" in LEVEL_METRICS
    assert load_thresholds(write(tmp_path, "rules: [{metric: server.invocations.sum, where: 1, min: 1}]")).rules
    [typo] = problems(write(tmp_path, "rules: [{metric: server.model_latency_ms.p95, where: 16, max: 80}]"))
    assert typo.startswith("rules[0].metric: 'server.model_latency_ms.p95' is not a known metric (did you mean "
                           "server.model_latency_ms.p99 or server.model_latency_ms.p90")
    [unknown] = problems(write(tmp_path, "rules: [{metric: server.watts.zz, where: 16, max: 80}]"))
    assert unknown.startswith("rules[0].metric: 'server.watts.zz' is not a known metric (use server.<name>.<stat>, "
                              "name one of model_latency_ms, ")
    assert "\n" not in unknown


def test_a_cold_start_over_its_max_fails_the_gate_and_a_run_without_one_says_why() -> None:
    from sagellm.results.schema import RampRecord

    ramp = RampRecord(rates=[0.1], step_s=300, interval_s=30, scaling="simulated", policy=None, intervals=[],
                      events=[], first_breach_s=None, first_scale_out_s=None, first_in_service_s=None,
                      breach_to_in_service_s=None, slo_ms_per_token=None, slo_violated_s=None, slo_recovered_s=None,
                      requests_while_scaling=0, failed_while_scaling=0, above_slo_while_scaling=None,
                      instance_minutes=1.0, cost_usd=None, capacity="copies", cold_start_s=190.0)
    rules = Thresholds(rules=(Rule(metric="ramp.cold_start_s", max=120),))
    [v] = evaluate(results().model_copy(update={"ramp": ramp}), rules)
    assert v.message == "ramp.cold_start_s: 190 > max 120"
    [v] = evaluate(results(), rules)
    assert v.message == "ramp.cold_start_s: not available (no scale from zero copies in the ramp)"


# ------------------------------------------------------------------------------- goodput and SLO attainment

def test_loads_per_request_slos_and_rules_on_attainment_and_goodput(tmp_path: Path) -> None:
    t = load_thresholds(write(tmp_path, """
        slo: {ttft_ms: 800, itl_ms: 50, e2e_ms: 20000}
        rules:
          - {metric: slo_attainment, where: 16, min: 0.95}
          - {metric: goodput.requests_per_s, where: knee, min: 2}
          - {metric: goodput.tokens_per_s, where: max, min: 300}
    """))
    assert t.slo == RequestSlo(ttft_ms=800, itl_ms=50, e2e_ms=20000)
    assert {"slo_attainment", "goodput.requests_per_s", "goodput.tokens_per_s"} <= set(LEVEL_METRICS)


def test_reports_every_slo_problem_on_its_own_line(tmp_path: Path) -> None:
    assert problems(write(tmp_path, """
        slo: {ttft: 800, itl_ms: -5, tpot_ms: 40, e2e_ms: fast}
        rules: [{metric: slo_attainment, where: 16, min: 0.9}]
    """)) == [
        "slo.ttft: unknown field (did you mean ttft_ms? allowed: ttft_ms, itl_ms, tpot_ms, e2e_ms)",
        "slo.itl_ms: -5 is not a positive number of ms (use e.g. itl_ms: 800)",
        "slo.e2e_ms: 'fast' is not a positive number of ms (use e.g. e2e_ms: 800)",
        "slo: itl_ms and tpot_ms name one figure, the request's mean inter-token time (give one of them)",
    ]
    assert problems(write(tmp_path, "slo: 800\nrules: [{metric: error_rate, where: 16, max: 0}]\n")) == [
        ("slo: expected a mapping of per-request limits in ms such as {ttft_ms: 800, itl_ms: 50}, got 800 "
        "(limits: ttft_ms, itl_ms, tpot_ms, e2e_ms)")]


def test_attainment_or_goodput_without_an_slo_is_bad_input(tmp_path: Path) -> None:
    assert problems(write(tmp_path, """
        rules: [{metric: goodput.tokens_per_s, where: 16, min: 100}]
        baseline: {metrics: [slo_attainment]}
    """)) == [
        ("rules[0].metric: goodput.tokens_per_s is taken against per-request SLOs, and there are none "
        "(add e.g. slo: {ttft_ms: 800})"),
        ("baseline.metrics[0]: slo_attainment is taken against per-request SLOs, and there are none "
        "(add e.g. slo: {ttft_ms: 800})"),
    ]


def _with_goodput(lv: Level, attainment: float, good_tokens_per_s: float) -> Level:
    return lv.model_copy(update={"slo_attainment": attainment, "goodput": Goodput(
        requests_per_s=good_tokens_per_s / 256, tokens_per_s=good_tokens_per_s)})


def test_gate_on_attainment_and_goodput_fails_and_passes_as_the_numbers_say() -> None:
    slo = RequestSlo(ttft_ms=800)
    r = results([_with_goodput(level(8, 360, 25), 0.99, 356), _with_goodput(level(16, 500, 40), 0.90, 450)])
    r = r.model_copy(update={"run": r.run.model_copy(update={"request_slo": slo})})
    t = Thresholds(slo=slo, rules=(Rule(metric="slo_attainment", where=8, min=0.95),
                                   Rule(metric="slo_attainment", where=16, min=0.95),
                                   Rule(metric="goodput.tokens_per_s", where=16, min=400),
                                   Rule(metric="goodput.requests_per_s", where=8, min=1.3)))
    [v] = evaluate(r, t)
    assert v.message == "slo_attainment@16: 0.9 < min 0.95"
    assert (v.measured, v.limit) == (0.90, 0.95)
    assert slo_mismatch(t, r.run) == []


def test_a_run_without_slos_fails_a_goodput_rule_saying_why_and_another_slo_is_refused() -> None:
    r = results([level(8, 360, 25)], stopped_reason=None)
    [v] = evaluate(r, Thresholds(slo=RequestSlo(ttft_ms=800),
                                 rules=(Rule(metric="goodput.requests_per_s", where=8, min=1),)))
    assert v.message == ("goodput.requests_per_s@8: not measured at concurrency 8 "
                         "(the run had no per-request SLOs (run.request_slo))")
    ran = r.run.model_copy(update={"request_slo": RequestSlo(ttft_ms=500)})
    t = Thresholds(slo=RequestSlo(ttft_ms=800), rules=(Rule(metric="slo_attainment", where=8, min=0.9),
                                                       Rule(metric="error_rate", where=8, max=0)))
    assert slo_mismatch(t, ran) == [
        ("rules[0].metric: slo_attainment was taken against the run's own per-request SLOs (TTFT ≤ 500 ms), not "
        "this file's slo: (TTFT ≤ 800 ms) (re-run the bench with this file, or give the run's slo:)")]

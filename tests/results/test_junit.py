"""junit.xml: what a CI system reads from a run, validated against the JUnit schema Jenkins' xUnit plugin uses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from results_helpers import RUN, level, results
from sagellm.results.gate import Baseline, Rule, Thresholds, gate
from sagellm.results.junit import render_junit
from sagellm.results.schema import Failure, Results

# junit-10.xsd from jenkinsci/xunit-plugin (source and commit in its first comment).
SCHEMA = xmlschema.XMLSchema(Path(__file__).with_name("junit-10.xsd"))

FAILING = Thresholds(rules=(Rule(metric="latency_ms_per_token.p90", where=4, max=15),
                            Rule(metric="error_rate", where="max", max=0.01),
                            Rule(metric="ttft_ms.p99", where=32, max=100)))
PASSING = Thresholds(rules=(Rule(metric="error_rate", where="max", max=0.01),))


def gated(thresholds: Thresholds, r: Results | None = None, baseline: Results | None = None) -> Results:
    r = r or results()
    return r.model_copy(update={"gate": gate(r, thresholds, baseline)})


def suite_of(r: Results) -> ET.Element:
    text = render_junit(r)
    SCHEMA.validate(text)
    [suite] = ET.fromstring(text).findall("testsuite")
    return suite


def outcomes(suite: ET.Element) -> dict[str, str]:
    """Each test case's name → passed, failure, error or skipped."""
    out = {}
    for case in suite.findall("testcase"):
        found = [tag for tag in ("failure", "error", "skipped") if case.find(tag) is not None]
        assert len(found) <= 1, ET.tostring(case)
        out[case.get("name", "")] = found[0] if found else "passed"
    return out


def counts(suite: ET.Element) -> tuple[str | None, ...]:
    return tuple(suite.get(key) for key in ("tests", "failures", "errors", "skipped"))


CASES = {
    "passing gate": lambda: gated(PASSING),
    "failing gate": lambda: gated(FAILING),
    "no thresholds": lambda: results(),
    "failed run": lambda: results([], failure=Failure(exit_status=3, message="deploy failed: <no capacity> & more")),
    "interrupted": lambda: gated(PASSING, results(failure=Failure(exit_status=130, message="interrupted"))),
    "baseline": lambda: gated(Thresholds(baseline=Baseline(metrics=("throughput_tokens_per_s",))),
                              baseline=results([level(1, 200, 5)])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_junit_is_valid_against_the_xunit_plugins_junit_schema(case: str) -> None:
    SCHEMA.validate(render_junit(CASES[case]()))


def test_the_schema_check_can_fail() -> None:
    text = render_junit(gated(PASSING)).replace('time="150.000"', 'time="1.5e2"', 1)
    assert 'time="1.5e2"' in text
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(text)


def test_one_case_per_rule_fails_a_broken_bound_and_errors_a_rule_with_nothing_to_measure() -> None:
    suite = suite_of(gated(FAILING))

    assert outcomes(suite) == {"bench run": "passed", "latency_ms_per_token.p90@4 <= 15": "failure",
                               "error_rate@max <= 0.01": "passed", "ttft_ms.p99@32 <= 100": "error"}
    assert counts(suite) == ("4", "1", "1", "0")
    [failure] = suite.iter("failure")
    assert (failure.get("type"), failure.get("message")) == (
        "threshold", "latency_ms_per_token.p90@4: 16.8 > max 15")
    assert failure.text == "latency_ms_per_token.p90@4: 16.8 > max 15 (measured 16.8, limit 15)"
    [error] = suite.iter("error")
    assert error.get("type") == "unmeasured"
    assert error.get("message") == ("ttft_ms.p99@32: level 32 was not measured (stopped at 16: error rate 16.7% > "
                                    "5% at concurrency 16 (20 overloaded))")


def test_a_rule_at_a_level_without_a_successful_request_is_an_error() -> None:
    r = results([level(1, 100, 10), level(2, 0, 0, ok=0, overloaded=10)], stopped_reason=None)
    suite = suite_of(gated(Thresholds(rules=(Rule(metric="latency_ms_per_token.p50", where=2, max=50),)), r))

    assert outcomes(suite)["latency_ms_per_token.p50@2 <= 50"] == "error"


def test_without_thresholds_the_gate_is_skipped_not_passed() -> None:
    suite = suite_of(results())

    assert outcomes(suite) == {"bench run": "passed", "thresholds": "skipped"}
    assert counts(suite) == ("2", "0", "0", "1")
    [skipped] = suite.iter("skipped")
    assert skipped.get("message") == "no thresholds given (pass --thresholds gates.yaml to gate)"


def test_a_failed_run_is_an_error_even_when_its_rules_hold() -> None:
    failure = Failure(exit_status=3, message="no request succeeded: validation: HTTP 422")
    suite = suite_of(gated(PASSING, results(failure=failure)))

    assert outcomes(suite) == {"bench run": "error", "error_rate@max <= 0.01": "passed"}
    [error] = suite.iter("error")
    assert (error.get("type"), error.get("message")) == ("target-failure", failure.message)
    assert error.text == "exit 3: no request succeeded: validation: HTTP 422"
    root = ET.fromstring(render_junit(gated(PASSING, results(failure=failure))))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "1")


def test_an_interrupted_run_is_an_error_of_its_own_type() -> None:
    suite = suite_of(results(failure=Failure(exit_status=130, message="interrupted: stopped measuring")))

    [error] = suite.iter("error")
    assert error.get("type") == "interrupted"


def test_baseline_metrics_are_cases_too_failing_on_regression() -> None:
    r = results([level(1, 100, 10), level(2, 190, 10.5)], stopped_reason=None)
    before = results([level(1, 100, 10), level(2, 300, 10.5)], stopped_reason=None)
    suite = suite_of(gated(Thresholds(baseline=Baseline(metrics=("throughput_tokens_per_s", "ttft_ms.p50"))),
                           r, baseline=before))

    assert outcomes(suite) == {"bench run": "passed", "baseline throughput_tokens_per_s within 10%": "failure",
                               "baseline ttft_ms.p50 within 10%": "passed"}


def test_suite_carries_start_time_duration_and_the_runs_facts() -> None:
    suite = suite_of(gated(PASSING))

    assert suite.get("timestamp") == "2025-01-02T03:04:05+00:00"
    assert suite.get("time") == "150.000"  # 03:04:05 → 03:06:35
    [run_case] = [c for c in suite.findall("testcase") if c.get("name") == "bench run"]
    assert run_case.get("time") == "150.000"
    assert all(c.get("time") is not None for c in suite.findall("testcase"))
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["model"] == RUN.model and props["instance_type"] == RUN.instance_type
    assert props["started_at"] == "2025-01-02T03:04:05Z" and props["emulated"] == "True"
    assert "environment" not in props  # only scalar facts


def test_an_unfinished_run_has_zero_time() -> None:
    r = results(run=RUN.model_copy(update={"ended_at": None}))

    assert suite_of(r).get("time") == "0.000"

"""junit.xml for pipelines, rendered from results.json: one test case for the run, one per threshold rule.

What a CI system reads: the run errored (it failed, exit 3, or was interrupted), a rule failed (measured and
out of bounds), a rule errored (nothing to measure: the level was not reached, no request succeeded), or the
gate was skipped (no thresholds given). Nothing shows green that was not checked.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from sagellm.results.schema import Results, Violation

SUITE = "sagellm"


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _seconds(value: float) -> str:
    # Surefire's time format (junit-10.xsd): digits, at most three decimals, no exponent.
    return f"{max(value, 0.0):.3f}"


def _properties(results: Results) -> ET.Element:
    """The run's scalar fields (profile, model, instance, target, …), so a CI page says what was measured."""
    props = ET.Element("properties")
    for key, value in results.run.model_dump(mode="json").items():
        if value is not None and not isinstance(value, dict | list):
            ET.SubElement(props, "property", name=key, value=str(value))
    return props


def _run_case(results: Results, duration_s: float) -> ET.Element:
    case = ET.Element("testcase", classname=f"{SUITE}.bench", name="bench run", time=_seconds(duration_s))
    failure = results.failure
    if failure is not None:
        kind = "interrupted" if failure.exit_status == 130 else "target-failure"
        error = ET.SubElement(case, "error", type=kind, message=failure.message)
        error.text = f"exit {failure.exit_status}: {failure.message}"
    return case


def _rule_case(rule: str, violations: list[Violation]) -> ET.Element:
    case = ET.Element("testcase", classname=f"{SUITE}.gate", name=rule, time=_seconds(0))
    if violations:
        # A bound that was measured and broken is a failure; a rule with nothing to measure is an error.
        measured = [v for v in violations if v.measured is not None]
        tag, kind = ("failure", "threshold") if measured else ("error", "unmeasured")
        element = ET.SubElement(case, tag, type=kind, message=(measured or violations)[0].message)
        element.text = "\n".join(f"{v.message} (measured {_g(v.measured)}, limit {_g(v.limit)})"
                                 for v in violations)
    return case


def render_junit(results: Results) -> str:
    """JUnit XML: the run (error if it failed), then each rule (failure, error, or skipped without thresholds)."""
    run = results.run
    duration_s = (run.ended_at - run.started_at).total_seconds() if run.ended_at else 0.0
    suite = ET.Element("testsuite", name=SUITE, timestamp=run.started_at.isoformat(timespec="seconds"),
                       time=_seconds(duration_s))
    suite.append(_properties(results))
    suite.append(_run_case(results, duration_s))
    gate = results.gate
    if gate is None:
        case = ET.SubElement(suite, "testcase", classname=f"{SUITE}.gate", name="thresholds", time=_seconds(0))
        ET.SubElement(case, "skipped", message="no thresholds given (pass --thresholds gates.yaml to gate)")
    else:
        rules = list(gate.rules)
        rules += [v.rule for v in gate.violations if v.rule not in rules]  # keep any stray violation visible
        for rule in rules:
            suite.append(_rule_case(rule, [v for v in gate.violations if v.rule == rule]))
    cases = suite.findall("testcase")
    counts = {tag: sum(1 for case in cases if case.find(tag) is not None) for tag in ("failure", "error", "skipped")}
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    root = ET.Element("testsuites", name=SUITE, tests=str(len(cases)), failures=str(counts["failure"]),
                      errors=str(counts["error"]), time=_seconds(duration_s))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

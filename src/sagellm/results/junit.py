"""junit.xml for pipelines, rendered from results.json: one test case per threshold rule."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from sagellm.results.schema import Results


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def render_junit(results: Results) -> str:
    """JUnit XML: one test case per threshold rule (failed where violated); one passing case if no rules."""
    gate = results.gate
    rules = list(gate.rules) if gate else []
    violations = list(gate.violations) if gate else []
    for v in violations:  # a violation always names a rule; keep any stray one visible
        if v.rule not in rules:
            rules.append(v.rule)
    suite = ET.Element("testsuite", name="sagellm.gate")
    if not rules:
        ET.SubElement(suite, "testcase", classname="sagellm.gate", name="thresholds")
    for rule in rules:
        case = ET.SubElement(suite, "testcase", classname="sagellm.gate", name=rule)
        failed = [v for v in violations if v.rule == rule]
        if failed:
            failure = ET.SubElement(case, "failure", message=failed[0].message, type="threshold")
            failure.text = "\n".join(
                f"{v.message} (measured {_g(v.measured)}, limit {_g(v.limit)})" for v in failed)
    failures = sum(1 for case in suite if case.find("failure") is not None)
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    root = ET.Element("testsuites", tests=str(len(suite)), failures=str(failures))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

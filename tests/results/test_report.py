"""report.md, junit.xml and curve.png rendered from results."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from sagellm.results.gate import Rule, Thresholds, gate
from sagellm.results.junit import render_junit
from sagellm.results.report import render_markdown, write_report
from sagellm.results.schema import ERROR_KINDS, Level, Predicted, Results, Run, Stats, Teardown
from sagellm.results.sweep import make_results

RUN = Run(profile="max-throughput", model="meta-llama/Llama-2-7b-hf", instance_type="ml.g5.2xlarge",
          instance_count=1, target="local", emulated=True, time_scale=0.05, region="us-east-1",
          environment={"MAX_CONCURRENT_REQUESTS": "64"}, input_tokens=256, output_tokens=256,
          tool_version="0.1.0", started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
          command="sagellm bench --profile max-throughput --model meta-llama/Llama-2-7b-hf")


def level(c: int, tput: float, p50: float, *, overloaded: int = 0) -> Level:
    errors = dict.fromkeys(ERROR_KINDS, 0) | {"overloaded": overloaded}
    return Level(
        concurrency=c, requests=100 + overloaded, ok=100, errors=errors,
        error_rate=overloaded / (100 + overloaded), retries=0, window_s=10, output_tokens=int(tput * 10),
        throughput_tokens_per_s=tput, requests_per_s=tput / 256,
        latency_ms_per_token=Stats(p50=p50, p90=p50 * 1.2, p95=p50 * 1.4, p99=p50 * 1.5, mean=p50),
        ttft_ms=Stats(p50=50, p90=60, p99=70, mean=55), itl_ms=Stats(p50=9, p90=10, p99=12, mean=9.5),
        e2e_s=Stats(p50=3, p90=4, p99=5, mean=3),
        predicted=Predicted(ms_per_token=p50 * 0.9, ttft_ms=45, itl_ms=8, e2e_s=2.8,
                            throughput_tokens_per_s=tput * 1.1, requests_per_s=1, rejected=False,
                            within_timeout=True))


def results(thresholds: Thresholds | None = None, *, teardown: Teardown | None = None) -> Results:
    levels = [level(1, 100, 10), level(2, 190, 10.5), level(4, 300, 14), level(8, 360, 25),
              level(16, 380, 50, overloaded=20)]
    r = make_results(RUN, levels, usd_per_h=1.21, slo_ms_per_token=20,
                     teardown=teardown or Teardown(status="destroyed"), stopped_reason="error rate 17% at 16")
    return r if thresholds is None else r.model_copy(update={"gate": gate(r, thresholds)})


FAILING = Thresholds(rules=(Rule(metric="latency_ms_per_token.p90", where=4, max=15),
                            Rule(metric="error_rate", where="max", max=0.01),
                            Rule(metric="ttft_ms.p99", where=64, max=100)))


def test_markdown_starts_with_the_verdict() -> None:
    failed = render_markdown(results(FAILING)).splitlines()[0]
    assert failed.startswith("**FAIL** — 2 violation(s) of 3 threshold rule(s)")
    assert "sweep stopped: error rate 17% at 16" in failed
    passed = render_markdown(results(Thresholds(rules=(Rule(metric="error_rate", where="max", max=0.01),))))
    assert passed.splitlines()[0].startswith("**PASS** — 1 threshold rule(s), no violation")
    assert render_markdown(results()).splitlines()[0].startswith("**NO GATE**")


def test_markdown_verdict_shouts_a_failed_teardown_and_lists_leftovers() -> None:
    r = results(teardown=Teardown(status="failed", detail="DELETE_FAILED on Endpoint",
                                  leftovers=["AWS::SageMaker::Endpoint sagellm-abc"]))
    text = render_markdown(r)
    assert "**TEARDOWN FAILED**" in text.splitlines()[0]
    assert "Status: **failed** — DELETE_FAILED on Endpoint" in text
    assert "- `AWS::SageMaker::Endpoint sagellm-abc`" in text


def test_markdown_has_the_run_header_every_level_with_predictions_and_the_picks() -> None:
    text = render_markdown(results(FAILING))
    assert "# sagellm bench: meta-llama/Llama-2-7b-hf on 1 × ml.g5.2xlarge" in text
    assert "target local (emulated, time scale 0.05)" in text
    for c in (1, 2, 4, 8, 16):
        assert f"### Concurrency {c}\n" in text
    assert "| ms/token (e2e ÷ tokens) | 14.0 | 16.8 | 19.6 | 21.0 | 14.0 | 12.6 |" in text
    assert "| throughput tokens/s | 300.0 | | | | | 330.0 |" in text
    assert "- Knee: concurrency **4** — 300 tokens/s at 14.0 ms/token p50" in text
    assert "- Max throughput: concurrency **8** — 360 tokens/s at 25.0 ms/token p50" in text
    assert "- Best under SLO 20 ms/token: concurrency **4**" in text
    assert "- Cost: $1.21/h · $0.934 per 1M output tokens at concurrency 8" in text


def test_markdown_lists_errors_by_kind_and_gate_violations() -> None:
    text = render_markdown(results(FAILING))
    assert "| 16 | 20 | 0 | 0 | 0 | 0 | 16.7% |" in text
    assert "errors: overloaded 20 (rate 16.7%)" in text
    assert ("| `ttft_ms.p99@64 <= 100` | – | 100.000 | ttft_ms.p99@64: level 64 was not measured "
            "(stopped at 16: error rate 17% at 16) |") in text
    assert "| `latency_ms_per_token.p90@4 <= 15` | 16.800 | 15.000 |" in text


def test_junit_has_one_testcase_per_rule_failing_where_violated() -> None:
    root = ET.fromstring(render_junit(results(FAILING)))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["latency_ms_per_token.p90@4 <= 15", "error_rate@max <= 0.01",
                                              "ttft_ms.p99@64 <= 100"]
    assert [c.find("failure") is not None for c in cases] == [True, False, True]
    failure = cases[0].find("failure")
    assert failure is not None
    assert failure.get("message") == "latency_ms_per_token.p90@4: 16.8 > max 15"
    assert failure.text == "latency_ms_per_token.p90@4: 16.8 > max 15 (measured 16.8, limit 15)"
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("3", "2")


def test_junit_without_rules_is_one_passing_thresholds_case() -> None:
    for r in (results(), results(Thresholds())):
        cases = ET.fromstring(render_junit(r)).findall("./testsuite/testcase")
        assert [(c.get("name"), c.find("failure")) for c in cases] == [("thresholds", None)]


def test_write_report_writes_markdown_junit_and_a_real_png(tmp_path: Path) -> None:
    paths = write_report(tmp_path / "out", results(FAILING))
    assert [p.name for p in paths] == ["report.md", "junit.xml", "curve.png"]
    png = (tmp_path / "out" / "curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    assert (tmp_path / "out" / "report.md").read_text().startswith("**FAIL**")
    ET.parse(tmp_path / "out" / "junit.xml")


def test_curve_is_drawn_even_when_no_level_succeeded(tmp_path: Path) -> None:
    from sagellm.results.plot import plot_curve

    empty = make_results(RUN, [], usd_per_h=None, teardown=Teardown(status="not-applicable"))
    plot_curve(empty, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert render_markdown(empty).count("No level was measured.") == 1

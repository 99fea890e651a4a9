"""report.md, junit.xml and curve.png rendered from results."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from results_helpers import RUN, level
from sagellm.results.gate import Rule, Thresholds, gate
from sagellm.results.picks import make_results
from sagellm.results.plot import plot_curve
from sagellm.results.report import render_markdown, write_report
from sagellm.results.schema import (
    Failure,
    Goodput,
    Level,
    OverSaturation,
    RequestSlo,
    Results,
    Run,
    ServerMetric,
    ServerMetrics,
    ServerStats,
    Stats,
    Teardown,
)
from sagellm.results.table import render_csv


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
    assert "| ms/token (e2e ÷ tokens) | 14.0 | 16.8 | – | 21.0 | 14.0 | 12.6 |" in text  # no p95 recorded
    assert "| throughput tokens/s | 300.0 | | | | | 330.0 |" in text
    assert "- Knee: concurrency **4** — 300 tokens/s at 14.0 ms/token p50" in text
    assert "- Max throughput: concurrency **8** — 360 tokens/s at 25.0 ms/token p50" in text
    assert "- Best under SLO 20 ms/token: concurrency **4**" in text
    assert "- Cost: $1.21/h · $0.934 per 1M output tokens at concurrency 8" in text


def test_markdown_lists_errors_by_kind_and_gate_violations() -> None:
    text = render_markdown(results(FAILING))
    assert "| 16 | 20 | 0 | 0 | 0 | 0 | 0 | 16.7% |" in text  # overloaded … throttled, client, other
    assert "errors: overloaded 20 (rate 16.7%)" in text
    assert ("| `ttft_ms.p99@64 <= 100` | – | 100.000 | ttft_ms.p99@64: level 64 was not measured "
            "(stopped at 16: error rate 17% at 16) |") in text
    assert "| `latency_ms_per_token.p90@4 <= 15` | 16.800 | 15.000 |" in text


@pytest.mark.slow
def test_write_report_writes_markdown_junit_and_a_real_png(tmp_path: Path) -> None:
    paths = write_report(tmp_path / "out", results(FAILING))
    assert [p.name for p in paths] == ["report.md", "junit.xml", "curve.png", "results.csv"]
    png = (tmp_path / "out" / "curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.startswith("**FAIL**")
    assert "\n![latency vs throughput](curve.png)\n" in report  # beside it, so the link resolves
    ET.parse(tmp_path / "out" / "junit.xml")
    assert (tmp_path / "out" / "results.csv").read_text().count("\n") == 1 + 5  # header + one row per level


def test_curve_is_drawn_even_when_no_level_succeeded(tmp_path: Path) -> None:
    from sagellm.results.plot import plot_curve

    empty = make_results(RUN, [], usd_per_h=None, teardown=Teardown(status="not-applicable"))
    plot_curve(empty, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert render_markdown(empty).count("No level was measured.") == 1


def test_a_run_where_nothing_was_measured_never_says_no_request_failed() -> None:
    stopped = make_results(RUN, [], usd_per_h=None, teardown=Teardown(status="not-applicable"),
                           stopped_reason="no request succeeded: validation: HTTP 400: too long")

    text = render_markdown(stopped)

    assert "No request failed" not in text
    assert ("No request was measured (warm-up requests are not counted here); the sweep stopped: no request "
            "succeeded: validation: HTTP 400: too long.") in text


def test_an_http_run_without_a_catalog_model_names_the_served_model_and_predicts_nothing(tmp_path: Path) -> None:
    run = RUN.model_copy(update={"profile": None, "model": "tiny-llama", "served_model": "tiny-llama",
                                 "instance_type": None, "instance_count": None, "target": "http",
                                 "emulated": False, "endpoint": "http://127.0.0.1:8000", "environment": {}})
    text = render_markdown(make_results(run, [level(1, 100.0, 10.0)], usd_per_h=None,
                                        teardown=Teardown(status="not-applicable")))

    assert text.splitlines()[2] == "# sagellm bench: tiny-llama on `http://127.0.0.1:8000`"
    assert "- No profile or catalog model (`--model`): nothing predicted, no cost · target http" in text
    assert write_report(tmp_path, make_results(run, [], usd_per_h=None, teardown=Teardown(status="not-applicable")))


def test_markdown_verdict_says_a_failed_run_first_and_once() -> None:
    message = "no request succeeded: validation: HTTP 422"
    r = results(FAILING).model_copy(update={"failure": Failure(exit_status=3, message=message),
                                           "stopped_reason": message})
    first = render_markdown(r).splitlines()[0]
    assert first == f"**RUN FAILED** (exit 3) — {message} · gate: 2 violation(s) of 3 rule(s)"

    interrupted = results().model_copy(update={"failure": Failure(exit_status=130, message="interrupted"),
                                               "stopped_reason": "interrupted after 5 level(s)"})
    assert render_markdown(interrupted).splitlines()[0] == (
        "**INTERRUPTED** (exit 130) — interrupted · sweep stopped: interrupted after 5 level(s)")


def test_markdown_verdict_names_a_failed_teardown_once() -> None:
    r = results(teardown=Teardown(status="failed", detail="DELETE_FAILED")).model_copy(
        update={"failure": Failure(exit_status=3, message="TEARDOWN FAILED: DELETE_FAILED")})
    assert render_markdown(r).splitlines()[0] == (
        "**TEARDOWN FAILED** (exit 3) — DELETE_FAILED · sweep stopped: error rate 17% at 16")


def test_markdown_gate_section_lists_how_an_allowed_baseline_differs() -> None:
    r = results(FAILING)
    assert r.gate is not None
    r = r.model_copy(update={"gate": r.gate.model_copy(update={"incomparable": ["input_tokens 256 (baseline 64)"]})})
    assert ("Compared with a baseline that differs (--allow-incomparable): input_tokens 256 (baseline 64)"
            in render_markdown(r))


def test_markdown_level_table_has_a_column_per_statistic() -> None:
    text = render_markdown(results())
    header = "| metric | " + " | ".join(Stats.model_fields) + " | predicted |"
    assert header in text
    assert all(line.count("|") == header.count("|") for line in text.splitlines()
               if line.startswith(("| ms/token", "| TTFT ms", "| throughput tokens/s", "| requests/s")))


def _run(levels: list[Level], run: Run = RUN) -> Results:
    return make_results(run, levels, usd_per_h=1.0, teardown=Teardown(status="destroyed"))


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    data = path.read_bytes()
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _server(p50_ms: float, p90_ms: float | None, source: str = "cloudwatch") -> ServerMetrics:
    name, key = ("AWS/SageMaker ModelLatency", "model_latency_ms") if source == "cloudwatch" else (
        "vllm:e2e_request_latency_seconds", "e2e_latency_ms")
    stats = ServerStats(p50=p50_ms, p90=p90_ms) if p90_ms is not None else ServerStats(avg=p50_ms, count=10)
    return ServerMetrics(source=source, window_start=datetime(2026, 1, 1, 12, tzinfo=UTC),  # type: ignore[arg-type]
                         window_end=datetime(2026, 1, 1, 12, 1, tzinfo=UTC), period_s=60 if p90_ms else None,
                         metrics={key: ServerMetric(unit="ms", name=name, stats=stats)})


@pytest.mark.slow
def test_server_metrics_get_a_table_per_level_and_a_second_plot_panel(tmp_path: Path) -> None:
    levels = [level(1, 100, 20), level(4, 300, 30)]
    plain = _run(levels)
    served = _run([lv.model_copy(update={"server": _server(900.0 + i, 1100.0)}) for i, lv in enumerate(levels)])
    report = render_markdown(served)
    # RUN is the local target: the emulator's metrics, and the window read over them, are on its simulated clock.
    assert report.count("Server-side (cloudwatch, one period of 60 s, 12:00:00–12:01:00 simulated (the emulator's "
                        "clock: its start in UTC, then simulated time)):") == 2
    assert "UTC):" not in report
    assert "| model_latency_ms | ms | 900.00 | 1,100.00 |" in report
    assert "Server-side" not in render_markdown(plain)
    plot_curve(plain, tmp_path / "plain.png")
    plot_curve(served, tmp_path / "served.png")
    # The second panel makes the figure taller; without server figures it stays one panel.
    assert _png_size(tmp_path / "plain.png") == (800, 550)
    assert _png_size(tmp_path / "served.png") == (800, 950)


@pytest.mark.slow
def test_a_prometheus_mean_is_plotted_and_listed_as_the_source_gave_it(tmp_path: Path) -> None:
    http = RUN.model_copy(update={"target": "http", "emulated": False, "time_scale": 1.0})
    served = _run([level(1, 100, 20).model_copy(update={"server": _server(800.0, None, "prometheus")})], http)
    report = render_markdown(served)
    assert "Server-side (prometheus, 12:00:00–12:01:00 UTC):" in report  # a real server's scrapes, on the wall clock
    assert "vllm:e2e_request_latency_seconds" in report
    plot_curve(served, tmp_path / "curve.png")
    assert _png_size(tmp_path / "curve.png") == (800, 950)


def test_a_level_the_load_generator_bottlenecked_is_flagged_in_the_header_and_its_section() -> None:
    why = "requests were sent late, median 290000 ms of wall time (over 50 ms); the client could not keep its schedule: add --workers"
    flagged = level(4, 300, 14).model_copy(update={"client_bottleneck": why, "client_loop_lag_ms": 31.5})
    text = render_markdown(make_results(RUN, [level(1, 100, 10), flagged], usd_per_h=1.21,
                                        teardown=Teardown(status="destroyed")))

    header = text.split("## ")[0]
    assert ("- **The load generator was the bottleneck** at 4: those levels understate the endpoint (see each level; "
            "docs/metrics.md, Client bottleneck)") in header
    section = text.split("### Concurrency 4")[1].split("###")[0]
    assert f"**The load generator was the bottleneck**, not the endpoint: {why}" in section
    assert "Client event-loop lag: mean 31.5 ms (wall clock)" in section
    assert "bottleneck" not in text.split("### Concurrency 1")[1].split("###")[0]


def test_goodput_and_attainment_get_overview_columns_level_rows_csv_columns_and_a_plot_series(
        tmp_path: Path) -> None:
    slo = RequestSlo(ttft_ms=800, itl_ms=50)
    levels = [lv.model_copy(update={"slo_attainment": a, "goodput": Goodput(requests_per_s=g / 256, tokens_per_s=g)})
              for lv, a, g in ((level(1, 100, 20), 1.0, 100.0), (level(4, 300, 30), 0.875, 262.5))]
    run = _run(levels, RUN.model_copy(update={"request_slo": slo}))
    report = render_markdown(run)
    assert "- Per-request SLOs: TTFT ≤ 800 ms, ITL ≤ 50 ms · SLO attainment:" in report
    assert "| ITL p50 ms | error rate | goodput tokens/s | SLO attainment |" in report
    assert "| 9.0 | 0.0% | 262.5 | 87.5% |" in report
    assert "| SLO attainment | 0.875 |" in report and "| goodput tokens/s | 262.5 |" in report
    assert "goodput" not in render_markdown(_run([level(1, 100, 20)]))  # no SLOs, no columns
    header, *rows = render_csv(run).splitlines()
    columns = header.split(",")
    assert {"slo_attainment", "goodput.requests_per_s", "goodput.tokens_per_s"} <= set(columns)
    assert rows[1].split(",")[columns.index("goodput.tokens_per_s")] == "262.5"
    plot_curve(run, tmp_path / "curve.png")  # the goodput series beside throughput draws (matplotlib raises if not)


def test_an_over_saturated_level_is_labelled_in_the_report_and_csv_and_is_never_a_pick() -> None:
    over = OverSaturation(reason="over-saturated at concurrency 8: requests in flight grew by 2/s over the last 30 s",
                          stopped_at_s=41.5)
    # The over-saturated level has the highest throughput and the best ratio; neither pick may be it.
    levels = [level(1, 100, 10), level(2, 190, 10.5), level(8, 900, 5).model_copy(update={"over_saturated": over})]
    r = make_results(RUN, levels, usd_per_h=1.0, slo_ms_per_token=20, teardown=Teardown(status="destroyed"),
                     stopped_reason=over.reason)
    assert r.max_throughput is not None and r.max_throughput.concurrency == 2
    assert r.knee is not None and r.knee.concurrency == 2
    md = render_markdown(r)
    assert (f"**Over-saturated: stopped early** after 41.5 s: {over.reason}; the figures below are of the part "
            "measured before it stopped.") in md
    rows = list(csv.DictReader(io.StringIO(render_csv(r))))
    assert [row["over_saturated.stopped_at_s"] for row in rows] == ["", "", "41.5"]
    assert rows[2]["over_saturated.reason"] == over.reason

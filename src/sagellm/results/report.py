"""report.md from results.json, and write_report(): report.md, junit.xml and curve.png together."""

from __future__ import annotations

from pathlib import Path

from sagellm.results.junit import render_junit
from sagellm.results.plot import plot_curve
from sagellm.results.schema import ERROR_KINDS, Level, Pick, Results, Stats


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def verdict(results: Results) -> str:
    """One line: the gate verdict, then anything else a reader must not miss."""
    gate = results.gate
    if gate is None:
        text = "**NO GATE** — no thresholds given"
    elif gate.passed:
        text = f"**PASS** — {len(gate.rules)} threshold rule(s), no violation"
    else:
        text = f"**FAIL** — {len(gate.violations)} violation(s) of {len(gate.rules)} threshold rule(s)"
    if results.teardown.status == "failed":
        text += " · **TEARDOWN FAILED** — resources are left (see Teardown)"
    if results.stopped_reason:
        text += f" · sweep stopped: {results.stopped_reason}"
    return text


def _header(results: Results) -> list[str]:
    run = results.run
    target = run.target + (f" (emulated, time scale {run.time_scale:g})" if run.emulated else "")
    ended = run.ended_at.isoformat(timespec="seconds") if run.ended_at else "–"
    return [
        f"# sagellm bench: {run.model} on {run.instance_count} × {run.instance_type}",
        "",
        f"- Profile `{run.profile}` · region {run.region} · target {target}"
        + (f" · endpoint `{run.endpoint}`" if run.endpoint else ""),
        f"- Payload {run.input_tokens} input / {run.output_tokens} output tokens"
        + (f" · container {run.container}" if run.container else ""),
        f"- Started {run.started_at.isoformat(timespec='seconds')} · ended {ended} · sagellm {run.tool_version}",
        f"- Command: `{run.command}`",
        "- Environment: " + (", ".join(f"`{k}={v}`" for k, v in sorted(run.environment.items())) or "–"),
    ]


def _pick(name: str, pick: Pick | None) -> str:
    if pick is None:
        return f"- {name}: none (no usable level)"
    return (f"- {name}: concurrency **{pick.concurrency}** — {_n(pick.throughput_tokens_per_s, 0)} tokens/s "
            f"at {_n(pick.ms_per_token_p50)} ms/token p50 ({pick.definition})")


def _highlights(results: Results) -> list[str]:
    lines = ["## Knee, maximum and cost", "", _pick("Knee", results.knee),
             _pick("Max throughput", results.max_throughput)]
    if results.slo is not None:
        lines.append(_pick(f"Best under SLO {results.slo.ms_per_token:g} ms/token", results.slo.best))
    cost = results.cost
    per_1m = f"${cost.usd_per_1m_tokens:,.3f} per 1M output tokens at concurrency {cost.at_concurrency}" \
        if cost.usd_per_1m_tokens is not None else "$/1M tokens: n/a"
    per_h = f"${cost.usd_per_h:,.2f}/h" if cost.usd_per_h is not None else "$/h: n/a (no catalog price)"
    lines.append(f"- Cost: {per_h} · {per_1m}")
    return lines


def _row(name: str, stats: Stats, predicted: float | None, digits: int = 1) -> str:
    return (f"| {name} | {_n(stats.p50, digits)} | {_n(stats.p90, digits)} | {_n(stats.p99, digits)} | "
            f"{_n(stats.mean, digits)} | {_n(predicted, digits)} |")


def _level(level: Level) -> list[str]:
    p = level.predicted
    errors = ", ".join(f"{k} {n}" for k, n in level.errors.items() if n) or "none"
    lines = [
        f"### Concurrency {level.concurrency}",
        "",
        (f"{level.requests} requests · {level.ok} ok · errors: {errors} (rate {level.error_rate:.1%}) · "
        f"retries {level.retries} · window {level.window_s:.1f} s"),
        "",
        "| metric | p50 | p90 | p99 | mean | predicted |",
        "|---|---:|---:|---:|---:|---:|",
        _row("ms/token (e2e ÷ tokens)", level.latency_ms_per_token, p.ms_per_token if p else None),
        _row("TTFT ms", level.ttft_ms, p.ttft_ms if p else None),
        _row("ITL ms", level.itl_ms, p.itl_ms if p else None),
        _row("e2e s", level.e2e_s, p.e2e_s if p else None, digits=2),
        (f"| throughput tokens/s | {_n(level.throughput_tokens_per_s)} | | | | "
        f"{_n(p.throughput_tokens_per_s if p else None)} |"),
        f"| requests/s | {_n(level.requests_per_s, 2)} | | | | {_n(p.requests_per_s if p else None, 2)} |",
    ]
    if level.client_overhead_ms is not None:
        lines.append(_row("client overhead ms", level.client_overhead_ms, None, digits=2))
    if level.server_loop_lag_ms is not None:
        lines += ["", f"Emulator event-loop lag: max {level.server_loop_lag_ms:.1f} ms (its own distortion)"]
    return lines + [""]


def _overview(results: Results) -> list[str]:
    lines = [("| concurrency | tokens/s | predicted | ms/token p50 | predicted | p90 | p99 | TTFT p50 ms | "
             "ITL p50 ms | error rate |"), "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for lv in results.levels:
        p = lv.predicted
        lines.append(
            f"| {lv.concurrency} | {_n(lv.throughput_tokens_per_s)} | {_n(p.throughput_tokens_per_s if p else None)}"
            f" | {_n(lv.latency_ms_per_token.p50)} | {_n(p.ms_per_token if p else None)}"
            f" | {_n(lv.latency_ms_per_token.p90)} | {_n(lv.latency_ms_per_token.p99)} | {_n(lv.ttft_ms.p50)}"
            f" | {_n(lv.itl_ms.p50)} | {lv.error_rate:.1%} |")
    return lines + [""]


def _errors(results: Results) -> list[str]:
    lines = ["## Errors by kind", ""]
    if not any(lv.requests - lv.ok for lv in results.levels):
        return lines + ["No request failed.", ""]
    lines += ["| concurrency | " + " | ".join(ERROR_KINDS) + " | error rate |",
              "|---:|" + "---:|" * (len(ERROR_KINDS) + 1)]
    for lv in results.levels:
        counts = " | ".join(str(lv.errors.get(k, 0)) for k in ERROR_KINDS)
        lines.append(f"| {lv.concurrency} | {counts} | {lv.error_rate:.1%} |")
    return lines + [""]


def _teardown(results: Results) -> list[str]:
    t = results.teardown
    lines = ["## Teardown", "", f"Status: **{t.status}**" + (f" — {t.detail}" if t.detail else "")]
    if t.leftovers:
        lines += ["", "Left behind:"] + [f"- `{item}`" for item in t.leftovers]
    return lines + [""]


def _gate(results: Results) -> list[str]:
    gate = results.gate
    lines = ["## Gate", ""]
    if gate is None:
        return lines + ["No thresholds were given.", ""]
    if not gate.violations:
        return lines + [f"All {len(gate.rules)} rule(s) passed."] + [f"- `{r}`" for r in gate.rules] + [""]
    lines += ["| rule | measured | limit | message |", "|---|---:|---:|---|"]
    for v in gate.violations:
        lines.append(f"| `{v.rule}` | {_n(v.measured, 3)} | {_n(v.limit, 3)} | {v.message} |")
    return lines + [""]


def render_markdown(results: Results) -> str:
    """The human report: verdict first, then the run, the picks, one table per level, errors, teardown, gate."""
    lines = [verdict(results), ""] + _header(results) + [""] + _highlights(results) + ["", "## Levels", ""]
    if not results.levels:
        lines += ["No level was measured.", ""]
    else:
        lines += _overview(results)
    for level in results.levels:
        lines += _level(level)
    lines += _errors(results) + _teardown(results) + _gate(results)
    return "\n".join(lines)


def write_report(directory: Path, results: Results) -> list[Path]:
    """Write report.md, junit.xml and curve.png into a directory; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    md, junit, png = directory / "report.md", directory / "junit.xml", directory / "curve.png"
    md.write_text(render_markdown(results) + "\n", encoding="utf-8")
    junit.write_text(render_junit(results), encoding="utf-8")
    plot_curve(results, png)
    return [md, junit, png]

"""report.md from results.json, and write_report(): report.md, junit.xml, curve.png and results.csv together."""

from __future__ import annotations

import os
from pathlib import Path

from sagellm.results.junit import render_junit
from sagellm.results.picks import knee_at_top
from sagellm.results.plot import plot_curve
from sagellm.results.prediction import FLAG, assumed, departures, flag
from sagellm.results.ramp_report import plot_ramp, render_ramp
from sagellm.results.schema import (
    ERROR_KINDS,
    Level,
    Pick,
    RampRecord,
    Results,
    Run,
    ServerMetrics,
    ServerStats,
    Stats,
    SweepRecord,
    TurnSummary,
)
from sagellm.results.table import render_csv


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def verdict(results: Results) -> str:
    """One line: the run's failure or the gate verdict, then anything else a reader must not miss."""
    gate, failure = results.gate, results.failure
    if failure is not None:
        name = "TEARDOWN FAILED" if results.teardown.status == "failed" else (
            "INTERRUPTED" if failure.exit_status == 130 else "RUN FAILED")
        text = f"**{name}** (exit {failure.exit_status}) — {failure.message.removeprefix(name + ': ')}"
        if gate is not None:
            text += f" · gate: {len(gate.violations)} violation(s) of {len(gate.rules)} rule(s)"
    elif gate is None:
        text = "**NO GATE** — no thresholds given"
    elif gate.passed:
        text = f"**PASS** — {len(gate.rules)} threshold rule(s), no violation"
    else:
        text = f"**FAIL** — {len(gate.violations)} violation(s) of {len(gate.rules)} threshold rule(s)"
    if results.teardown.status == "failed" and "TEARDOWN FAILED" not in text:
        text += " · **TEARDOWN FAILED** — resources are left (see Teardown)"
    if results.stopped_reason and results.stopped_reason != (failure.message if failure else None):
        text += f" · sweep stopped: {results.stopped_reason}"
    return text


def _header(results: Results) -> list[str]:
    run = results.run
    target = run.target + (f" (emulated, time scale {run.time_scale:g})" if run.emulated else "")
    ended = run.ended_at.isoformat(timespec="seconds") if run.ended_at else "–"
    served = f" (served as `{run.served_model}`)" if run.served_model and run.served_model != run.model else ""
    where = f"{run.instance_count} × {run.instance_type}" if run.instance_type else f"`{run.endpoint}`"
    profile = (f"Profile `{run.profile}` · region {run.region}" if run.profile
               else "No profile or catalog model (`--model`): nothing predicted, no cost")
    return [
        f"# sagellm bench: {run.model}{served} on {where}",
        "",
        f"- {profile} · target {target}" + (f" · endpoint `{run.endpoint}`" if run.endpoint else ""),
        f"- Payload {run.input_tokens} input / {run.output_tokens} output tokens (mean)" + _workload(run),
        f"- Load: {_load(run)} · timings from the {run.clock}'s clock"
        + (" (simulated time; client overhead in wall-clock ms)" if run.clock == "emulator" else "")
        + (" · sent by SageMaker AI's benchmark job (AIPerf, one job a level)" if run.load_by != "sagellm" else ""),
        *_sweep(results.sweep, results.ramp, confirmed_only_by=_differing(results)),
        *_client_bound(results),
        *_request_slo(run),
        f"- Started {run.started_at.isoformat(timespec='seconds')} · ended {ended} · sagellm {run.tool_version}",
        f"- Command: `{run.command}`",
        "- Environment: " + (", ".join(f"`{k}={v}`" for k, v in sorted(run.environment.items())) or "–"),
    ]


def _request_slo(run: Run) -> list[str]:
    """The header's line on the per-request SLOs each level's attainment and goodput are taken against."""
    if run.request_slo is None:
        return []
    return [(f"- Per-request SLOs: {run.request_slo.describe()} · SLO attainment: the share of a level's requests "
             "that met every one (a failed request misses) · goodput: the rate of those requests "
             "(docs/metrics.md)")]


def _workload(run: Run) -> str:
    w = run.workload
    if w is None:
        return ""
    prompts = f"dataset {w.dataset} ({w.dataset_entries} prompts)" if w.dataset else "unique prompts"
    if w.trace is not None:
        t = w.trace
        prompts = (f"trace replay of {t.file} ({t.format}, {t.rows} of {t.rows_in_file} requests at speed "
                   f"{t.speed:g}: their arrival times and lengths{', shared blocks' if t.format == 'mooncake' else ''})")
    prefix = f", shared prefix {w.shared_prefix_tokens} tokens" if w.shared_prefix_tokens else ""
    if w.turns:
        prefix += f", conversations of {w.turns} turns with {w.think_time_s} s think time"
    return (f" · {prompts}{prefix}, lengths {w.input_tokens} in / {w.output_tokens} out, counted by "
            f"{w.token_counter} (the server's counts where it reports them), seed {w.seed}, {w.api} API")


def _load(run: Run) -> str:
    tail = f", each level {run.repeats} times" if run.repeats > 1 else ""
    if run.workers > 1 or run.ray:
        tail += f", from {run.workers} worker processes" + (f" on the Ray cluster {run.ray}" if run.ray else "")
    if run.workload is not None and run.workload.trace is not None:
        t = run.workload.trace
        at_speed_1 = t.request_rate / t.speed
        speeds = ", ".join(f"{rate / at_speed_1:.3g}" for rate in run.request_rate or [t.request_rate])
        rates = ", ".join(f"{rate:.3g}" for rate in run.request_rate or [t.request_rate])
        return (f"trace replay (open loop): each request at its recorded arrival time ÷ the speed ({speeds}; "
                f"{t.duration_s:g} s at speed {t.speed:g}), mean {rates} requests/s, at most {run.max_in_flight} "
                f"in flight{tail}")
    if run.request_rate:
        return (f"open loop, {run.arrivals} arrivals at {', '.join(f'{r:g}' for r in run.request_rate)} "
                f"requests/s, at most {run.max_in_flight} in flight{tail}")
    return f"closed loop at concurrency {', '.join(map(str, run.concurrency))}{tail}"


def _differing(results: Results) -> str:
    """The metrics more than FLAG off their prediction at some level, named once each."""
    return ", ".join(dict.fromkeys(d.metric for lv in results.levels for d in departures(lv)))


def _sweep(sweep: SweepRecord | None, ramp: RampRecord | None = None, confirmed_only_by: str = "") -> list[str]:
    """The sweep's line: how levels were chosen and what they cost; a sweep the prediction 'confirmed' (by
    throughput and ms/token) says which other metrics differ. A ramp's: its steps and the instances it kept."""
    if ramp is not None:  # its steps share one schedule, and scaling changes the instances under it
        return [(f"- Ramp: {len(ramp.rates)} steps of {ramp.step_s:g} s back to back, {ramp.instance_minutes:.2f} "
                "endpoint-minutes (instances in service × minutes)")]
    if sweep is None:
        return []
    text = f"- Sweep: {sweep.method}, {sweep.endpoint_minutes:.2f} endpoint-minutes"
    if sweep.method == "adaptive":
        text += (f" (a doubling sweep to its first error: ~{sweep.doubling_endpoint_minutes:.2f}, estimated)"
                 if sweep.doubling_endpoint_minutes is not None else "")
        text += (f" · from the predicted knee {sweep.predicted_knee} and max {sweep.predicted_max}, measured in "
                 f"the order {', '.join(sweep.order)}")
    if sweep.budget_minutes is not None:
        text += f" · budget {sweep.budget_minutes:g} endpoint-minutes"
    outcome = sweep.outcome or ""
    if "confirmed" in outcome and confirmed_only_by:
        outcome += (f" (by tokens/s and p50 ms/token; more than {FLAG:.0%} off elsewhere: {confirmed_only_by}, "
                    "see Prediction)")
    return [text + (f" · {outcome}" if outcome else "")]


def _client_bound(results: Results) -> list[str]:
    """The header's warning when the load generator, not the endpoint, was the bottleneck of some level."""
    bound = [lv.load for lv in results.levels if lv.client_bottleneck]
    if not bound:
        return []
    return [(f"- **The load generator was the bottleneck** at {', '.join(bound)}: those levels understate the "
            "endpoint (see each level; docs/metrics.md, Client bottleneck)")]


def _prediction(results: Results) -> list[str]:
    """Every metric more than FLAG off its prediction, with what the prediction assumed; or that none is."""
    off = [d for lv in results.levels for d in departures(lv)]
    if not any(lv.predicted for lv in results.levels):
        return []
    run = results.run
    if any(lv.predicted and lv.predicted.same_engine for lv in results.levels):
        return [("- Prediction: simulated requests on the emulator's own engine at the load the clients offered, so "
                 "predicted and measured agree by construction and nothing is flagged; a difference is this "
                 "machine's (client overhead, event-loop lag)")]
    if not off:
        return [(f"- Prediction: every predicted metric within {FLAG:.0%} of the measurement "
                 "(tokens/s, requests/s, p50 ms/token, TTFT, ITL, e2e)")]
    return [(f"- **Prediction off by more than {FLAG:.0%}** (it assumed {assumed(run)}): "
             + "; ".join(d.describe() for d in off))]


def _pick(name: str, pick: Pick | None) -> str:
    if pick is None:
        return f"- {name}: none (no usable level)"
    return (f"- {name}: {pick.describe_load().replace(pick.load, f'**{pick.load}**')} — "
            f"{_n(pick.throughput_tokens_per_s, 0)} tokens/s "
            f"at {_n(pick.ms_per_token_p50)} ms/token p50 ({pick.definition})")


def _highlights(results: Results) -> list[str]:
    lines = ["## Knee, maximum and cost", "", _pick("Knee", results.knee),
             _pick("Max throughput", results.max_throughput)]
    if results.slo is not None:
        lines.append(_pick(f"Best under SLO {results.slo.ms_per_token:g} ms/token", results.slo.best))
    cost = results.cost
    at = f"request rate {cost.at_request_rate:g}/s" if cost.at_request_rate is not None \
        else f"concurrency {cost.at_concurrency}"
    per_1m = f"${cost.usd_per_1m_tokens:,.3f} per 1M output tokens at {at}" \
        if cost.usd_per_1m_tokens is not None else "$/1M tokens: n/a"
    per_h = f"${cost.usd_per_h:,.2f}/h" if cost.usd_per_h is not None else "$/h: n/a (no catalog price)"
    lines.append(f"- Cost: {per_h} · {per_1m}")
    if knee_at_top(results):
        lines.append("- The knee is the highest level measured: the sweep never reached saturation "
                     "(the true knee may lie higher)")
    return lines + _prediction(results)


_STATS = tuple(Stats.model_fields)  # every statistic a distribution holds gets a column


def _row(name: str, stats: Stats, predicted: float | None, digits: int = 1, mark: str = "") -> str:
    values = " | ".join(_n(getattr(stats, s), digits) for s in _STATS)
    return f"| {name} | {values} | {_n(predicted, digits)}{mark} |"


def _scalar_row(name: str, value: float | None, predicted: float | None, digits: int = 1, mark: str = "") -> str:
    return f"| {name} | {_n(value, digits)} |" + " |" * (len(_STATS) - 1) + f" {_n(predicted, digits)}{mark} |"


_SPREAD_SHOWN = ("throughput_tokens_per_s", "latency_ms_per_token.p50", "ttft_ms.p50", "ttft_ms.p95",
                 "itl_ms.p50", "itl_ms.p95")


def _level(level: Level, run: Run) -> list[str]:
    lines = [*_level_heading(level), *_level_table(level), *_level_notes(level)]
    if level.server is not None:
        lines += _server(level.server, run)
    return lines + [""]


def _level_heading(level: Level) -> list[str]:
    """The level's load, its request and error counts, and whether it was stopped early."""
    errors = ", ".join(f"{k} {n}" for k, n in level.errors.items() if n) or "none"
    if level.refused_no_capacity:
        errors += (f" ({level.refused_no_capacity} refused for want of a copy: the cold start, not counted against "
                   "the level's usability)")
    repeats = f" · {level.repeats} repeats (figures over all of them)" if level.repeats > 1 else ""
    return [
        f"### {level.describe_load().capitalize()}",
        "",
        (f"{level.requests} requests · {level.ok} ok · errors: {errors} (rate {level.error_rate:.1%}) · "
         f"retries {level.retries} · window {level.window_s:.1f} s{repeats}"),
        "",
        *([(f"**Over-saturated: stopped early** after {level.over_saturated.stopped_at_s:.1f} s: "
            f"{level.over_saturated.reason}; the figures below are of the part measured before it stopped."), ""]
          if level.over_saturated else []),
    ]


def _level_table(level: Level) -> list[str]:
    """The measured figures beside the predicted ones, with the client's own pacing where it kept a schedule."""
    p = level.predicted
    lines = [
        "| metric | " + " | ".join(_STATS) + " | predicted |",
        "|---|" + "---:|" * (len(_STATS) + 1),
        _row("ms/token (e2e ÷ tokens)", level.latency_ms_per_token, p.ms_per_token if p else None,
             mark=flag(level, "ms/token p50")),
        _row("TTFT ms", level.ttft_ms, p.ttft_ms if p else None, mark=flag(level, "TTFT p50 ms")),
        _row("ITL ms (per request, = TPOT)", level.itl_ms, p.itl_ms if p else None, mark=flag(level, "ITL p50 ms")),
        _row("token gaps ms (pooled)", level.token_gap_ms, None),
        _row("e2e s", level.e2e_s, p.e2e_s if p else None, digits=2, mark=flag(level, "e2e p50 s")),
        _row("input tokens", level.request_input_tokens, None, digits=0),
        _row("output tokens", level.request_output_tokens, None, digits=0),
        _scalar_row("throughput tokens/s", level.throughput_tokens_per_s, p.throughput_tokens_per_s if p else None,
                    mark=flag(level, "tokens/s")),
        _scalar_row("requests/s", level.requests_per_s, p.requests_per_s if p else None, digits=2,
                    mark=flag(level, "requests/s")),
    ]
    if level.goodput is not None:
        pg = p.goodput if p else None
        lines += [_scalar_row("SLO attainment", level.slo_attainment, p.slo_attainment if p else None, digits=3),
                  _scalar_row("goodput tokens/s", level.goodput.tokens_per_s, pg.tokens_per_s if pg else None),
                  _scalar_row("goodput requests/s", level.goodput.requests_per_s, pg.requests_per_s if pg else None,
                              digits=2)]
    if level.lateness_ms is not None:
        lines.append(_row("lateness ms (sent − scheduled)", level.lateness_ms, None, digits=2))
        lines.append(_scalar_row("achieved requests/s", level.achieved_request_rate, None, digits=2))
    if level.client_overhead_ms is not None:
        lines.append(_row("client overhead ms (wall clock)", level.client_overhead_ms, None, digits=2))
    return lines


def _level_notes(level: Level) -> list[str]:
    """What qualifies the figures: their spread over repeats, and the load generator's and emulator's own lag."""
    lines: list[str] = []
    if level.spread:
        lines += ["", "Across repeats (each repeat's own figure): "
                  + " · ".join(f"{m} {s.mean:.4g} ± {s.stddev:.2g} ({s.min:.4g}–{s.max:.4g})"
                               for m, s in level.spread.items() if m in _SPREAD_SHOWN)]
    if level.by_turn:
        lines += _by_turn(level.by_turn)
    if level.client_bottleneck:
        lines += ["", f"**The load generator was the bottleneck**, not the endpoint: {level.client_bottleneck}"]
    if level.client_loop_lag_ms is not None:
        lines += ["", f"Client event-loop lag: mean {level.client_loop_lag_ms:.1f} ms (wall clock)"]
    if level.server_loop_lag_ms is not None:
        lines += ["", f"Emulator event-loop lag: max {level.server_loop_lag_ms:.1f} ms (its own distortion)"]
    return lines


def _by_turn(turns: list[TurnSummary]) -> list[str]:
    """A conversation level's TTFT, e2e and input tokens by turn (a prefix cache serves later turns' history)."""
    return ["", "TTFT by turn (conversations: each turn re-sends the history):", "",
            "| turn | requests | ok | TTFT ms p50 | TTFT ms p90 | e2e s p50 | input tokens mean |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            *(f"| {t.turn} | {t.requests} | {t.ok} | {_n(t.ttft_ms.p50)} | {_n(t.ttft_ms.p90)} | {_n(t.e2e_s.p50, 2)} "
              f"| {_n(t.request_input_tokens.mean, 0)} |" for t in turns)]


_SERVER_STATS = tuple(ServerStats.model_fields)


def _server(server: ServerMetrics, run: Run) -> list[str]:
    """What the endpoint itself reported over the level, with where it came from."""
    period = f", one period of {server.period_s:g} s" if server.period_s is not None else ""
    # The local target's emulator stamps its metrics on its simulated clock (its start, UTC, then simulated
    # seconds), and the window is read on that clock: at a time scale below 1 it runs ahead of any real UTC.
    clock = " simulated (the emulator's clock: its start in UTC, then simulated time)" if run.target == "local" \
        else " UTC"
    window = f"{server.window_start:%H:%M:%S}–{server.window_end:%H:%M:%S}{clock}"
    lines = ["", f"Server-side ({server.source}{period}, {window}):", ""]
    if not server.metrics:
        return lines + ["The server reported nothing for this window."]
    lines += ["| server metric | unit | " + " | ".join(_SERVER_STATS) + " | source name |",
              "|---|---|" + "---:|" * len(_SERVER_STATS) + "---|"]
    for key, m in server.metrics.items():
        values = " | ".join(_n(getattr(m.stats, s), 2) for s in _SERVER_STATS)
        lines.append(f"| {key} | {m.unit} | {values} | {m.name} |")
    return lines


def _overview(results: Results) -> list[str]:
    slo = results.run.request_slo is not None  # goodput and attainment columns, where there are SLOs to meet
    lines = [("| level | tokens/s | predicted | ms/token p50 | predicted | p90 | p99 | TTFT p50 ms | "
             "ITL p50 ms | error rate |" + (" goodput tokens/s | SLO attainment |" if slo else "")),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if slo else "")]
    for lv in results.levels:
        p = lv.predicted
        good = (f" {_n(lv.goodput.tokens_per_s if lv.goodput else None)} | "
                f"{'–' if lv.slo_attainment is None else f'{lv.slo_attainment:.1%}'} |") if slo else ""
        lines.append(
            f"| {lv.load} | {_n(lv.throughput_tokens_per_s)} | {_n(p.throughput_tokens_per_s if p else None)}"
            f"{flag(lv, 'tokens/s')} | {_n(lv.latency_ms_per_token.p50)} | {_n(p.ms_per_token if p else None)}"
            f"{flag(lv, 'ms/token p50')}"
            f" | {_n(lv.latency_ms_per_token.p90)} | {_n(lv.latency_ms_per_token.p99)} | {_n(lv.ttft_ms.p50)}"
            f" | {_n(lv.itl_ms.p50)} | {lv.error_rate:.1%} |{good}")
    return lines + [""]


def _errors(results: Results) -> list[str]:
    lines = ["## Errors by kind", ""]
    if not results.levels:  # nothing was measured (e.g. every warm-up request failed): say nothing good
        why = f"; the sweep stopped: {results.stopped_reason}" if results.stopped_reason else ""
        return lines + [f"No request was measured (warm-up requests are not counted here){why}.", ""]
    if not any(lv.requests - lv.ok for lv in results.levels):
        return lines + ["No request failed.", ""]
    lines += ["| level | " + " | ".join(ERROR_KINDS) + " | error rate |",
              "|---:|" + "---:|" * (len(ERROR_KINDS) + 1)]
    for lv in results.levels:
        counts = " | ".join(str(lv.errors.get(k, 0)) for k in ERROR_KINDS)
        lines.append(f"| {lv.load} | {counts} | {lv.error_rate:.1%} |")
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
    if gate.incomparable:
        lines += ["Compared with a baseline that differs (--allow-incomparable): "
                  + "; ".join(gate.incomparable), ""]
    if not gate.violations:
        return lines + [f"All {len(gate.rules)} rule(s) passed."] + [f"- `{r}`" for r in gate.rules] + [""]
    lines += ["| rule | measured | limit | message |", "|---|---:|---:|---|"]
    for v in gate.violations:
        lines.append(f"| `{v.rule}` | {_n(v.measured, 3)} | {_n(v.limit, 3)} | {v.message} |")
    return lines + [""]


def render_markdown(results: Results) -> str:
    """The human report: verdict first, then the run, the picks, one table per level, errors, teardown, gate."""
    lines = [verdict(results), ""] + _header(results) + [""] + _highlights(results)
    lines += ["", "![latency vs throughput](curve.png)", ""]
    if results.ramp is not None:
        lines += render_ramp(results.ramp)
    lines += ["## Levels", ""]
    if not results.levels:
        lines += ["No level was measured.", ""]
    else:
        lines += _overview(results)
    for level in results.levels:
        lines += _level(level, results.run)
    lines += _errors(results) + _teardown(results) + _gate(results)
    return "\n".join(lines)


def write_report(directory: Path, results: Results) -> list[Path]:
    """Write report.md, junit.xml, curve.png and results.csv (and ramp.png after a ramp) into a directory;
    returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    md, junit, png, csv = (directory / name for name in ("report.md", "junit.xml", "curve.png", "results.csv"))
    md.write_text(render_markdown(results) + "\n", encoding="utf-8")
    junit.write_text(render_junit(results), encoding="utf-8")
    plot_curve(results, png)
    csv.write_text(render_csv(results), encoding="utf-8")
    if results.ramp is None:
        return [md, junit, png, csv]
    plot_ramp(results, directory / "ramp.png")
    return [md, junit, png, csv, directory / "ramp.png"]


def writable_folder_errors(folder: Path, option: str) -> list[str]:
    """Why a folder for results could not be created or written (empty when it can), checked before any work."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent  # the nearest part of the path that exists
    if existing.exists() and not existing.is_dir():
        what = f"{folder} is a file" if existing == folder else f"{existing} (in {folder}) is a file"
        return [f"{option}: {what}, not a folder; choose a folder to write the results in"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [f"{option}: {folder}: cannot write in {existing} (permission denied); choose a writable folder"]
    return []

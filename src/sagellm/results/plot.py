"""curve.png: measured latency vs throughput, levels labelled, knee marked, prediction overlaid; below it,
where the endpoint reported its own latency, the server's figure beside the client's e2e, by level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sagellm.results.picks import knee_at_top
from sagellm.results.schema import Level, Results

# The server's own per-request latency: SageMaker's ModelLatency, or a vLLM/TGI e2e histogram's mean.
_SERVER_LATENCY = ("model_latency_ms", "e2e_latency_ms")


def _server_latency(level: Level) -> tuple[str, float | None, float | None] | None:
    """(metric name, p50 or mean, p90) of the server's latency at a level, if it reported one."""
    if level.server is None:
        return None
    for key in _SERVER_LATENCY:
        m = level.server.metrics.get(key)
        if m is not None:
            return m.name, m.stats.p50 if m.stats.p50 is not None else m.stats.avg, m.stats.p90
    return None


def plot_curve(results: Results, path: Path) -> None:
    """Draw p50 ms/token against tokens/s for every level and save it as a PNG."""
    # Object-oriented Agg canvas, imported here: no pyplot global state, no cost for commands that don't plot.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    server = [(lv, s) for lv in results.levels if (s := _server_latency(lv)) is not None]
    measured = [lv for lv in results.levels if lv.latency_ms_per_token.p50 is not None]
    # TTFT beside ms/token where there is a predicted curve to read it against.
    cols = 2 if results.predicted_curve and measured else 1
    fig = Figure(figsize=(8 if cols == 1 else 14, 9.5 if server else 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2 if server else 1, cols, 1)

    xs = [lv.throughput_tokens_per_s for lv in measured]
    ys = [lv.latency_ms_per_token.p50 or 0.0 for lv in measured]
    ax.plot(xs, ys, "o", color="tab:blue", label="measured (p50)")
    for lv, x, y in zip(measured, xs, ys, strict=True):
        ax.annotate(lv.load, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)

    _predicted_line(ax, results, "ms_per_token")
    _goodput(ax, results, measured)

    _mark_picks(ax, results)
    if not measured:
        ax.text(0.5, 0.5, "no level had a successful request", transform=ax.transAxes, ha="center")

    ax.set_title(_title(results), fontsize=10)
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel("latency (ms/token, e2e ÷ output tokens)")
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    if cols == 2:
        _ttft_panel(fig.add_subplot(2 if server else 1, cols, 2), results, measured)
    if server:
        _server_panel(fig.add_subplot(2, 1, 2), server)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _mark_picks(ax: Any, results: Results) -> None:
    """The picks on the curve: the knee, the highest throughput, and the SLO line."""
    if results.knee is not None:
        k = results.knee
        ax.plot([k.throughput_tokens_per_s], [k.ms_per_token_p50], "o", markersize=14, markerfacecolor="none",
                markeredgecolor="tab:red", markeredgewidth=2, label="knee")
        top = " (highest level measured:\nthe sweep never reached saturation)" if knee_at_top(results) else ""
        ax.annotate(f"knee: {k.describe_load()}{top}\n{k.throughput_tokens_per_s:.0f} tok/s, "
                    f"{k.ms_per_token_p50:.1f} ms/token", (k.throughput_tokens_per_s, k.ms_per_token_p50),
                    textcoords="offset points", xytext=(-10, 25), ha="right", fontsize=8, color="tab:red",
                    arrowprops={"arrowstyle": "->", "color": "tab:red"})
    if results.max_throughput is not None:
        m = results.max_throughput
        ax.plot([m.throughput_tokens_per_s], [m.ms_per_token_p50], "D", markersize=8, markerfacecolor="none",
                markeredgecolor="tab:green", markeredgewidth=2, label=f"max throughput ({m.load})")
    if results.slo is not None:
        ax.axhline(results.slo.ms_per_token, color="tab:orange", linestyle=":",
                   label=f"SLO {results.slo.ms_per_token:g} ms/token")


def _title(results: Results) -> str:
    """The model and what served it (the profile's fleet, or the endpoint), and whether it was emulated."""
    run = results.run
    title = (f"{run.model} on {run.instance_count} × {run.instance_type} ({run.profile})" if run.profile
             else f"{run.model} at {run.endpoint}")
    return title + " — emulated" if run.emulated else title

def _goodput(ax: Any, results: Results, measured: list[Level]) -> None:
    """Each level's goodput beside its throughput, at the same latency: the part of the throughput whose requests
    met the per-request SLOs."""
    good = [(lv.goodput.tokens_per_s, lv.throughput_tokens_per_s, lv.latency_ms_per_token.p50 or 0.0)
            for lv in measured if lv.goodput is not None]
    if not good or results.run.request_slo is None:
        return
    for goodput, throughput, y in good:
        ax.plot([goodput, throughput], [y, y], ":", color="tab:purple", alpha=0.5)
    ax.plot([g for g, _, _ in good], [y for _, _, y in good], "x", color="tab:purple",
            label=f"goodput ({results.run.request_slo.describe()})")


def _predicted_line(ax: Any, results: Results, metric: str) -> None:
    """The predicted curve as a line over the whole range (older results: the prediction at measured levels)."""
    curve = [(p.throughput_tokens_per_s, getattr(p, metric)) for p in results.predicted_curve if p.within_timeout]
    if curve:
        ax.plot(*zip(*curve, strict=True), "-", color="tab:gray", alpha=0.8, label="predicted")
        return
    at_levels = [lv.predicted for lv in results.levels if lv.predicted is not None]
    if at_levels:
        ax.plot([p.throughput_tokens_per_s for p in at_levels], [getattr(p, metric) for p in at_levels],
                "s--", color="tab:gray", markersize=4, alpha=0.8, label="predicted")


def _ttft_panel(ax: Any, results: Results, measured: list[Level]) -> None:
    """TTFT p50 against throughput beside ms/token: the metric a prefill-bound endpoint departs on first."""
    _predicted_line(ax, results, "ttft_ms")
    ax.plot([lv.throughput_tokens_per_s for lv in measured], [lv.ttft_ms.p50 or 0.0 for lv in measured], "o",
            color="tab:blue", label="measured (p50)")
    for lv in measured:
        ax.annotate(lv.load, (lv.throughput_tokens_per_s, lv.ttft_ms.p50 or 0.0), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    ax.set_title("time to first token", fontsize=10)
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel("TTFT ms")
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")


def _server_panel(ax: Any, server: list[tuple[Level, tuple[str, float | None, float | None]]]) -> None:
    """The server's latency (p50, p90; a mean where it gives only that) beside the client's e2e, by level."""
    names = [lv.load for lv, _ in server]
    xs = range(len(names))
    source = server[0][1][0]
    mean_only = all(p90 is None for _, (_, _, p90) in server)
    ax.plot(xs, [(lv.e2e_s.p50 or 0) * 1000 for lv, _ in server], "o-", color="tab:blue", label="client e2e p50")
    ax.plot(xs, [mid for _, (_, mid, _) in server], "s--", color="tab:purple",
            label=f"server {source} {'mean' if mean_only else 'p50'}")
    if not mean_only:
        ax.plot(xs, [p90 for _, (_, _, p90) in server], "^:", color="tab:purple", alpha=0.7,
                label=f"server {source} p90")
    ax.set_xticks(list(xs), names)
    ax.set_xlabel("level")
    ax.set_ylabel("ms per request")
    ax.set_title("what the server reported (whole level, warm-up included) vs what the client measured",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")

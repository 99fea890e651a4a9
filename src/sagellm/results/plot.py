"""curve.png: measured latency vs throughput, levels labelled, knee marked, prediction overlaid."""

from __future__ import annotations

from pathlib import Path

from sagellm.results.schema import Results


def plot_curve(results: Results, path: Path) -> None:
    """Draw p50 ms/token against tokens/s for every level and save it as a PNG."""
    # Object-oriented Agg canvas, imported here: no pyplot global state, no cost for commands that don't plot.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run = results.run
    fig = Figure(figsize=(8, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()

    measured = [lv for lv in results.levels if lv.latency_ms_per_token.p50 is not None]
    xs = [lv.throughput_tokens_per_s for lv in measured]
    ys = [lv.latency_ms_per_token.p50 or 0.0 for lv in measured]
    ax.plot(xs, ys, "o-", color="tab:blue", label="measured (p50)")
    for lv, x, y in zip(measured, xs, ys, strict=True):
        ax.annotate(lv.load, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)

    predicted = [lv.predicted for lv in results.levels if lv.predicted is not None]
    if predicted:
        ax.plot([p.throughput_tokens_per_s for p in predicted], [p.ms_per_token for p in predicted],
                "s--", color="tab:gray", markersize=4, alpha=0.8, label="predicted")

    if results.knee is not None:
        k = results.knee
        ax.plot([k.throughput_tokens_per_s], [k.ms_per_token_p50], "o", markersize=14, markerfacecolor="none",
                markeredgecolor="tab:red", markeredgewidth=2, label="knee")
        ax.annotate(f"knee: {k.describe_load()}\n{k.throughput_tokens_per_s:.0f} tok/s, "
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
    if not measured:
        ax.text(0.5, 0.5, "no level had a successful request", transform=ax.transAxes, ha="center")

    title = (f"{run.model} on {run.instance_count} × {run.instance_type} ({run.profile})" if run.profile
             else f"{run.model} at {run.endpoint}")
    if run.emulated:
        title += " — emulated"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel("latency (ms/token, e2e ÷ output tokens)")
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")

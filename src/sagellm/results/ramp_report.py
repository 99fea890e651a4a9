"""The ramp's part of the report: its figures, scaling events and time series (report.md), and ramp.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sagellm.results.schema import RampRecord, Results


def _s(value: float | None) -> str:
    """Simulated seconds as `m:ss` (or – when unknown)."""
    if value is None:
        return "–"
    sign, value = ("−", -value) if value < 0 else ("", value)
    tenths = round(value * 10)  # rounded before splitting: 179.96 s is 3:00.0, not 2:60.0
    return f"{sign}{tenths // 600}:{tenths % 600 / 10:04.1f}"


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def render_ramp(ramp: RampRecord) -> list[str]:
    """The `## Ramp` section: figures first, then the scaling events and the interval table."""
    lines = ["## Ramp", "", "![load, instances and latency over time](ramp.png)", "",
             f"Steps of {ramp.step_s:g} s: " + ", ".join(f"{r:g}/s" for r in ramp.rates)
             + f" · intervals of {ramp.interval_s:g} s · times are m:ss from the ramp's start (simulated)", ""]
    return lines + [_scaling_line(ramp), "", *_figures_table(ramp), *_events_table(ramp), *_intervals_table(ramp), ""]


def _scaling_line(ramp: RampRecord) -> str:
    """What scaled the fleet: the simulated policy, the endpoint as observed, or nothing."""
    p = ramp.policy
    unit = "copy" if ramp.capacity == "copies" else "instance"
    if p is not None:
        return (f"Scaling: **simulated** target tracking on `{p.metric}` (target {p.target_value:g} requests in "
                f"flight per {unit}, a datapoint every {p.period_s:g} s, {p.min_capacity}–{p.max_capacity} "
                f"{ramp.capacity}; alarms "
                f"{p.out_datapoints} datapoints above / {p.in_datapoints} of {p.in_period_s:g} s below 90 %, acted on "
                f"{p.metric_delay_s:g} s after the period; cooldowns out {p.scale_out_cooldown_s:g} s / in "
                f"{p.scale_in_cooldown_s:g} s; instance start-up {p.instance_startup_s:g} s)")
    if ramp.scaling == "observed":
        return (f"Scaling: **observed** on the endpoint ({ramp.capacity} and instances as its control plane "
                "reported them while the ramp ran, and its scaling activities)")
    return "Scaling: **none observed** (a fixed fleet, or a target whose scaling is not read)"


def _slo_window(ramp: RampRecord) -> str:
    """How long the ramp ran over its SLO, and from when to when."""
    if ramp.slo_violated_s is None:
        return "–"
    if ramp.slo_recovered_s is None:
        return f"from {_s(ramp.slo_violated_s)}, not back by the end"
    return (f"{_s(ramp.slo_recovered_s - ramp.slo_violated_s)} (from {_s(ramp.slo_violated_s)} to "
            f"{_s(ramp.slo_recovered_s)})")


def _figures_table(ramp: RampRecord) -> list[str]:
    """The headline figures: breach to new capacity, time over the SLO, what scaling cost."""
    slo = f"{ramp.slo_ms_per_token:g} ms/token" if ramp.slo_ms_per_token is not None else "no SLO given"
    return [
        "| figure | value |", "|---|---:|",
        f"| first breach of the target (period end) | {_s(ramp.first_breach_s)} |",
        f"| first scale-out | {_s(ramp.first_scale_out_s)} |",
        f"| first new instance InService | {_s(ramp.first_in_service_s)} |",
        f"| **breach → new instance InService** | **{_s(ramp.breach_to_in_service_s)}** |",
        *([f"| **cold start (first request after zero copies → first token)** | **{_s(ramp.cold_start_s)}** |"]
          if ramp.capacity == "copies" or ramp.cold_start_s is not None else []),
        f"| over the SLO ({slo}) | {_slo_window(ramp)} |",
        f"| requests sent while scaling out | {ramp.requests_while_scaling} |",
        f"| … failed | {ramp.failed_while_scaling} |",
        f"| … ok but above the SLO | {'–' if ramp.above_slo_while_scaling is None else ramp.above_slo_while_scaling} |",
        (f"| instance-minutes in service{'' if ramp.policy else ' (the initial fleet throughout)'} | "
         f"{ramp.instance_minutes:.1f} |"),
        f"| cost of the run | {'–' if ramp.cost_usd is None else f'${ramp.cost_usd:.2f}'} |", ""]


def _events_table(ramp: RampRecord) -> list[str]:
    """The scaling events (with the instances under the copies, when copies scale)."""
    if not ramp.events:
        return []
    if ramp.capacity == "copies":
        return ["| time | event | copies desired | copies in service | instances | detail |",
                "|---:|---|---:|---:|---:|---|",
                *(f"| {_s(e.t_s)} | {e.kind} | {e.desired} | {e.in_service} | {_n(e.instances, 0)} | {e.detail} |"
                  for e in ramp.events), ""]
    return ["| time | event | desired | in service | detail |", "|---:|---|---:|---:|---|",
            *(f"| {_s(e.t_s)} | {e.kind} | {e.desired} | {e.in_service} | {e.detail} |" for e in ramp.events), ""]


def _intervals_table(ramp: RampRecord) -> list[str]:
    """One row per interval: load offered and achieved, the fleet, errors and latency."""
    lines = [("| time | offered /s | achieved /s | desired | in service | requests | errors | above SLO "
              "| TTFT p50 / p90 ms | e2e p50 / p90 s |"), "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for iv in ramp.intervals:
        lines.append(
            f"| {_s(iv.start_s)} | {iv.offered_rps:.2f} | {iv.achieved_rps:.2f} | {_n(iv.instances_desired, 0)} | "
            f"{_n(iv.instances_in_service, 0)} | {iv.requests} | {iv.errors} | "
            f"{'–' if iv.above_slo is None else iv.above_slo} | {_n(iv.ttft_ms.p50, 0)} / {_n(iv.ttft_ms.p90, 0)} | "
            f"{_n(iv.e2e_s.p50, 2)} / {_n(iv.e2e_s.p90, 2)} |")
    return lines


def plot_ramp(results: Results, path: Path) -> None:
    """Three panels over time: offered and achieved load, instances, p50/p90 latency (TTFT and e2e)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ramp = results.ramp
    assert ramp is not None
    fig = Figure(figsize=(9, 8), dpi=100)
    FigureCanvasAgg(fig)
    load, inst, lat = fig.subplots(3, 1, sharex=True)
    t = [(iv.start_s + ramp.interval_s / 2) / 60 for iv in ramp.intervals]
    _plot_load(load, ramp, t)
    _plot_fleet(inst, results)
    _plot_latency(lat, ramp, t)
    marks = _marks(ramp)
    for ax in (load, inst, lat):
        for at, label in marks:
            if at is not None:
                ax.axvline(at / 60, color="tab:red", linestyle=":", alpha=0.6)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    for at, label in marks:
        if at is not None:
            load.annotate(label, (at / 60, 1), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                          va="top", ha="right", color="tab:red")
    run = results.run
    fig.suptitle(f"{run.model} on {run.instance_type} ({run.profile}) — ramp"
                 + (" — emulated" if run.emulated else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _plot_load(load: Any, ramp: RampRecord, t: list[float]) -> None:
    """Offered and achieved requests per second, with the failures as bars."""
    load.step(t, [iv.offered_rps for iv in ramp.intervals], where="mid", color="tab:gray", label="offered")
    load.plot(t, [iv.achieved_rps for iv in ramp.intervals], "o-", markersize=3, color="tab:blue", label="achieved ok")
    load.bar(t, [iv.errors / ramp.interval_s for iv in ramp.intervals], width=ramp.interval_s / 60 * 0.8,
             color="tab:red", alpha=0.5, label="failed")
    load.set_ylabel("requests/s")


def _plot_fleet(inst: Any, results: Results) -> None:
    """Capacity desired and in service over time (and the instances under copies), or the fixed fleet."""
    ramp = results.ramp
    assert ramp is not None
    if ramp.scaling != "none":
        # Exact times from the events (the intervals only sample the count at their ends).
        end = ramp.intervals[-1].start_s + ramp.interval_s if ramp.intervals else 0.0
        first = results.run.instance_count or 0
        xs = [0.0] + [max(0.0, e.t_s) / 60 for e in ramp.events] + [end / 60]
        for attr, color, style, label in (("desired", "tab:orange", "--", "desired"),
                                          ("in_service", "tab:green", "-", "in service")):
            ys = [first] + [getattr(e, attr) for e in ramp.events]
            inst.step(xs, ys + ys[-1:], where="post", color=color, linestyle=style, label=label)
        if ramp.capacity == "copies":  # the instances managed instance scaling runs for the copies
            ys = [first] + [e.instances or 0 for e in ramp.events]
            inst.step(xs, ys + ys[-1:], where="post", color="tab:brown", linestyle=":", label="instances")
    else:
        inst.text(0.5, 0.5, f"fixed fleet: {results.run.instance_count} instance(s)", transform=inst.transAxes,
                  ha="center")
    inst.set_ylabel("copies" if ramp.capacity == "copies" else "instances")
    inst.set_ylim(bottom=0)


def _plot_latency(lat: Any, ramp: RampRecord, t: list[float]) -> None:
    """TTFT and end-to-end latency, p50 and p90, on one log axis in milliseconds."""
    for name, stat, color in (("TTFT", "ttft_ms", "tab:purple"), ("e2e", "e2e_s", "tab:blue")):
        scale = 1.0 if stat == "ttft_ms" else 1000.0
        for q, style in (("p50", "-"), ("p90", ":")):
            ys = [getattr(getattr(iv, stat), q) for iv in ramp.intervals]
            lat.plot(t, [None if y is None else y * scale for y in ys], style, color=color, label=f"{name} {q}")
    lat.set_yscale("log")
    lat.set_ylabel("latency ms (log)")
    lat.set_xlabel("minutes from the ramp's start (simulated)")


def _marks(ramp: RampRecord) -> list[tuple[float | None, str]]:
    """The moments each panel marks: breach, scale-out, InService, zero copies, an instance released."""
    marks = [(ramp.first_breach_s, "breach"), (ramp.first_scale_out_s, "scale-out"),
             (ramp.first_in_service_s, "InService")]
    zero = next((e.t_s for e in ramp.events if e.kind == "scale-in" and e.desired == 0), None)
    if ramp.cold_start_s is not None and zero is not None:
        marks.append((zero, "zero copies"))
    released = next((e.t_s for e in ramp.events if e.kind == "instance-released"), None)
    if released is not None:
        marks.append((released, "instance released"))
    return marks

"""From what the sweep measured to results levels: which clock the timings come from, repeats, predictions.

Emulated runs take request timings from the emulator's simulated clock: it stamps each request's first
and last token on its engine's schedule (`sagellm_server_ttft_s`/`_e2e_s`), so TTFT, e2e and the
per-request ITL are those of the simulation, free of the client's jitter, which a time scale of 0.1
would otherwise multiply by ten. What the client saw stays in the record (`client_e2e_s`, wall-clock),
and the difference is reported as client overhead in wall-clock milliseconds. Requests without the
stamps (refused before a token) keep the client's timings. Start times, token gaps and lateness are the
client's, scaled to simulated seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from sagellm.bench.load.level import LevelResult
from sagellm.clock import Clock
from sagellm.results.records import RequestRecord
from sagellm.results.schema import Level, LevelSummary, OverSaturation, Predicted, RequestSlo
from sagellm.results.summary import summarize_runs


def on_simulated_clock(record: RequestRecord, clock: Clock, emulated: bool) -> RequestRecord:
    """A record of an emulated run in simulated seconds, timed by the emulator where it stamped the request."""
    if not emulated and not clock.compressed:
        return record
    factor = 1.0 / clock.scale

    def scale(value: float | list[float] | None) -> float | list[float] | None:
        if isinstance(value, list):
            return [v * factor for v in value]
        return None if value is None else value * factor

    scaled: dict[str, Any] = {f.name: scale(getattr(record, f.name)) for f in dataclasses.fields(record)
                              if f.metadata.get("client_seconds")}  # records.CLIENT_SECONDS
    out = dataclasses.replace(record, **scaled)
    if emulated and record.server_ttft_s is not None and record.server_e2e_s is not None:
        out = dataclasses.replace(out, ttft_s=record.server_ttft_s * factor, e2e_s=record.server_e2e_s * factor,
                                  clock="emulator", client_e2e_s=record.e2e_s)
    return out


def levels_of(results: Sequence[LevelResult], *, clock: Clock, emulated: bool,
              predict: Callable[[LevelSummary, list[RequestRecord]], Predicted | None],
              lags: dict[str, float], slo: RequestSlo | None = None) -> list[Level]:
    """One results level per level key (its repeats together), in the order measured, with its SLO attainment and
    goodput where per-request SLOs are given; levels without a measured request are left out."""
    runs: dict[str, list[LevelResult]] = {}
    for lv in results:
        runs.setdefault(lv.load, []).append(lv)
    factor = 1.0 / clock.scale
    out = []
    for load, repeats in runs.items():
        parts = [([on_simulated_clock(r, clock, emulated) for r in lv.records],
                  lv.window_start_s * factor, lv.window_end_s * factor)
                 for lv in repeats if any(not r.warmup for r in lv.records)]
        if not parts:
            continue
        s = summarize_runs(parts, slo)
        why = next((reason for lv in repeats if (reason := lv.bottleneck(clock))), None)
        client_lags = [lv.loop_lag_ms for lv in repeats if lv.loop_lag_ms is not None]
        over = next((lv.over_saturated for lv in repeats if lv.over_saturated is not None), None)
        # The prediction replays the first run's offered load (its records, on the simulated clock).
        out.append(Level(**s.model_dump(), predicted=predict(s, parts[0][0]), server_loop_lag_ms=lags.get(load),
                         client_bottleneck=why, client_loop_lag_ms=round(max(client_lags), 2) if client_lags else None,
                         over_saturated=OverSaturation(reason=over.reason, stopped_at_s=over.at_s) if over else None))
    return out

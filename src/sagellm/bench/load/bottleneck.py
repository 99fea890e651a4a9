"""Whether the load generator, not the endpoint, was the bottleneck of a level (docs/metrics.md).

Two signs, both on the client's wall clock:
- **Lateness** (open loop and ramp): the median request was sent more than `LATE_MS` and more than
  `LATE_GAPS` of the mean inter-arrival gap after its scheduled time: the schedule was not kept, so the
  endpoint saw less load than the level's rate. The cause is named: requests that waited for the in-flight
  cap (`--max-in-flight`: the endpoint held that many), or else the client's own event loop.
- **Event-loop lag** (every shape): a probe that sleeps `PROBE_S` at a time (emulator/frontend/loop_lag.py, the
  probe the emulator's `/metrics` reads too) woke on average more than
  `LOOP_LAG_MS` late, so the loop was busy (parsing streams) or its process was denied a CPU: sends and
  token timestamps were delayed by as much, and latencies read high.
"""

from __future__ import annotations

from sagellm.clock import Clock
from sagellm.results.summary import percentile

LATE_MS = 50.0
LATE_GAPS = 0.5
LOOP_LAG_MS = 20.0


def client_bottleneck(*, request_rate: float | None, late_s: list[float], capped: int, measured: int,
                      loop_lag_ms: float | None, clock: Clock) -> str | None:
    """Why the load generator was the bottleneck of a level, or None when it kept up: `late_s` are its measured
    requests' lateness (wall seconds), `capped` how many of them waited for the in-flight cap; `clock`
    the open loop's (its rate is in simulated requests/s, sent at `clock.wall_rate(rate)` per wall second)."""
    reasons = []
    if request_rate is not None and late_s:
        late_ms = (percentile(late_s, 50) or 0.0) * 1000
        limit_ms = max(LATE_MS, LATE_GAPS * 1000 * clock.scale / request_rate)
        if late_ms > limit_ms:
            cause = (f"{capped} of {measured} waited for the in-flight cap (--max-in-flight): raise it"
                     if capped else "the client could not keep its schedule: add --workers")
            reasons.append(f"requests were sent late, median {late_ms:.0f} ms of wall time (over {limit_ms:.0f} ms); "
                           + cause)
    if loop_lag_ms is not None and loop_lag_ms > LOOP_LAG_MS:
        reasons.append(f"the client's event loop lagged {loop_lag_ms:.0f} ms on average (over {LOOP_LAG_MS:.0f} "
                       "ms): busy or short of CPU, add --workers")
    return "; ".join(reasons) or None

"""One event-loop lag probe: how late the loop wakes a timer that sleeps `PROBE_S` at a time. The bench reads it
over a level's window (its load generator's own delay, bench/load/bottleneck.py); the emulator's `/metrics` reads
its max and mean since the last reset (the emulator's own distortion)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

PROBE_S = 0.05


class LoopLag:
    """How late this event loop wakes a sleeping probe, sampled every PROBE_S while `run` runs: max and mean since
    the last reset, and, with `keep_samples`, each wake-up to read a window of (a run of bounded length: the
    emulator runs for hours and keeps none)."""

    def __init__(self, *, keep_samples: bool = False) -> None:
        self.keep_samples = keep_samples
        self.samples: list[tuple[float, float]] = []  # (wake-up time, lag in seconds), perf_counter clock
        self.reset()

    def reset(self) -> None:
        """Forget the max and mean so far."""
        self.max_s = 0.0
        self.total_s = 0.0
        self.count = 0

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            asleep = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            woke = time.perf_counter()
            self.record(woke, woke - asleep - PROBE_S)

    def record(self, woke: float, lag_s: float) -> None:
        """One wake-up `lag_s` late (perf_counter's and the loop's clocks may differ by a hair: never below 0)."""
        lag_s = max(0.0, lag_s)
        self.max_s = max(self.max_s, lag_s)
        self.total_s += lag_s
        self.count += 1
        if self.keep_samples:
            self.samples.append((woke, lag_s))

    def mean_ms(self, start: float, end: float) -> float | None:
        """The mean lag of the probes that woke between `start` and `end` (perf_counter), in milliseconds."""
        lags = [lag for t, lag in self.samples if start <= t <= end]
        return 1000 * sum(lags) / len(lags) if lags else None

    def snapshot(self) -> dict[str, float | int]:
        """Max and mean lag in seconds since the last reset, and the number of samples."""
        return {"max": self.max_s, "avg": self.total_s / self.count if self.count else 0.0, "samples": self.count}


@contextlib.asynccontextmanager
async def probing() -> AsyncIterator[LoopLag]:
    """A LoopLag probing this event loop, its samples kept, while the block runs."""
    lag = LoopLag(keep_samples=True)
    task = asyncio.create_task(lag.run())
    try:
        yield lag
    finally:
        task.cancel()

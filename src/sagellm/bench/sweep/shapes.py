"""The shapes of load a bench puts on a target: one type, three implementations, so the runner has no branch
per shape.

- `ClosedLoopSweep`: concurrency levels one after another, each drained before the next (`run_sweep`);
- `OpenLoopSweep`: request-rate levels the same way, arrivals on a schedule (`load.open_loop`);
- `RampRun`: open-loop steps back to back on one continuous schedule (`sweep.ramp`), for autoscaling.

Each runs its levels (`run`) and gives what the results need of it: the levels' chooser, the worker pool it
used, its `sweep` block and (a ramp) its `ramp` block. Every shape says on stderr, as a level ends, when the
load generator was that level's bottleneck (`load.bottleneck`).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.level import LevelProgress, LevelResult, StopRule
from sagellm.bench.load.measured import on_simulated_clock
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.load.pools import worker_pool
from sagellm.bench.load.saturation import SaturationRule
from sagellm.bench.load.workers import pool_size
from sagellm.bench.sweep.choosers import Chooser, level_minutes, sweep_block
from sagellm.bench.sweep.ramp import run_ramp
from sagellm.bench.sweep.ramp_figures import ramp_block
from sagellm.bench.sweep.run import run_sweep
from sagellm.clock import REAL, Clock
from sagellm.planner import Payload, Shape
from sagellm.profiles import Design
from sagellm.results import picks
from sagellm.results.records import RequestRecord
from sagellm.results.schema import RampRecord, Run, SweepRecord

Requests = int | Callable[[float], int] | None  # measured requests per level, or a function of the level
RunAsync = Callable[[Coroutine[Any, Any, Any]], Any]  # runs a coroutine to its end (the bench's Interrupts.run)


def warn_when_behind(on_level: Callable[[LevelResult], None],
                     clock: Clock) -> Callable[[LevelResult], None]:
    """`on_level`, then one line on stderr when the load generator was the level's bottleneck."""
    def level(result: LevelResult) -> None:
        on_level(result)
        if why := result.bottleneck(clock):
            kind = "rate" if result.request_rate is not None else "concurrency"
            print(f"sagellm: the load generator was the bottleneck at {kind} {result.load}, not the endpoint: {why}",
                  file=sys.stderr, flush=True)
    return level


class LoadShape(ABC):
    """One shape of load: it runs its levels against a transport and accounts for them in the results."""

    workers: int | None = None  # the worker pool's size, once a sweep started one

    def __init__(self, chooser: Chooser, *, requests: Requests, duration_s: float | None, warmup: int):
        self.chooser = chooser
        # As the results' sweep block states them: the load spec's simulated seconds per level, its warm-up.
        self._requests, self._duration_s, self._warmup = requests, duration_s, warmup

    @abstractmethod
    def describe(self) -> str:
        """What it sets out to measure, for progress."""

    @abstractmethod
    def run(self, transport: Transport, workload: Workload, run_async: RunAsync, *,
            on_record: Callable[[RequestRecord], None], on_progress: Callable[[LevelProgress], None],
            on_level: Callable[[LevelResult], None]) -> None:
        """Run the levels (their coroutine through `run_async`); each record and each level goes to its callback."""

    def sweep_block(self, shape: Shape | None, payload: Payload) -> SweepRecord:
        """The results' account of the levels chosen and what they cost."""
        return sweep_block(self.chooser, shape, payload, requests=self._requests, duration_s=self._duration_s,
                           warmup=self._warmup)

    def ramp_block(self, levels: list[LevelResult], run: Run, design: Design | None,
                   slo: float | None) -> RampRecord | None:
        """The results' ramp block (None: not a ramp)."""
        return None


@dataclass(frozen=True)
class Levels:
    """How a sweep runs each level."""

    requests: Requests
    duration_s: float | None  # simulated seconds per level instead of a request count
    wall_s: float | None  # the same in wall seconds (compressed like the emulator's clock)
    warmup: int  # warm-up requests per worker (closed loop) or per level (open loop)
    repeats: int
    workers: int | None  # worker processes (None: as many as the busiest level needs)
    ray: str | None  # a Ray cluster to run the workers on
    spawn_rate: float | None = None  # closed loop: workers started a second (None: all at once)


class ClosedLoopSweep(LoadShape):
    """Concurrency levels in order, each run `repeats` times and drained before the next, on a worker pool
    where one is asked for (or needed)."""

    open_loop: OpenLoop | None = None
    saturation: SaturationRule | None = None  # a closed loop cannot grow a queue (see `load.saturation`)

    def __init__(self, chooser: Chooser, levels: Levels):
        super().__init__(chooser, requests=levels.requests, duration_s=levels.duration_s, warmup=levels.warmup)
        self.levels = levels

    def describe(self) -> str:
        return self.chooser.describe()

    def run(self, transport: Transport, workload: Workload, run_async: RunAsync, *,
            on_record: Callable[[RequestRecord], None], on_progress: Callable[[LevelProgress], None],
            on_level: Callable[[LevelResult], None]) -> None:
        lv = self.levels
        self.workers = pool_size(lv.workers, self.chooser.levels, open_loop=self.open_loop)
        clock = self.open_loop.clock if self.open_loop else REAL  # a closed loop has no schedule to keep
        # The pool starts (and stops) outside the event loop: worker processes and Ray start blocking.
        with worker_pool(self.workers, transport, workload, lv.ray) as pool:
            run_async(run_sweep(
                transport, workload=workload, open_loop=self.open_loop, requests_per_level=lv.requests,
                duration_per_level_s=lv.wall_s, warmup=lv.warmup, on_record=on_record, on_progress=on_progress,
                on_level=warn_when_behind(on_level, clock),
                stop_rule=StopRule(max_error_rate=picks.MAX_ERROR_RATE, saturation=self.saturation),
                repeats=lv.repeats, choose=self.chooser, pool=pool, workers=lv.workers, spawn_rate=lv.spawn_rate))


class OpenLoopSweep(ClosedLoopSweep):
    """Request-rate levels in order, run like the closed loop's, arrivals on `open_loop`'s schedule; a level
    past saturation stops early (`saturation`)."""

    def __init__(self, chooser: Chooser, levels: Levels, open_loop: OpenLoop, saturation: SaturationRule):
        super().__init__(chooser, levels)
        self.open_loop = open_loop
        self.saturation = saturation


class RampRun(LoadShape):
    """Open-loop steps back to back on one schedule; the scaling state is read as it starts and ends."""

    def __init__(self, chooser: Chooser, rates: tuple[float, ...], step_s: float, loop: OpenLoop, target: object):
        super().__init__(chooser, requests=None, duration_s=None, warmup=0)
        self.rates = rates
        self.step_s = step_s  # simulated seconds
        self.loop = loop
        self._scaling = getattr(target, "autoscaling", lambda: None)  # the local target's emulator reports it
        self.start: dict[str, Any] | None = None  # the scaling state as the ramp starts ...
        self.end: dict[str, Any] | None = None  # ... and once its last request is back (before teardown)
        self.steps: list[LevelResult] = []

    def describe(self) -> str:
        return (f"ramp of {len(self.rates)} steps × {self.step_s:g} s: "
                + ", ".join(f"{r:g}/s" for r in self.rates))

    def run(self, transport: Transport, workload: Workload, run_async: RunAsync, *,
            on_record: Callable[[RequestRecord], None], on_progress: Callable[[LevelProgress], None],
            on_level: Callable[[LevelResult], None]) -> None:
        """Run the steps; the scaling state is read just before the first request (to align its clock)
        and after the last."""
        def started() -> None:
            self.start = self._scaling()

        def step(result: LevelResult) -> None:
            self.steps.append(result)
            on_level(result)

        try:
            run_async(run_ramp(transport, workload=workload, loop=self.loop, step_s=self.loop.clock.wall_s(self.step_s),
                               on_record=on_record, on_progress=on_progress,
                               on_level=warn_when_behind(step, self.loop.clock), on_start=started))
        finally:
            self.end = self._scaling()

    def sweep_block(self, shape: Shape | None, payload: Payload) -> SweepRecord:
        """The ramp's account: its steps in order and the endpoint-minutes from its first request to its last
        return (its steps share one schedule: they are not summed)."""
        minutes = level_minutes([replace(self.steps[0], ended_s=self.steps[-1].ended_s)], self.loop.clock,
                                self.chooser.instances) if self.steps else 0.0
        return SweepRecord(method="ramp", order=[s.load for s in self.steps], endpoint_minutes=round(minutes, 3),
                           outcome=f"{len(self.steps)} of {len(self.rates)} steps run")

    def ramp_block(self, levels: list[LevelResult], run: Run, design: Design | None,
                   slo: float | None) -> RampRecord:
        """The results' `ramp` block from the steps' records (put on the simulated clock here)."""
        records = [on_simulated_clock(r, run.simulated_clock, run.emulated) for lv in levels for r in lv.records]
        offset = float(self.start["now_s"]) if self.start else 0.0
        return ramp_block(records, rates=self.rates, step_s=self.step_s, scaling=self.end, scaling_offset_s=offset,
                          initial_instances=run.instance_count or 1, slo_ms_per_token=slo,
                          usd_per_instance_h=design.usd_per_instance_h if design else None)

"""Load from several processes: one level's schedule split across N worker processes (or Ray actors).

One asyncio loop drives a few hundred streams before its own scheduling delays show up in what it
measures; `--workers N` splits each level across N OS processes on this machine (`spawn`, one loop each),
`--ray ADDRESS` across Ray actors (`ray_workers`); `pools` holds both. The bench process is the
coordinator:
- **Shares.** Closed loop: worker k gets a share of the concurrency slots and of the request budget,
  in proportion. Open loop: worker k sends arrivals k, k + N, k + 2N, … of the one seeded schedule, from
  a start time the coordinator sets, so together the workers send exactly the single-process schedule.
  Request indices stay unique across workers (worker k sends indices base + k, base + k + N, …), so
  every prompt is reproducible from (seed, index); the open loop's arrival i carries index base + i.
- **Records** stream back as each request finishes and are merged in completion order (by end time)
  into the one `on_record` (requests.jsonl) and the level's book: a record is passed on once every
  running worker has reported something later (a record or a 0.2 s tick), less `ORDER_SLACK_S`.
- **One clock.** Every record is timed in seconds since the run's start on the coordinator's clock. On
  one machine `time.perf_counter()` reads CLOCK_MONOTONIC (Linux; mach_absolute_time on macOS), which
  every process shares, so a worker's times need no correction. Ray actors may sit on other machines:
  the coordinator measures each actor's offset NTP-style (a few round trips reading the actor's clock;
  offset = actor time − midpoint of the round trip, from the sample with the smallest round trip, so the
  error is at most half that round trip) and hands each actor the run's start on the actor's own clock.
- **Window.** The level's measured window is when every worker applied its full share: from the last
  worker's end of ramp to the first worker's end of window; a closed loop's then ends, like one worker's
  (`level`), at the last completion within it of the slot whose warm-up ended the last ramp. Each worker
  applies the stop rule to its own share; the level's result applies it to all records.
- **A dead worker** (its process exits, its actor dies): each request it had in flight becomes a record
  with error kind `client`, and the level's `stopped_reason` names the worker, which ends the sweep.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Request, Workload
from sagellm.bench.load.closed_loop import DEFAULT_SPAWN, Spawn, run_level
from sagellm.bench.load.level import StopRule
from sagellm.bench.load.open_loop import OpenLoop, run_rate_level

STREAMS_PER_WORKER = 256  # `auto`: one worker per this many streams the level may keep in flight
LONGEST_REQUEST_S = 60.0  # SageMaker's invocation timeout: the longest a request stays in flight
TICK_S = 0.2  # how often an idle worker says how far its clock has got (for the merge)
ORDER_SLACK_S = 0.05  # a request's end is read a little before its record is handed over
START_LEAD_S = 0.2  # open loop: the schedule starts this long after it is handed out

Message = tuple[Any, ...]  # ("start", index, start_s) | ("record", RequestRecord) | ("tick", t_s) | ("done", Done)
Deliver = Callable[[int, Message], None]


def auto_workers(load: float, *, open_loop: OpenLoop | None) -> int:
    """`--workers auto`: one per STREAMS_PER_WORKER streams the level may keep in flight, at most one per core.

    Streams: the concurrency (closed loop), or rate × LONGEST_REQUEST_S capped by the in-flight cap (open
    loop: Little's law with the longest a request can last, an upper bound).
    """
    # (A compressed emulator's time scale cancels out: rate and e2e scale inversely in wall time.)
    streams = load if open_loop is None else min(open_loop.max_in_flight, load * LONGEST_REQUEST_S)
    return max(1, min(os.cpu_count() or 1, math.ceil(streams / STREAMS_PER_WORKER)))


def pool_size(workers: int | None, loads: Sequence[float], *, open_loop: OpenLoop | None) -> int:
    """How many workers the sweep's pool holds: as asked, or what its busiest level needs (`auto`)."""
    return workers or max((auto_workers(load, open_loop=open_loop) for load in loads), default=1)


def worker_problems(workers: int | None, ray: str | None) -> list[str]:
    """What is wrong with Workers.count/Workers.ray, as `Workers.field: what (fix)` lines."""
    out = []
    if workers is not None and workers < 1:
        out.append(f"Workers.count: {workers} must be auto or at least 1")
    if ray is not None and importlib.util.find_spec("ray") is None:
        out.append(f"Workers.ray {ray}: Ray is not installed (pip install 'sagellm[ray]')")
    if ray is not None and not ray.strip():
        out.append("Workers.ray: give a cluster address (ray://host:10001, host:6379) or auto (a local cluster)")
    return out


@dataclass(frozen=True)
class Share:
    """What one worker runs of a level (times on the worker's own clock)."""

    worker: int
    workers: int  # how many share the level
    first_index: int  # its first request index; then every `workers`-th
    requests: int | None  # its measured requests (None with a duration)
    duration_s: float | None
    warmup: int  # closed loop: per slot; open loop: the level's (it sends those of its arrivals)
    clock_zero: float  # the run's start
    repeat: int
    stop_rule: StopRule
    concurrency: int | None = None  # closed loop: its slots
    slot_offset: int = 0  # closed loop: its first slot's number in the level
    rate: float | None = None  # open loop: the level's rate (it sends every `workers`-th arrival)
    open_loop: OpenLoop | None = None
    t0: float | None = None  # open loop: when the schedule starts
    spawn: Spawn | None = DEFAULT_SPAWN  # closed loop: when its slots send first, in their places in the level's order


@dataclass(frozen=True)
class Done:
    """A worker's share finished: its window (seconds since the run's start) and how many indices it used."""

    ramp_excluded: bool
    window_start_s: float
    window_end_s: float
    started_s: float
    ended_s: float
    issued: int
    ramp_worker: int | None = None  # closed loop: the level's slot whose warm-up ended this worker's ramp
    loop_lag_ms: float | None = None  # its event loop's mean lag over the share
    capped: int = 0  # open loop: its measured requests that waited for its in-flight cap


class _StridedWorkload(Workload):
    """The run's workload as one worker sends it: every `step`-th index from `first`, each start announced."""

    def __init__(self, base: Workload, first: int, step: int, on_next: Callable[[Request], None]):
        self.__dict__.update(base.__dict__)
        self.issued, self.first, self.step, self.on_next = first, first, step, on_next

    def next(self) -> Request:
        request = self.request(self.issued)
        self.issued += self.step
        self.on_next(request)
        return request


async def run_share(share: Share, transport: Transport, workload: Workload, emit: Callable[[Message], None]) -> None:
    """Run one worker's share of a level, emitting its starts, records, ticks and at last `done`."""
    zero = share.clock_zero
    work = _StridedWorkload(workload, share.first_index, share.workers,
                            lambda r: emit(("start", r.index, time.perf_counter() - zero)))

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_S)
            emit(("tick", time.perf_counter() - zero))

    common: dict[str, Any] = {"requests": share.requests, "duration_s": share.duration_s, "workload": work,
                              "on_record": lambda r: emit(("record", r)), "stop_rule": share.stop_rule,
                              "clock_zero": zero, "repeat": share.repeat}
    ticker = asyncio.create_task(tick())
    try:
        if share.open_loop is None:
            assert share.concurrency is not None
            result = await run_level(transport, concurrency=share.concurrency, warmup=share.warmup,
                                     spawn=share.spawn, **common)
        else:
            loop, rate = share.open_loop, share.rate or 0.0
            result = await run_rate_level(transport, rate=rate, arrivals=loop.arrivals,
                                          max_in_flight=max(1, loop.max_in_flight // share.workers),
                                          warmup=share.warmup, seed=loop.seed, clock=loop.clock,
                                          share=(share.worker, share.workers), t0=share.t0, **common)
    finally:
        ticker.cancel()
    issued = (work.issued - work.first) // work.step
    ramp_worker = None if result.ramp_worker is None else result.ramp_worker + share.slot_offset
    emit(("done", Done(result.ramp_excluded, result.window_start_s, result.window_end_s, result.started_s,
                       result.ended_s, issued, ramp_worker, result.loop_lag_ms, result.capped)))


class WorkerPool(Protocol):
    """Workers that run shares: worker processes on this machine, or Ray actors."""

    size: int
    offsets: list[float]  # each worker's clock minus the coordinator's
    remote: bool  # every level runs on it (Ray), even one that needs a single worker

    async def run(self, shares: list[Share], deliver: Deliver) -> None:
        """Run the shares (share k on worker k); hand every message to `deliver`, ("died", why) for a dead one."""
        ...

    def sync_clocks(self) -> None:
        """Measure the workers' clock offsets again (before each level)."""
        ...

    def close(self) -> None:
        """Stop every worker."""
        ...

"""The sweep: levels in order, each run `repeats` times, closed loop (concurrency) or open loop (request rate).

Closed loop: see `load.closed_loop`; open loop: see `load.open_loop`; warm-up, ramp, measured window and stop
rule: `load.level`. With a worker pool a level is split across workers (`load.coordinator`).
Cancelling `run_sweep` cancels the requests in flight; every finished record has already gone to
`on_record`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence

from sagellm.bench.client.transports import Transport
from sagellm.bench.client.workload import Workload
from sagellm.bench.load.closed_loop import SPAWN_RATE, Spawn, run_level
from sagellm.bench.load.conversations import conversation_level
from sagellm.bench.load.coordinator import run_shared_level
from sagellm.bench.load.level import DEFAULT_STOP_RULE, LevelProgress, LevelResult, StopRule
from sagellm.bench.load.open_loop import OpenLoop, run_rate_level
from sagellm.bench.load.workers import WorkerPool, auto_workers
from sagellm.results.records import RequestRecord

# Published sweeps send a few × concurrency requests per level (method.md §5).
REQUESTS_PER_WORKER = 3
MIN_REQUESTS_PER_LEVEL = 8
# An open-loop level sends this many seconds of arrivals by default: several request lifetimes, so the
# window after the ramp (about one request's lifetime) holds the steady state.
SECONDS_PER_RATE_LEVEL = 60
MAX_IN_FLIGHT = 1024  # the open loop's default in-flight cap


def default_budget(*, open_loop: bool) -> Callable[[float], int]:
    """Measured requests per level when none are asked for: a few per worker, or a minute of arrivals."""
    if open_loop:
        return lambda rate: max(MIN_REQUESTS_PER_LEVEL, math.ceil(SECONDS_PER_RATE_LEVEL * rate))
    return lambda c: max(MIN_REQUESTS_PER_LEVEL, REQUESTS_PER_WORKER * int(c))


async def run_sweep(transport: Transport, *, workload: Workload, concurrency: Sequence[int] = (),
                    open_loop: OpenLoop | None = None,
                    requests_per_level: int | Callable[[float], int] | None,
                    duration_per_level_s: float | None, warmup: int,
                    on_record: Callable[[RequestRecord], None],
                    on_progress: Callable[[LevelProgress], None] | None = None,
                    on_level: Callable[[LevelResult], None] | None = None,
                    stop_rule: StopRule = DEFAULT_STOP_RULE, repeats: int = 1,
                    choose: Callable[[list[LevelResult]], float | None] | None = None,
                    pool: WorkerPool | None = None, workers: int | None = None,
                    spawn_rate: float | None = SPAWN_RATE) -> list[LevelResult]:
    """Run the levels in order, each `repeats` times, until one says stop; times count from the sweep's start.

    The levels are `concurrency` (closed loop) or `open_loop.rates`, or else what `choose` answers, given
    the level runs so far, until it answers None (a failing level then ends only its repeats: whether to
    go on is the chooser's call). `requests_per_level` is the measured
    requests per level, on top of the warm-up, or a function of the level's concurrency or rate (e.g. a few
    per worker). `on_level` gets each finished run of a level at once, so an interrupted sweep keeps the
    levels it completed. With a `pool` (`workers`), a level runs on `workers` of its workers (None: as
    many as `workers.auto_workers` says the level needs); on one worker of a local pool it runs here. A closed
    loop's workers start at `spawn_rate` a second (`load.closed_loop`; None: all at once).
    """
    if (requests_per_level is None) == (duration_per_level_s is None):
        raise ValueError("give exactly one of requests_per_level and duration_per_level_s")
    if choose is None and (open_loop is None) == (not concurrency):
        raise ValueError("give exactly one of concurrency levels and an open loop's rates")
    zero = time.perf_counter()
    spawn = None if spawn_rate is None else Spawn(spawn_rate)
    results: list[LevelResult] = []
    loads: Iterable[float] = open_loop.rates if open_loop is not None else concurrency
    if choose is not None:
        loads = iter(functools.partial(choose, results), None)
    for load in loads:
        budget = requests_per_level(load) if callable(requests_per_level) else requests_per_level
        for repeat in range(repeats):
            level = functools.partial(run_level, transport, concurrency=int(load), spawn=spawn) \
                if open_loop is None else \
                functools.partial(run_rate_level, transport, rate=load, arrivals=open_loop.arrivals,
                                  max_in_flight=open_loop.max_in_flight, seed=open_loop.seed,
                                  clock=open_loop.clock)
            if workload.conversations is not None:  # in this process: a conversation's turns share its history
                level = conversation_level(transport, load, open_loop)
            elif pool is not None:
                n = workers or auto_workers(load, open_loop=open_loop)
                if n > 1 or pool.remote:
                    level = functools.partial(run_shared_level, pool, load=load, open_loop=open_loop, workers=n,
                                              spawn_rate=spawn_rate)
            result = await level(requests=budget, duration_s=duration_per_level_s, warmup=warmup,
                                 workload=workload, on_record=on_record, on_progress=on_progress,
                                 stop_rule=stop_rule, clock_zero=zero, repeat=repeat)
            results.append(result)
            if on_level is not None:
                on_level(result)
            if result.stopped_reason is not None:
                if choose is None:
                    return results
                break
    return results

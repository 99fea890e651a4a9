"""The coordinator's side of a level run by workers: shares out, records merged back, one result.

See `workers` for the shares, the merge in completion order, the clock, the window and dead workers.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Callable

from sagellm.bench.client.workload import Workload
from sagellm.bench.load.closed_loop import SPAWN_RATE, Spawn
from sagellm.bench.load.level import (
    DEFAULT_STOP_RULE,
    LevelBook,
    LevelProgress,
    LevelResult,
    StopRule,
    cycle_end,
)
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.load.workers import ORDER_SLACK_S, START_LEAD_S, Done, Message, Share, WorkerPool
from sagellm.results.records import RequestRecord
from sagellm.results.summary import tokens_in_window


def split(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders), summing to `total` exactly."""
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


class _Merge:
    """Records from every worker, passed on in completion order (see the module docstring)."""

    def __init__(self, workers: list[int], add: Callable[[RequestRecord], None]):
        self.add = add
        self.heard = dict.fromkeys(workers, -math.inf)  # running workers: the latest time each reported
        self.heap: list[tuple[float, int, RequestRecord]] = []
        self.count = 0

    def push(self, record: RequestRecord) -> None:
        heapq.heappush(self.heap, (record.end_s, self.count, record))
        self.count += 1

    def heard_until(self, worker: int, t: float) -> None:
        if worker in self.heard:
            self.heard[worker] = max(self.heard[worker], t)

    def finished(self, worker: int) -> None:
        self.heard.pop(worker, None)

    def release(self) -> None:
        """Pass on every record no running worker can still precede."""
        until = min(self.heard.values(), default=math.inf) - ORDER_SLACK_S
        while self.heap and self.heap[0][0] <= until:
            self.add(heapq.heappop(self.heap)[2])


async def run_shared_level(pool: WorkerPool, *, load: float, open_loop: OpenLoop | None, workers: int,
                           requests: int | None, duration_s: float | None, warmup: int, workload: Workload,
                           on_record: Callable[[RequestRecord], None],
                           on_progress: Callable[[LevelProgress], None] | None = None,
                           stop_rule: StopRule = DEFAULT_STOP_RULE, clock_zero: float | None = None,
                           repeat: int = 0, spawn_rate: float | None = SPAWN_RATE) -> LevelResult:
    """Run one level (concurrency `load`, or rate `load` with `open_loop`) on `workers` of the pool's workers;
    a closed loop's slots start at `spawn_rate` a second in all, interleaved across the workers."""
    zero = time.perf_counter() if clock_zero is None else clock_zero
    concurrency = None if open_loop is not None else int(load)
    n = min(workers, pool.size, concurrency or workers, requests or workers)
    slots = split(concurrency, [1] * n) if concurrency is not None else [0] * n
    budgets = split(requests, slots if concurrency else [1] * n) if requests is not None else [None] * n
    pool.sync_clocks()
    workload.replay_from_start()
    base = workload.issued
    t0 = time.perf_counter() + START_LEAD_S
    shares = [Share(worker=k, workers=n, first_index=base + k, requests=budgets[k], duration_s=duration_s,
                    warmup=warmup, clock_zero=zero + pool.offsets[k], repeat=repeat,
                    # Over-saturation is judged on one process's whole level, not on a share of it (left for later).
                    stop_rule=dataclasses.replace(stop_rule, saturation=None),
                    concurrency=slots[k] or None, slot_offset=sum(slots[:k]), rate=load if open_loop else None,
                    open_loop=open_loop, t0=t0 + pool.offsets[k] if open_loop else None,
                    spawn=_spawn(spawn_rate, k, slots)) for k in range(n)]
    book = LevelBook(concurrency=concurrency, request_rate=load if open_loop else None,
                     warmup_requests=warmup * (concurrency or 1), ramp_count=1, budget=requests,
                     duration_s=duration_s, rule=stop_rule, clock_zero=zero, on_record=on_record,
                     on_progress=on_progress, repeat=repeat)
    merge = _Merge(list(range(n)), book.add)
    in_flight: list[dict[int, float]] = [{} for _ in range(n)]
    done: dict[int, Done] = {}
    died: dict[int, str] = {}
    issued = [0] * n

    def deliver(k: int, message: Message) -> None:
        kind = message[0]
        if kind == "start":
            in_flight[k][message[1]] = message[2]
            issued[k] += 1
            merge.heard_until(k, message[2])
        elif kind == "record":
            record: RequestRecord = message[1]
            in_flight[k].pop(record.request or 0, None)
            record.concurrency = concurrency
            if record.worker is not None:
                record.worker += shares[k].slot_offset
            merge.push(record)
            merge.heard_until(k, record.end_s)
        elif kind == "tick":
            merge.heard_until(k, message[1])
        elif kind == "done":
            done[k] = message[1]
            merge.finished(k)
        elif kind == "died":
            died[k] = message[1]
            for record in _lost(in_flight[k], message[1], time.perf_counter() - zero, shares[k], base, book):
                merge.push(record)
            merge.finished(k)
        merge.release()

    book.started = time.perf_counter()
    await pool.run(shares, deliver)
    merge.release()
    workload.issued = base + n * max([d.issued for d in done.values()] + issued)
    return _result(book, done, died)


def _spawn(rate: float | None, worker: int, slots: list[int]) -> Spawn | None:
    """When worker `worker`'s slots send first: the level's slots take turns across the workers (slot j of worker k
    is the level's (j × workers + k)-th), the level's last one at `level_s`."""
    if rate is None or not any(slots):  # all at once, or an open loop
        return None
    n = len(slots)
    last = max(((s - 1) * n + k for k, s in enumerate(slots) if s), default=0)
    return Spawn(rate, phase=worker, step=n, level_s=last / rate)


def _lost(in_flight: dict[int, float], why: str, now_s: float, share: Share, base: int,
          book: LevelBook) -> list[RequestRecord]:
    """The requests a dead worker had in flight, as `client` errors."""
    out = []
    for index, start_s in sorted(in_flight.items()):
        # Warm-up as the worker counted it: the level's first arrivals (open loop), each slot's first ones.
        position = index - base if share.open_loop else (index - share.first_index) // share.workers
        warm = position < share.warmup * (1 if share.open_loop else share.concurrency or 1)
        out.append(RequestRecord(concurrency=book.concurrency, request_rate=book.request_rate, repeat=book.repeat,
                                 worker=None, request=index, start_s=start_s, ok=False, e2e_s=max(0.0, now_s - start_s),
                                 error_kind="client", error=f"{why} while this request was in flight",
                                 warmup=warm))
    in_flight.clear()
    return out


def _result(book: LevelBook, done: dict[int, Done], died: dict[int, str]) -> LevelResult:
    """The merged level: the window every surviving worker had full load in, and who died."""
    result = book.result()
    starts = [d.window_start_s for d in done.values()]
    ends = [d.window_end_s for d in done.values()]
    ramp_excluded = bool(done) and all(d.ramp_excluded for d in done.values()) and max(starts) < min(ends)
    if ramp_excluded:
        start, end = max(starts), min(ends)
        last = max(done.values(), key=lambda d: d.window_start_s).ramp_worker  # its ramp ended the level's
        if book.stopping is None and last is not None:
            end = cycle_end(result.records, last, start, end) or end  # whole cycles, as on one worker
    else:
        start, end = result.started_s, result.ended_s
    stopped = result.stopped_reason
    if died:
        said = "; ".join(died[k] for k in sorted(died))
        stopped = (f"{said} at {'request rate' if book.request_rate is not None else 'concurrency'} {book.load}: "
                   "its requests in flight are recorded as client errors" + (f"; {stopped}" if stopped else ""))
    lags = [d.loop_lag_ms for d in done.values() if d.loop_lag_ms is not None]
    return dataclasses.replace(result, window_start_s=start, window_end_s=end, ramp_excluded=ramp_excluded,
                               window_output_tokens=tokens_in_window(result.measured, start, end),
                               stopped_reason=stopped, loop_lag_ms=max(lags, default=None),
                               capped=sum(d.capped for d in done.values()))

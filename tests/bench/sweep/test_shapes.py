"""The load shapes: each runs its levels through the one `run` the runner calls, and accounts for them."""

from __future__ import annotations

import asyncio

from bench_helpers import FakeTransport
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.level import LevelResult
from sagellm.bench.load.open_loop import OpenLoop
from sagellm.bench.load.saturation import SaturationRule
from sagellm.bench.sweep.choosers import Chooser
from sagellm.bench.sweep.shapes import ClosedLoopSweep, Levels, LoadShape, OpenLoopSweep, RampRun
from sagellm.clock import REAL
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord

LEVELS = Levels(requests=6, duration_s=None, wall_s=None, warmup=1, repeats=1, workers=1, ray=None)


def run(shape: LoadShape) -> tuple[list[LevelResult], list[RequestRecord]]:
    levels: list[LevelResult] = []
    records: list[RequestRecord] = []
    shape.run(FakeTransport(duration_s=(0.002, 0.004)), Workload(WorkloadOptions(), Payload(8, 4)), asyncio.run,
              on_record=records.append, on_progress=lambda _: None, on_level=levels.append)
    return levels, records


def test_a_closed_loop_sweep_measures_its_concurrency_levels_on_one_worker() -> None:
    shape = ClosedLoopSweep(Chooser("doubling", (1, 2), REAL, False, 1), LEVELS)
    levels, records = run(shape)
    assert [lv.concurrency for lv in levels] == [1, 2] and all(lv.request_rate is None for lv in levels)
    assert sum(not r.warmup for r in records) == 12  # 6 measured per level, warm-ups beside them
    assert shape.workers == 1 and shape.ramp_block(levels, None, None, None) is None  # type: ignore[arg-type]
    assert shape.describe() == "levels 1, 2"


def test_an_open_loop_sweep_measures_its_request_rates() -> None:
    loop = OpenLoop((200.0, 400.0), arrivals="constant", max_in_flight=64)
    levels, records = run(OpenLoopSweep(Chooser("doubling", loop.rates, REAL, False, 1), LEVELS, loop, SaturationRule()))
    assert [lv.request_rate for lv in levels] == [200.0, 400.0] and all(lv.concurrency is None for lv in levels)
    assert all(r.late_s is not None for r in records)


def test_a_ramp_runs_its_steps_back_to_back_and_reads_the_scaling_state_around_them() -> None:
    class Target:
        reads = 0

        def autoscaling(self) -> dict[str, float]:
            Target.reads += 1
            return {"now_s": float(Target.reads)}

    loop = OpenLoop((50.0, 100.0), arrivals="constant", max_in_flight=64)
    shape = RampRun(Chooser("doubling", loop.rates, REAL, False, 1), loop.rates, 0.2, loop, Target())
    levels, records = run(shape)
    assert [lv.request_rate for lv in levels] == [50.0, 100.0]
    assert records and not any(r.warmup for r in records)  # a ramp has no warm-up
    assert levels[1].window_start_s == levels[0].window_end_s  # one continuous schedule
    assert shape.start == {"now_s": 1.0} and shape.end == {"now_s": 2.0}
    assert shape.workers is None and shape.describe() == "ramp of 2 steps × 0.2 s: 50/s, 100/s"
    # A ramp, not a doubling sweep; its minutes from the first request to the last return (~0.4 s × 1 instance).
    block = shape.sweep_block(None, Payload(8, 4))
    assert block.method == "ramp" and block.order == ["50/s", "100/s"]
    assert 0.35 / 60 <= block.endpoint_minutes <= 5 / 60

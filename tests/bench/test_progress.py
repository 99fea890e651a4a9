"""What a bench shows while it runs: heartbeat lines outside a terminal, a live table in one."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from bench_helpers import wait_for
from sagellm.bench.load.level import LevelProgress
from sagellm.bench.progress import Watch, watching
from sagellm.results.records import RequestRecord


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(c: int, start_s: float, e2e_s: float, *, tokens: int = 100, ttft_s: float = 0.05, ok: bool = True,
           warmup: bool = False) -> RequestRecord:
    return RequestRecord(concurrency=c, worker=0, start_s=start_s, ok=ok, e2e_s=e2e_s, output_tokens=tokens,
                         ttft_s=ttft_s, warmup=warmup, error_kind=None if ok else "overloaded")


def feed(watch: Watch, c: int, done: int, total: int | None, elapsed_s: float, *, errors: int = 0,
         duration_s: float | None = None) -> None:
    watch.progress(LevelProgress(load=str(c), concurrency=c, completed=done, planned=total, errors=errors, elapsed_s=elapsed_s,
                                 duration_s=duration_s))


def test_the_heartbeat_line_has_phase_elapsed_level_done_tok_s_ttft_errors_and_eta() -> None:
    clock, said = FakeClock(), []
    watch = Watch(say=said.append, clock=clock)
    clock.now += 75
    watch.enter("measuring", "levels [1, 4]")
    watch.record(record(4, 10.0, 2.0, ttft_s=9.0, warmup=True))  # warm-up: not in the live figures
    for i, ttft in enumerate((0.08, 0.1, 0.12)):
        watch.record(record(4, 12.0 + i, 2.0, ttft_s=ttft))  # 300 tokens from 12 s to 16 s
    watch.record(record(4, 13.0, 1.0, ok=False))
    feed(watch, 4, done=5, total=20, elapsed_s=10.0, errors=1)
    clock.now += 9

    assert said == ["sagellm [0:01:15] measuring: levels [1, 4]"]
    assert watch.line() == ("sagellm [0:01:24] measuring · concurrency 4 · 5/20 done · 75 tok/s · TTFT p50 100 ms"
                            " · 1 errors · ETA 0:00:30")


def test_eta_follows_the_pace_with_a_budget_and_the_clock_with_a_duration() -> None:
    watch = Watch(say=lambda text: None)
    feed(watch, 8, done=10, total=40, elapsed_s=20.0)
    assert watch.current is not None and watch.current.eta_s == 60.0
    feed(watch, 16, done=3, total=None, elapsed_s=4.0, duration_s=30.0)
    assert watch.current.eta_s == 26.0
    assert watch.levels["concurrency 8"].finished and watch.levels["concurrency 8"].eta_s == 0.0
    watch.end_level()
    assert watch.levels["concurrency 16"].finished and " · " not in watch.line()  # between levels: the phase


def test_before_any_level_the_line_is_the_phase_and_the_time() -> None:
    clock = FakeClock()
    watch = Watch(say=lambda text: None, clock=clock)
    watch.enter("deploying", "max-throughput (ml.g5.2xlarge × 1) to the sagemaker target")
    clock.now += 3725

    assert watch.line() == "sagellm [1:02:05] deploying"


def test_outside_a_terminal_a_line_at_each_phase_each_level_end_and_every_heartbeat() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with watching(console, heartbeat_s=0.05) as watch:
        watch.enter("deploying", "to the local target")
        watch.enter("measuring", "levels [1]")
        feed(watch, 1, done=2, total=4, elapsed_s=1.0)
        watch.record(record(1, 0.0, 1.0))
        wait_for(lambda: out.getvalue().count("measuring · concurrency 1") >= 2, 10, "two heartbeats")
        watch.enter("tearing down")
    lines = out.getvalue().splitlines()

    pattern = re.compile(r"sagellm \[\d:\d\d:\d\d\] ")
    assert all(pattern.match(line) for line in lines), lines
    # A heartbeat may land between two phase lines (it runs on its own thread); the phase lines keep their order.
    phases = [next(i for i, line in enumerate(lines) if line.endswith(end))
              for end in ("] deploying: to the local target", "] measuring: levels [1]", "] tearing down")]
    assert phases == sorted(phases)
    beats = [line for line in lines if "measuring · concurrency 1 · 2/4 done · 100 tok/s · TTFT p50 50 ms" in line]
    assert len(beats) >= 2
    done = [line for line in lines if "] level done · concurrency 1" in line]
    assert len(done) == 1 and "ETA" not in done[0] and lines.index(done[0]) < phases[2]


def test_the_heartbeat_stops_with_the_watch() -> None:
    out = io.StringIO()
    with watching(Console(file=out, force_terminal=False), heartbeat_s=0.02):
        wait_for(lambda: "starting" in out.getvalue(), 10, "a heartbeat")
    written = out.getvalue()
    time.sleep(0.1)

    assert out.getvalue() == written


def test_in_a_terminal_a_live_table_with_a_row_per_level() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with watching(console) as watch:
        watch.enter("measuring", "levels [1, 4]")
        feed(watch, 1, done=4, total=4, elapsed_s=2.0)
        watch.record(record(1, 0.0, 2.0, tokens=200, ttft_s=0.04))
        feed(watch, 4, done=3, total=16, elapsed_s=1.5, errors=2)
        watch.record(record(4, 2.5, 1.0, tokens=100, ttft_s=0.09))
    text = out.getvalue()

    assert "measuring: levels [1, 4]" in text
    for column in ("level", "done", "tok/s", "TTFT p50 ms", "errors", "ETA"):
        assert column in text
    assert re.search(r"concurrency 1\s+4/4\s+100\s+40\s+0\s+done", text), text
    assert re.search(r"concurrency 4\s+3/16\s+100\s+90\s+2\s+0:00:06", text), text

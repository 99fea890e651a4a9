"""What people see while a bench runs: a live table per level in a terminal; outside one (CI logs), a line at
every phase change, at the end of every level, and a heartbeat every HEARTBEAT_S seconds in between."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Self

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from sagellm.bench.load.level import LevelProgress
from sagellm.results.records import RequestRecord
from sagellm.results.summary import percentile

# A CI log shows the run is alive and how far it got, without flooding: one line every 15 s.
HEARTBEAT_S = 15.0

Say = Callable[[str], None]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def level_label(load: str, repeat: int = 0) -> str:
    """How progress names a level (by its load, `16` or `4/s`) and, with --repeats, its run."""
    name = f"rate {load}" if load.endswith("/s") else f"concurrency {load}"
    return name + (f" (repeat {repeat + 1})" if repeat else "")


@dataclass
class LevelStatus:
    """One level as it runs: requests finished (warm-up included), and the live figures of the measured ones."""

    name: str
    done: int = 0
    total: int | None = None  # None with a duration per level
    errors: int = 0
    elapsed_s: float = 0.0  # wall seconds since the level started
    duration_s: float | None = None  # wall seconds asked for, with a duration per level
    finished: bool = False
    tokens: float = 0.0  # output tokens of the measured ok requests
    first_start_s: float | None = None  # run-relative seconds (the results' clock), of measured requests
    last_end_s: float | None = None
    ttft_ms: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens of finished measured requests ÷ the time they span."""
        if self.first_start_s is None or self.last_end_s is None or self.last_end_s <= self.first_start_s:
            return None
        return self.tokens / (self.last_end_s - self.first_start_s)

    @property
    def ttft_p50_ms(self) -> float | None:
        """Median time to first token of the measured ok requests so far."""
        return percentile(self.ttft_ms, 50)

    @property
    def eta_s(self) -> float | None:
        """Wall seconds until the level's last request, at the pace so far."""
        if self.finished:
            return 0.0
        if self.total is not None and self.done:
            return max(self.total - self.done, 0) * self.elapsed_s / self.done
        if self.duration_s is not None:
            return max(self.duration_s - self.elapsed_s, 0.0)
        return None


def _n(value: float | None, unit: str = "") -> str:
    return "–" if value is None else f"{value:,.0f}{unit}"


class Watch:
    """The state of a running bench, fed by the runner (phases, level progress, records), read by a display."""

    def __init__(self, say: Say | None = None, clock: Callable[[], float] = time.monotonic):
        self.say: Say = say or _stderr
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self.phase = "starting"
        self.levels: dict[str, LevelStatus] = {}
        self.current: LevelStatus | None = None
        self.on_level_end: Callable[[LevelStatus], None] | None = None  # a display's hook

    def enter(self, phase: str, detail: str = "") -> None:
        """A new phase (deploying, measuring, tearing down, …): said at once, with the time so far."""
        with self._lock:
            self._finish_level()
            self.phase = phase
        self.say(f"sagellm [{_clock(self.elapsed_s)}] {phase}" + (f": {detail}" if detail else ""))

    @property
    def elapsed_s(self) -> float:
        """Wall seconds since the bench started."""
        return self._clock() - self.started

    def _level(self, name: str) -> LevelStatus:
        status = self.levels.get(name)
        if status is None:
            self._finish_level()
            status = self.levels[name] = LevelStatus(name)
            self.current = status
        return status

    def _finish_level(self) -> None:
        ended = self.current
        if ended is not None and not ended.finished:
            ended.finished = True
            if self.on_level_end is not None:
                self.on_level_end(ended)

    def end_level(self) -> None:
        """The running level is over (the sweep's on_level)."""
        with self._lock:
            self._finish_level()

    def progress(self, p: LevelProgress) -> None:
        """After every finished request (the load generator's on_progress)."""
        with self._lock:
            status = self._level(level_label(p.load, p.repeat))
            status.done, status.total, status.errors = p.completed, p.planned, p.errors
            status.elapsed_s, status.duration_s = p.elapsed_s, p.duration_s

    def record(self, r: RequestRecord) -> None:
        """A finished request, timed like the results (simulated seconds for a compressed emulator)."""
        if r.warmup or not r.ok:
            return
        with self._lock:
            status = self._level(level_label(r.load, r.repeat))
            status.tokens += r.output_tokens
            status.first_start_s = r.start_s if status.first_start_s is None else min(status.first_start_s, r.start_s)
            status.last_end_s = r.end_s if status.last_end_s is None else max(status.last_end_s, r.end_s)
            if r.ttft_s is not None:
                status.ttft_ms.append(r.ttft_s * 1000)

    def line(self) -> str:
        """The heartbeat: phase, elapsed, the running level with done/total, live tok/s, TTFT p50, ETA."""
        with self._lock:
            text = f"sagellm [{_clock(self.elapsed_s)}] {self.phase}"
            level = self.current
            if level is not None and not level.finished:
                text += " · " + describe(level)
        return text

    def table(self) -> Group:
        """The terminal view: the phase, then one row per level."""
        with self._lock:
            t = Table(box=None, pad_edge=False)
            for col in ("level", "done", "tok/s", "TTFT p50 ms", "errors", "ETA"):
                t.add_column(col, justify="left" if col == "level" else "right")
            for s in self.levels.values():
                done = f"{s.done}/{s.total}" if s.total is not None else str(s.done)
                eta = "done" if s.finished else ("–" if s.eta_s is None else _clock(s.eta_s))
                t.add_row(s.name, done, _n(s.tokens_per_s), _n(s.ttft_p50_ms), str(s.errors), eta)
            header = Text(f"{self.phase} · {_clock(self.elapsed_s)} elapsed", style="bold")
        return Group(header, t)


def describe(level: LevelStatus) -> str:
    """One level in a line: `concurrency 16 · 37/56 done · 1,234 tok/s · TTFT p50 85 ms · 2 errors · ETA 0:00:12`."""
    done = f"{level.done}/{level.total}" if level.total is not None else str(level.done)
    text = (f"{level.name} · {done} done · {_n(level.tokens_per_s)} tok/s · TTFT p50 {_n(level.ttft_p50_ms)} ms"
            f" · {level.errors} errors")
    if not level.finished and level.eta_s is not None:
        text += f" · ETA {_clock(level.eta_s)}"
    return text


class Heartbeat:
    """Writes the watch's line every `interval_s` seconds from a background thread, until stopped."""

    def __init__(self, watch: Watch, write: Say, interval_s: float = HEARTBEAT_S):
        self.watch, self.write, self.interval_s = watch, write, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sagellm-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write(self.watch.line())

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def watching(console: Console | None = None, heartbeat_s: float = HEARTBEAT_S) -> Iterator[Watch]:
    """A Watch shown on stderr (stdout stays clean for --json): a live table in a terminal, lines elsewhere."""
    console = console or Console(stderr=True, highlight=False)
    if console.is_terminal:
        from rich.live import Live

        watch = Watch()
        with Live(console=console, get_renderable=watch.table, refresh_per_second=4, transient=False) as live:
            watch.say = lambda text: live.console.print(text, markup=False, highlight=False)
            yield watch
        return

    def write(text: str) -> None:
        console.print(text, markup=False, soft_wrap=True)

    watch = Watch(say=write)
    watch.on_level_end = lambda level: write(f"sagellm [{_clock(watch.elapsed_s)}] level done · {describe(level)}")
    with Heartbeat(watch, write, heartbeat_s):
        yield watch

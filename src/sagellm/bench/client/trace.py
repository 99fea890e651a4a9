"""A request trace replayed as recorded: each request at its arrival time, with its prompt and output lengths.

Two public formats, told apart by their first line:
- **Mooncake** (JSON Lines): one `{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}` per
  request, `timestamp` in milliseconds since the trace's first request; `hash_ids` name the prompt's 512-token
  blocks in order, and two requests holding the same id share that block and everything before it (the ids are
  chained: a block's id stands for the prompt up to its end). The format of kvcache-ai/Mooncake's open-source
  traces (README "Open Source Trace"; sample mooncake_trace.jsonl@d21da178), as read here from aiperf's
  docs/benchmark_modes/trace_replay.md (its `mooncake_trace` dataset type; the copy read was the vinhngx/aiperf
  fork) and NVIDIA Dynamo's benchmarks/data_generator/README.md (fork yuekaizhang/dynamo): "the arrival time (in
  milliseconds) of the request since the first request", block size 512, ids shared = prefix shared.
- **Azure LLM inference trace** (CSV): header `TIMESTAMP,ContextTokens,GeneratedTokens`, `TIMESTAMP` a wall-clock
  date and time (`2023-11-16 18:15:46.6805900`; the 2024 files add `+00:00`). Defined in Azure/AzurePublicDataset
  AzureLLMInferenceDataset2023.md@1a61e6c6 ("Schema") and AzureLLMInferenceDataset2024.md; prompts are not
  published, only their sizes, so every request's prompt is unique here.

Replay: request i is due at its timestamp minus the first selected one's, divided by `speed` (2 plays twice as
fast). Prompts of a Mooncake trace are built block by block: the words of block `h` are drawn from a generator
seeded with (run seed, h), so every request holding `h` opens with the same text there and a server's prefix
cache sees the trace's sharing; the tokens past the last block are unique to the request. With a tokenizer each
block is cut to 512 tokens, but the joined prompt is re-tokenized by the server, so a block's boundary can move by
a token.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from sagellm.errors import InputError
from sagellm.planner.prefix import Segment
from sagellm.planner.traces import prefix_segments
from sagellm.profiles.schema import U32_MAX
from sagellm.results.schema import TraceRecord

MOONCAKE_BLOCK_TOKENS = 512  # the FAST'25 traces' block size (Mooncake README; aiperf's default too)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
TraceFormat = Literal["mooncake", "azure"]
_MOONCAKE_LINE = '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}'
_AZURE_LINE = "2023-11-16 18:15:46.6805900,4808,10"


@dataclass(frozen=True)
class TraceOptions:
    """Which trace to replay, which part of it, and how fast."""

    path: Path
    speed: float = 1.0  # 2: arrivals twice as fast as recorded
    requests: int | None = None  # only the first N requests (after the window)
    window_s: tuple[float, float] | None = None  # only requests due in [start, end) seconds of the trace

    def __post_init__(self) -> None:
        errors = []
        if not 0 < self.speed < math.inf:
            errors.append(f"TraceOptions.speed: {self.speed:g} must be a positive factor (2 plays twice as fast)")
        if self.requests is not None and self.requests < 1:
            errors.append(f"TraceOptions.requests: {self.requests} must be at least 1")
        if self.window_s is not None and not 0 <= self.window_s[0] < self.window_s[1]:
            errors.append(f"TraceOptions.window_s: {self.window_s[0]:g}-{self.window_s[1]:g} must be an interval "
                          "of the trace's seconds, start below end (e.g. 0-600)")
        if errors:
            raise InputError(errors)


def parse_window(text: str | None, option: str) -> tuple[float, float] | None:
    """`START-END` seconds of a trace (`0-600`); InputError naming the option otherwise."""
    if text is None:
        return None
    start, sep, end = text.partition("-")
    try:
        window = (float(start), float(end))
    except ValueError:
        window = None
    if not sep or window is None or not 0 <= window[0] < window[1] < math.inf:
        raise InputError(f"{option}: {text!r} is not a window of the trace (use START-END seconds, e.g. 0-600)")
    return window


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace."""

    line: int  # in the file, for messages
    timestamp_s: float  # since the file's first request
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # Mooncake: the prompt's 512-token blocks


@dataclass(frozen=True)
class Trace:
    """The selected requests of a trace file, due at `arrivals_s`."""

    options: TraceOptions
    format: TraceFormat
    rows: tuple[TraceRow, ...]
    rows_in_file: int

    @property
    def arrivals_s(self) -> tuple[float, ...]:
        """When each request is due, in seconds since the first (divided by the speed)."""
        first = self.rows[0].timestamp_s
        return tuple((r.timestamp_s - first) / self.options.speed for r in self.rows)

    @property
    def rate(self) -> float:
        """Its mean request rate at its speed (requests/s between the first and the last arrival)."""
        span = self.arrivals_s[-1]
        # All at one instant (or one request): a burst, named by its size per second.
        return (len(self.rows) - 1) / span if span > 0 else float(len(self.rows))

    def row(self, index: int) -> TraceRow:
        """Request `index` of a replay (a replay repeated starts over)."""
        return self.rows[index % len(self.rows)]

    def prompt(self, index: int, words: Callable[[random.Random, int], str], seed: int) -> str:
        """Request `index`'s prompt: its blocks' shared texts, then unique words up to its input length."""
        row = self.row(index)
        left, texts = row.input_tokens, []
        for block in row.hash_ids:
            n = min(MOONCAKE_BLOCK_TOKENS, left)
            # Words are drawn one by one from the block's generator, so a short last block is the start of the
            # same id's full block (what a prefix cache can share).
            texts.append(words(random.Random(f"{seed}/block/{block}"), n))
            left -= n
        if left > 0:
            texts.append(words(random.Random(f"{seed}/trace/{index}"), left))
        return " ".join(t for t in texts if t)

    def describe(self) -> TraceRecord:
        """What results.json records about the replay."""
        o = self.options
        return TraceRecord(file=str(o.path), format=self.format, rows=len(self.rows), rows_in_file=self.rows_in_file,
                           speed=o.speed, first_requests=o.requests, window_s=o.window_s,
                           duration_s=self.arrivals_s[-1], request_rate=self.rate)


def load_trace(options: TraceOptions) -> Trace:
    """Read and select a trace; InputError with file:line and the fix on the first bad row."""
    path = options.path
    try:
        text = path.read_text(encoding="utf-8-sig")  # a CSV saved by a spreadsheet may open with a BOM
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"WorkloadOptions.trace: {path}: cannot be read: {why}") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        fmt: TraceFormat = "mooncake"
        rows = list(_mooncake(path, text))
    elif first.strip().split(",")[:3] == list(AZURE_COLUMNS):
        fmt = "azure"
        rows = list(_azure(path, text))
    else:
        raise InputError(f"WorkloadOptions.trace: {path}:1: neither a Mooncake trace (JSON Lines such as "
                         f"{_MOONCAKE_LINE}) nor an Azure LLM inference trace (CSV with the header "
                         f"{','.join(AZURE_COLUMNS)})")
    _in_order(path, rows)
    chosen, where = rows, ""
    if options.window_s is not None:
        start, end = options.window_s
        chosen = [r for r in chosen if start <= r.timestamp_s < end]
        where = f" in the window {start:g}-{end:g} s"
    chosen = chosen[:options.requests]
    if not chosen:
        raise InputError(f"WorkloadOptions.trace: {path}: holds no request{where} (the trace spans "
                         f"{rows[-1].timestamp_s - rows[0].timestamp_s if rows else 0:g} s)")
    return Trace(options, fmt, tuple(chosen), len(rows))


def _in_order(path: Path, rows: list[TraceRow]) -> None:
    for before, row in itertools.pairwise(rows):
        if row.timestamp_s < before.timestamp_s:
            raise InputError(f"{path}:{row.line}: its timestamp is before line {before.line}'s: a trace is replayed "
                             "in arrival order (sort the file by its timestamp)")


def _count(value: object) -> int | None:
    """A positive token count, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= U32_MAX:
        return None
    return value


def _mooncake(path: Path, text: str) -> Iterator[TraceRow]:
    shape = f"each line is one request, e.g. {_MOONCAKE_LINE}"
    zero: float | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not JSON ({exc.msg}); {shape}") from None
        if not isinstance(item, dict):
            raise InputError(f"{path}:{n}: not a JSON object; {shape}")
        stamp = item.get("timestamp")
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not 0 <= stamp < math.inf:
            raise InputError(f"{path}:{n}: timestamp: {stamp!r} must be milliseconds since the first request "
                             f"(a number, 0 or more); {shape}")
        sizes = [(key, item.get(key), _count(item.get(key))) for key in ("input_length", "output_length")]
        for key, given, count in sizes:
            if count is None:
                raise InputError(f"{path}:{n}: {key}: {given!r} must be a whole number of tokens, 1 or more; {shape}")
        input_tokens, output_tokens = (count or 0 for _, _, count in sizes)
        ids = item.get("hash_ids", [])
        if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in ids):
            raise InputError(f"{path}:{n}: hash_ids: {ids!r} must be a list of block ids (whole numbers, 0 or "
                             f"more); {shape}")
        if len(ids) > math.ceil(input_tokens / MOONCAKE_BLOCK_TOKENS):
            raise InputError(f"{path}:{n}: hash_ids: {len(ids)} blocks of {MOONCAKE_BLOCK_TOKENS} tokens do not fit "
                             f"in input_length {input_tokens} (a Mooncake trace has one id per started block: at "
                             f"most {math.ceil(input_tokens / MOONCAKE_BLOCK_TOKENS)})")
        zero = stamp / 1000 if zero is None else zero
        yield TraceRow(n, stamp / 1000 - zero, input_tokens, output_tokens, tuple(ids))


def _azure(path: Path, text: str) -> Iterator[TraceRow]:
    shape = f"each row is TIMESTAMP,ContextTokens,GeneratedTokens, e.g. {_AZURE_LINE}"
    zero: datetime | None = None
    reader = csv.reader(text.splitlines())
    next(reader)  # the header, checked by the caller
    for values in reader:
        n = reader.line_num
        if not any(v.strip() for v in values):
            continue
        if len(values) < 3:
            raise InputError(f"{path}:{n}: {len(values)} columns where 3 are needed; {shape}")
        try:
            when = datetime.fromisoformat(values[0].strip())
        except ValueError:
            raise InputError(f"{path}:{n}: TIMESTAMP: {values[0]!r} is not a date and time; {shape}") from None
        sizes = []
        for name, value in zip(AZURE_COLUMNS[1:], values[1:3], strict=True):
            count = _count(int(value)) if value.strip().isdigit() else None
            if count is None:
                raise InputError(f"{path}:{n}: {name}: {value!r} must be a whole number of tokens, 1 or more; {shape}")
            sizes.append(count)
        zero = when if zero is None else zero
        if (when.tzinfo is None) != (zero.tzinfo is None):
            raise InputError(f"{path}:{n}: TIMESTAMP: {values[0]!r} mixes a time zone with times without one; "
                             f"{shape}")
        yield TraceRow(n, (when - zero).total_seconds(), sizes[0], sizes[1])


def trace_prefixes(trace: Trace) -> tuple[tuple[Segment, ...], ...]:
    """Each request's prompt as prefix segments (its Mooncake blocks; none for an Azure row), for the simulation."""
    return tuple(prefix_segments(r.hash_ids, r.input_tokens, MOONCAKE_BLOCK_TOKENS) for r in trace.rows)

"""One record per request: what the load generator measured (a request never raises)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from sagellm.results.schema import ErrorKind, load_name

TokenSource = Literal["server", "tokenizer", "words"]


# Marks the fields that are durations or times on the client's clock (seconds): an emulated run's time scale
# applies to them (load.measured.on_simulated_clock), so a new client timing is declared here once.
CLIENT_SECONDS = {"client_seconds": True}
# InvokeEndpoint on a component with no copy: SageMaker's ValidationError "Inference Component has no capacity to
# process this request. …" (quoted in the AWS ML blog on scale to zero, 2024-12-03), as a record's error carries it.
NO_CAPACITY_TEXT = "Inference Component has no capacity"


@dataclass
class RequestRecord:
    """What one request did, timed on the client with time.perf_counter() (or on the emulator's clock).

    A transport returns it with the timings and tokens of the response (`start_s` then on perf_counter()'s
    clock); the level that sent it places it (`level.LevelBook.record`): which level, worker and request,
    and `start_s` in seconds since the run started.
    """

    concurrency: int | None = None  # the level: its concurrency (closed loop) ...
    worker: int | None = None  # closed loop: the worker that sent it
    start_s: float = field(default=0.0, metadata=CLIENT_SECONDS)  # seconds since the run started
    ok: bool = False
    e2e_s: float = field(default=0.0, metadata=CLIENT_SECONDS)
    output_tokens: int = 0  # as reported by the server, never re-tokenized
    input_tokens: int = 0
    input_tokens_by: TokenSource = "words"  # who counted input_tokens
    ttft_s: float | None = field(default=None, metadata=CLIENT_SECONDS)
    # between token events after the first
    token_gaps_s: list[float] = field(default_factory=list, metadata=CLIENT_SECONDS)
    status: int | None = None  # HTTP status where there was one
    error_kind: ErrorKind | None = None
    error: str | None = None
    retries: int = 0
    warmup: bool = False
    request_rate: float | None = None  # ... or its request rate (open loop)
    repeat: int = 0  # which run of the level (--repeats)
    request: int | None = None  # the workload's request index: its prompt is reproducible from the seed
    conversation: int | None = None  # conversations: which one of the run sent it (`workload.Request`) ...
    turn: int | None = None  # ... and as which turn (1-based); None for single requests
    # open loop: sent this long after its scheduled time
    late_s: float | None = field(default=None, metadata=CLIENT_SECONDS)
    # Timings the emulator stamps about itself, wall-clock seconds on its own clock (see README).
    server_ttft_s: float | None = None
    server_e2e_s: float | None = None
    server_arrived_s: float | None = None  # when it reached the emulator, since the emulator began serving
    # "emulator": ttft/e2e are the emulator's simulated timings and client_e2e_s is what the client saw.
    clock: Literal["client", "emulator"] = "client"
    client_e2e_s: float | None = None

    @property
    def end_s(self) -> float:
        """When the request finished, seconds since the run started."""
        return self.start_s + self.e2e_s

    @property
    def itl_s(self) -> float | None:
        """Inter-token latency of this request: (e2e − TTFT) ÷ (output tokens − 1); None below two tokens."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def no_capacity(self) -> bool:
        """Refused because the inference component had no copy (a scale-to-zero endpoint's cold start)."""
        return not self.ok and NO_CAPACITY_TEXT in (self.error or "")

    @property
    def load(self) -> str:
        """The level's name: `16` (concurrency) or `4/s` (request rate)."""
        return load_name(self.concurrency, self.request_rate)

    def to_json(self) -> str:
        """One line of requests.jsonl."""
        # The fields as they are (numbers, strings, a list of floats): asdict's deep copy cost 5× the dump.
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> RequestRecord:
        """Inverse of to_json (after json.loads)."""
        return cls(**data)


class RecordLog:
    """Appends records to requests.jsonl as they complete, flushed, so a crash loses nothing finished."""

    def __init__(self, path: Path):
        self.path = path
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    def append(self, record: RequestRecord) -> None:
        """Write one record and flush it to the OS."""
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_records(path: Path) -> list[RequestRecord]:
    """Read requests.jsonl back (a truncated last line from a crash is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(RequestRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return out

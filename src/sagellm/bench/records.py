"""One record per request: what the load generator measured (a request never raises)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from sagellm.results.schema import ErrorKind


@dataclass
class RequestRecord:
    """What one request did, timed on the client with time.perf_counter()."""

    concurrency: int  # the level this request belongs to
    worker: int
    start_s: float  # seconds since the run started
    ok: bool
    e2e_s: float
    output_tokens: int = 0  # as reported by the server, never re-tokenized
    input_tokens: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between token events after the first
    status: int | None = None  # HTTP status where there was one
    error_kind: ErrorKind | None = None
    error: str | None = None
    retries: int = 0
    warmup: bool = False
    # Timings the server reported about itself (the emulator does), to measure client overhead.
    server_ttft_s: float | None = None
    server_e2e_s: float | None = None

    @property
    def end_s(self) -> float:
        """When the request finished, seconds since the run started."""
        return self.start_s + self.e2e_s

    def to_json(self) -> str:
        """One line of requests.jsonl."""
        return json.dumps(asdict(self), separators=(",", ":"))

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

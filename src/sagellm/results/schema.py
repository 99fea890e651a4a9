"""results.json: the canonical, versioned record of a bench run (report, plot and JUnit render from it)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sagellm.errors import InputError
from sagellm.planner.curve import Point

SCHEMA_VERSION: Literal[1] = 1

ErrorKind = Literal["overloaded", "validation", "timeout", "throttled", "other"]
ERROR_KINDS: tuple[ErrorKind, ...] = ("overloaded", "validation", "timeout", "throttled", "other")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stats(BaseModel):
    """Distribution of one metric; None where there was no sample."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


class LevelSummary(BaseModel):
    """What one concurrency level measured (warm-up excluded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int
    requests: int
    ok: int
    errors: dict[str, int]  # every error kind, zero included
    error_rate: float
    retries: int
    window_s: float
    output_tokens: float  # generated inside the window (token events counted where they fall)
    throughput_tokens_per_s: float
    requests_per_s: float
    latency_ms_per_token: Stats  # e2e ÷ output tokens per request (the published definition)
    ttft_ms: Stats
    itl_ms: Stats  # pooled inter-token gaps of all ok requests
    e2e_s: Stats
    client_overhead_ms: Stats | None = None  # client e2e − server e2e, where the server reported it


class Run(_Strict):
    """What was measured, where, and how it was invoked."""

    profile: str
    model: str
    instance_type: str
    instance_count: int
    target: Literal["local", "sagemaker", "http"]
    emulated: bool
    time_scale: float = 1.0  # emulator time compression (1.0 = real time)
    region: str
    endpoint: str | None = None  # endpoint name, or the URL of an http target
    bench_run: str | None = None  # the run id; stacks the run deployed carry it as tag sagellm:bench-run
    environment: dict[str, str]  # the plan's container environment
    input_tokens: int
    output_tokens: int
    concurrency: list[int] = []  # the planned sweep (levels may stop earlier)
    tool_version: str
    started_at: datetime
    ended_at: datetime | None = None
    command: str


class Predicted(_Strict):
    """The planner's prediction for the same level."""

    ms_per_token: float
    ttft_ms: float
    itl_ms: float
    e2e_s: float
    throughput_tokens_per_s: float
    requests_per_s: float
    rejected: bool
    within_timeout: bool


def predicted_from(point: Point) -> Predicted:
    """The prediction block of a level from a planner Point."""
    return Predicted(
        ms_per_token=point.ms_per_token, ttft_ms=point.ttft_ms, itl_ms=point.itl_ms, e2e_s=point.e2e_s,
        throughput_tokens_per_s=point.throughput_tokens_per_s, requests_per_s=point.requests_per_s,
        rejected=point.rejected, within_timeout=point.within_timeout,
    )


class Level(LevelSummary):
    """A measured level with the planner's prediction beside it."""

    predicted: Predicted | None = None
    # The emulator's worst event-loop lag during the level: its own distortion (local target only).
    server_loop_lag_ms: float | None = None


class Pick(_Strict):
    """A level singled out (knee, max throughput, best under SLO)."""

    concurrency: int
    throughput_tokens_per_s: float
    ms_per_token_p50: float
    definition: str


class Slo(_Strict):
    """The highest-throughput level within a latency SLO (p50 ms/token)."""

    ms_per_token: float
    best: Pick | None


class Cost(_Strict):
    """Endpoint cost from the catalog price × instance count, per 1M tokens at max throughput."""

    usd_per_h: float | None
    usd_per_1m_tokens: float | None
    at_concurrency: int | None


class Teardown(_Strict):
    """What happened to the deployed stack."""

    status: Literal["destroyed", "kept", "failed", "not-applicable"]
    detail: str = ""
    leftovers: list[str] = []  # resources still there, with how to delete them in `detail`


class Violation(_Strict):
    """One failed threshold check."""

    rule: str  # the rule's label, as in Gate.rules
    metric: str
    where: str | None  # "16", "knee", "max"; None for run-wide metrics
    measured: float | None
    limit: float | None
    message: str


class Gate(_Strict):
    """The verdict of the thresholds: every rule checked, and what failed."""

    passed: bool
    rules: list[str]
    violations: list[Violation]


class Results(_Strict):
    """The whole run."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run: Run
    levels: list[Level]
    knee: Pick | None
    max_throughput: Pick | None
    slo: Slo | None = None
    cost: Cost
    teardown: Teardown
    gate: Gate | None = None  # None when no thresholds were given
    stopped_reason: str | None = None  # why the sweep stopped before its last planned level

    def level(self, concurrency: int) -> Level | None:
        """The measured level at a concurrency, if it was reached."""
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


def write_results(path: Path, results: Results) -> None:
    """Write results.json (indented, UTF-8)."""
    path.write_text(results.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_results(path: Path) -> Results:
    """Read results.json back; InputError naming the file and every problem when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found (pass the results.json a `sagellm bench --out DIR` wrote)") \
            from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a sagellm results file (expected a JSON object)")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{path}: schema_version {version!r} is not supported (this sagellm reads version "
            f"{SCHEMA_VERSION}; re-run the bench with this version)"
        )
    try:
        return Results.model_validate(data)
    except ValidationError as exc:
        raise InputError([f"{path}: {_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]) from None

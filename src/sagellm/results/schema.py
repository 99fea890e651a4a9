"""results.json: the canonical, versioned record of a bench run (report, plot and JUnit render from it)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sagellm.clock import Clock
from sagellm.errors import InputError
from sagellm.planner.curve import Point

SCHEMA_VERSION: Literal[2] = 2

ErrorKind = Literal["overloaded", "validation", "timeout", "throttled", "client", "other"]
ERROR_KINDS: tuple[ErrorKind, ...] = ("overloaded", "validation", "timeout", "throttled", "client", "other")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Stats(BaseModel):
    """Distribution of one metric across requests; None where there was no sample."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None


class Spread(_Strict):
    """One metric across the repeats of a level: each repeat's own value, summarised."""

    mean: float
    stddev: float  # sample standard deviation (n − 1); 0 for one repeat
    min: float
    max: float


# A rate in any float spelling: 4/s, 0.5/s, .5/s, 1e+06/s, 5e-05/s (load_name writes `:g`, which gives these).
_RATE_KEY = re.compile(r"^((?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)/s$")


def parse_load(where: int | str) -> int | float | None:
    """A level key: an int (concurrency) or `N/s` (request rate, returned as a float); None if neither."""
    if isinstance(where, int) and not isinstance(where, bool):
        return where if where > 0 else None
    text = str(where).strip()
    if text.isdigit():
        return int(text) or None
    m = _RATE_KEY.match(text)
    return float(m[1]) if m and float(m[1]) > 0 else None


def load_name(concurrency: int | None, request_rate: float | None) -> str:
    """A level's name, as thresholds write `where`: `16` (concurrency) or `4/s` (request rate)."""
    return f"{request_rate:g}/s" if request_rate is not None else str(concurrency)


class LoadKey(BaseModel):
    """What names a level: its concurrency (closed loop) or its request rate (open loop), never both."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    concurrency: int | None = None  # closed loop: workers, each sending when its last request returns
    request_rate: float | None = None  # open loop: requests per second scheduled

    @model_validator(mode="after")
    def _one_key(self) -> LoadKey:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("a level has exactly one of concurrency and request_rate")
        return self

    @property
    def load(self) -> str:
        """The level's name, as thresholds write `where`: `16` (concurrency) or `4/s` (request rate)."""
        return load_name(self.concurrency, self.request_rate)

    @property
    def load_value(self) -> float:
        """The level's load as a number, for ordering levels."""
        return self.request_rate if self.request_rate is not None else float(self.concurrency or 0)

    def describe_load(self) -> str:
        """`concurrency 16` or `request rate 4/s`, for messages."""
        return f"request rate {self.load}" if self.request_rate is not None else f"concurrency {self.load}"


class RequestSlo(_Strict):
    """Per-request SLOs in ms (a thresholds file's `slo:`): a request meets them when it succeeded and every figure
    given is at or under its limit (docs/metrics.md, Goodput and SLO attainment)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None  # the request's mean gap, (e2e − TTFT) ÷ (output tokens − 1): TPOT by another name
    tpot_ms: float | None = None  # the same figure under vLLM's name (a file gives one of the two)
    e2e_ms: float | None = None

    @property
    def per_token_ms(self) -> float | None:
        """The limit on the request's mean inter-token time, under either name."""
        return self.itl_ms if self.itl_ms is not None else self.tpot_ms

    def describe(self) -> str:
        """`TTFT ≤ 800 ms, ITL ≤ 50 ms`: the limits given, for reports and messages."""
        names = {"ttft_ms": "TTFT", "itl_ms": "ITL", "tpot_ms": "TPOT", "e2e_ms": "e2e"}
        return ", ".join(f"{names[k]} ≤ {v:g} ms" for k, v in self.model_dump().items() if v is not None)


class Goodput(_Strict):
    """The rates of the requests that met every per-request SLO, over the level's window."""

    requests_per_s: float  # counted as requests_per_s is: their tokens in the window ÷ their mean output
    tokens_per_s: float  # their output tokens generated inside the window ÷ its length


class TurnSummary(_Strict):
    """A level's conversation turns at one position (turn 1 opens a conversation; a later turn re-sends the history,
    so a prefix cache serves it): the measured requests sent as that turn."""

    turn: int  # 1-based
    requests: int
    ok: int
    ttft_ms: Stats  # of the ok ones
    e2e_s: Stats
    request_input_tokens: Stats  # the history re-sent plus the new message (the server's count where it reports one)


class LevelSummary(LoadKey):
    """What one level measured (warm-up excluded); with repeats, all of them together."""

    repeats: int = 1
    requests: int
    ok: int
    errors: dict[str, int]  # every error kind, zero included
    error_rate: float
    # Of the validation errors: refused because the inference component had no copy (SageMaker's
    # NoCapacityInvocationFailures), the cold start of a scale-to-zero endpoint (ramp.cold_start_s measures it).
    refused_no_capacity: int = 0
    retries: int
    window_s: float
    output_tokens: float  # generated inside the window (token events counted where they fall)
    throughput_tokens_per_s: float
    requests_per_s: float
    latency_ms_per_token: Stats  # e2e ÷ output tokens per request (the published definition)
    ttft_ms: Stats
    itl_ms: Stats  # per request (e2e − TTFT) ÷ (output tokens − 1); percentiles across requests
    tpot_ms: Stats = Stats()  # the same per-request figure under vLLM's name (time per output token)
    token_gap_ms: Stats = Stats()  # every gap between token events of ok requests, pooled (0 within a chunk)
    e2e_s: Stats
    request_input_tokens: Stats = Stats()  # prompt tokens per ok request (the server's count where it reports one)
    request_output_tokens: Stats = Stats()  # generated tokens per ok request
    lateness_ms: Stats | None = None  # open loop: how late each request was sent against its schedule
    achieved_request_rate: float | None = None  # open loop: measured requests sent ÷ the sending time
    client_overhead_ms: Stats | None = None  # wall-clock ms: client e2e − server e2e (emulator only)
    # With per-request SLOs (run.request_slo): the share of measured requests that met every one, a failed request
    # counting as a miss, and the rates of those that met them. None without SLOs.
    slo_attainment: float | None = None
    goodput: Goodput | None = None
    spread: dict[str, Spread] | None = None  # repeats > 1: headline metrics across the repeats
    by_turn: list[TurnSummary] | None = None  # conversations (run.workload.turns): per turn position; None otherwise


class TraceRecord(_Strict):
    """A replayed request trace: which file, which of its requests, how fast (bench/client/trace.py)."""

    file: str
    format: Literal["mooncake", "azure"]
    rows: int  # requests replayed (per level)
    rows_in_file: int
    speed: float  # 2: arrivals twice as fast as recorded
    first_requests: int | None = None  # only the first N were asked for
    window_s: tuple[float, float] | None = None  # only those due in [start, end) seconds of the trace
    duration_s: float  # from the first replayed arrival to the last, at this speed (simulated seconds)
    request_rate: float  # their mean rate at this speed, requests/s (the level's name)


class WorkloadRecord(_Strict):
    """What the requests asked for."""

    prompts: Literal["unique", "dataset", "trace"]  # unique: random words per request, seeded
    api: str  # tgi (generate), openai (completions) or chat (Messages API / chat completions)
    input_tokens: str  # a length distribution (512, 512:64, 256-1024) or "dataset"
    output_tokens: str
    shared_prefix_tokens: int = 0
    shared_prefixes: int = 1  # distinct shared prefixes (each shared_prefix_tokens long), one per request
    dataset: str | None = None
    dataset_entries: int | None = None
    token_counter: Literal["words", "tokenizer"]  # how prompts were built and counted locally
    tokenizer: str | None = None
    seed: int
    turns: str | None = None  # conversations: turns per conversation (a length distribution); None: single requests
    think_time_s: str | None = None  # conversations: seconds between a reply and the next turn (a distribution)
    trace: TraceRecord | None = None  # a trace replay: its arrivals and lengths are the trace's


class Run(_Strict):
    """What was measured, where, and how it was invoked."""

    profile: str | None  # None: an http run without a catalog model (nothing predicted)
    model: str  # the catalog model id, or else the name the server serves
    served_model: str | None = None  # http/OpenAI: what the requests' `model` field carried
    instance_type: str | None
    instance_count: int | None
    target: Literal["local", "sagemaker", "http"]
    emulated: bool
    time_scale: float = 1.0  # emulator time compression (1.0 = real time); `simulated_clock` reads it
    region: str
    endpoint: str | None = None  # endpoint name, or the URL of an http target
    bench_run: str | None = None  # the run id; stacks the run deployed carry it as tag sagellm:bench-run
    environment: dict[str, str]  # the plan's container environment
    container: str | None = None  # the served image (repository:tag, registry left out); None for --target http
    input_tokens: int  # the mean request (what the prediction is for)
    output_tokens: int
    concurrency: list[int] = []  # the planned closed-loop sweep (levels may stop earlier)
    request_rate: list[float] = []  # or the planned open-loop sweep, requests/s
    arrivals: Literal["constant", "poisson"] | None = None  # open loop: how requests are spaced
    max_in_flight: int | None = None  # open loop: requests in flight at most (later ones wait, late)
    repeats: int = 1  # runs of each level
    workers: int = 1  # load-generator processes of the sweep (--workers; auto sizes it for the busiest level)
    ray: str | None = None  # the Ray cluster they ran on (--ray), None for processes on this machine
    # Where request timings come from: the client's clock, or the emulator's simulated clock (docs/emulator.md).
    clock: Literal["client", "emulator"] = "client"
    # Who sent the load: the bench's own client, or SageMaker AI's benchmark job (AIPerf run by AWS, one job a level).
    load_by: Literal["sagellm", "aws-benchmark-job"] = "sagellm"
    workload: WorkloadRecord | None = None
    request_slo: RequestSlo | None = None  # the per-request SLOs each level's attainment and goodput are taken against
    tool_version: str
    started_at: datetime
    ended_at: datetime | None = None
    command: str

    @property
    def simulated_clock(self) -> Clock:
        """The clock the run's timings are on: the emulator's time scale (REAL for a real server)."""
        return Clock(self.time_scale)


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
    # p90 of the simulated requests (the figures above are their p50); None in results from before simulation.
    ms_per_token_p90: float | None = None
    ttft_ms_p90: float | None = None
    # The target is the emulator, which runs the engine the prediction simulates: they agree by construction,
    # so a departure is the measuring machine's (client overhead, event-loop lag), not the prediction's.
    same_engine: bool = False
    # The simulated requests' share meeting run.request_slo and their goodput (None without SLOs).
    slo_attainment: float | None = None
    goodput: Goodput | None = None


class PredictedPoint(Predicted):
    """One point of the predicted curve over the whole range the run spans (drawn as a line in curve.png)."""

    concurrency: int


def predicted_from(point: Point) -> Predicted:
    """The prediction block of a level from a planner Point."""
    return Predicted(
        ms_per_token=point.ms_per_token, ttft_ms=point.ttft_ms, itl_ms=point.itl_ms, e2e_s=point.e2e_s,
        throughput_tokens_per_s=point.throughput_tokens_per_s, requests_per_s=point.requests_per_s,
        rejected=point.rejected, within_timeout=point.within_timeout,
        ms_per_token_p90=point.ms_per_token_p90, ttft_ms_p90=point.ttft_ms_p90,
    )


class ServerStats(_Strict):
    """One server metric over a level's window; None where the source has no such statistic."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    avg: float | None = None
    min: float | None = None
    max: float | None = None
    sum: float | None = None
    count: float | None = None  # samples (CloudWatch SampleCount; a Prometheus histogram's observations)


class ServerMetric(_Strict):
    """What the endpoint itself reported for one metric, in `unit`, and the source's own name for it."""

    unit: Literal["ms", "count", "percent", "tokens"]
    name: str  # e.g. `AWS/SageMaker ModelLatency` or `vllm:e2e_request_latency_seconds`
    stats: ServerStats


# The server metrics a level may carry (thresholds name them `server.<name>.<stat>`); README explains each.
SERVER_METRICS: tuple[str, ...] = (
    # CloudWatch (sagemaker target; the emulator publishes the same for the local target)
    "model_latency_ms", "overhead_latency_ms", "invocations", "invocation_4xx_errors", "invocation_5xx_errors",
    "model_setup_time_ms", "concurrent_requests", "gpu_utilization_pct", "gpu_memory_utilization_pct",
    "cpu_utilization_pct",
    # Prometheus /metrics (http target: vLLM and TGI)
    "requests", "e2e_latency_ms", "ttft_ms", "itl_ms", "time_per_token_ms", "queue_time_ms", "prompt_tokens",
    "generation_tokens", "prefix_cache_queries", "prefix_cache_hits",
)


class ServerMetrics(_Strict):
    """What the endpoint reported over one level's window, and where it came from."""

    source: Literal["cloudwatch", "prometheus"]
    # the window the source was read over (CloudWatch: aligned to its resolution); on the local target, the
    # emulator's simulated clock (its start in UTC, then simulated seconds), not a real UTC time
    window_start: datetime
    window_end: datetime
    period_s: float | None = None  # CloudWatch: the one period the window was read as; None for Prometheus
    metrics: dict[str, ServerMetric]  # by SERVER_METRICS name; a metric the source did not report is absent

    @model_validator(mode="after")
    def _known(self) -> ServerMetrics:
        unknown = sorted(set(self.metrics) - set(SERVER_METRICS))
        if unknown:
            raise ValueError(f"unknown server metric(s) {', '.join(unknown)} (known: {', '.join(SERVER_METRICS)})")
        return self


class OverSaturation(_Strict):
    """An open-loop level stopped early past saturation (bench/load/saturation.py): why, and when."""

    reason: str
    stopped_at_s: float  # simulated seconds after the level started (its first run to stop, with repeats)


class Level(LevelSummary):
    """A measured level with the planner's prediction beside it."""

    predicted: Predicted | None = None
    server: ServerMetrics | None = None  # what the endpoint itself reported over the level (where readable)
    # The emulator's worst event-loop lag during the level: its own distortion (local target only).
    server_loop_lag_ms: float | None = None
    # Why the load generator, not the endpoint, was the bottleneck of the level (None: it kept up); the
    # criterion is in docs/metrics.md ("Client bottleneck").
    client_bottleneck: str | None = None
    client_loop_lag_ms: float | None = None  # the client's mean event-loop lag, wall ms (worst repeat, worker)
    # Stopped early, over-saturated: its statistics are those of the part measured before it stopped.
    over_saturated: OverSaturation | None = None


class Pick(LoadKey):
    """A level singled out (knee, max throughput, best under SLO)."""

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
    at_request_rate: float | None = None


class Teardown(_Strict):
    """What happened to the deployed stack."""

    status: Literal["destroyed", "kept", "failed", "not-applicable"]
    detail: str = ""
    leftovers: list[str] = []  # resources still there, with how to delete them in `detail`


class Violation(_Strict):
    """One failed threshold check."""

    rule: str  # the rule's label, as in GateVerdict.rules
    metric: str
    where: str | None  # "16", "knee", "max"; None for run-wide metrics
    measured: float | None
    limit: float | None
    message: str


class GateVerdict(_Strict):
    """The verdict of the thresholds: every rule checked, and what failed."""

    passed: bool
    rules: list[str]
    violations: list[Violation]
    incomparable: list[str] = []  # how the baseline's run differs, compared anyway (--allow-incomparable)


class Failure(_Strict):
    """Why the run did not complete: the target or infrastructure failed (exit 3), or it was interrupted (130)."""

    exit_status: Literal[3, 130]
    message: str


class RampInterval(_Strict):
    """One interval of a ramp: what was offered, what came back, and how many instances served it."""

    start_s: float  # simulated seconds from the ramp's start
    offered_rps: float  # requests sent in the interval ÷ its length
    achieved_rps: float  # requests that completed ok in the interval ÷ its length
    instances_desired: int | None  # at the interval's end (copies, for inference components); None where the
    instances_in_service: int | None  # target does not tell
    instances_running: int | None = None  # inference components: instances for the copies (managed scaling)
    requests: int  # sent in the interval
    errors: int  # of those, failed
    above_slo: int | None  # of those, ok but slower than the SLO (ms/token); None without an SLO
    ttft_ms: Stats  # p50/p90 of the ok requests sent in the interval
    e2e_s: Stats
    ms_per_token: Stats


class ScalingEvent(_Strict):
    """One step of the scaling loop (breach, alarm, scale-out/in, instance InService, blocked)."""

    t_s: float  # simulated seconds from the ramp's start (negative: before it)
    kind: str
    desired: int  # instances after the event (copies, for inference components)
    in_service: int
    detail: str = ""
    instances: int | None = None  # inference components: instances running for the copies


class ScalingPolicyRecord(_Strict):
    """The target-tracking policy the ramp ran against, and the simulated delays (local target)."""

    metric: str
    target_value: float
    min_capacity: int
    max_capacity: int
    scale_out_cooldown_s: float
    scale_in_cooldown_s: float
    period_s: float  # the metric's period
    out_datapoints: int  # datapoints above the target that raise the scale-out alarm
    in_datapoints: int  # datapoints below 90 % of the target that raise the scale-in alarm
    in_period_s: float = 60.0  # the scale-in alarm's period (each datapoint the metric's average over it)
    metric_delay_s: float  # from a period's end to the alarm acting on it
    instance_startup_s: float  # from a scale-out to the new instance InService


class RampRecord(_Strict):
    """`bench --ramp`: load over time against the instances that served it, and how scaling kept up."""

    rates: list[float]  # the steps, requests/s
    step_s: float  # simulated seconds per step
    interval_s: float  # the time series' resolution
    # the emulator's target tracking; what a SageMaker endpoint's control plane showed (copies, instances,
    # scaling activities); or none observed
    scaling: Literal["simulated", "observed", "none"]
    policy: ScalingPolicyRecord | None
    intervals: list[RampInterval]
    events: list[ScalingEvent]
    first_breach_s: float | None  # end of the first metric period above the target
    first_scale_out_s: float | None
    first_in_service_s: float | None  # the first instance added by scaling InService
    breach_to_in_service_s: float | None  # first_in_service_s − first_breach_s
    slo_ms_per_token: float | None
    slo_violated_s: float | None  # start of the first interval over the SLO (p50 ms/token, or an error)
    slo_recovered_s: float | None  # start of the first later interval back under it
    requests_while_scaling: int  # sent while a scale-out was under way (desired > in service)
    failed_while_scaling: int
    above_slo_while_scaling: int | None
    instance_minutes: float  # instances in service × minutes, over the ramp
    cost_usd: float | None  # instance_minutes × the catalog price
    capacity: Literal["instances", "copies"] = "instances"  # what desired/in service count
    # Scale to zero: the first request after the copies reached zero → the first token of the first request that
    # succeeded after it (None: the ramp never found zero copies, or nothing succeeded after).
    cold_start_s: float | None = None


class SweepRecord(_Strict):
    """How the levels were chosen and what measuring them cost."""

    # the list in order, chosen from the prediction (README: Bench), or a ramp's steps back to back
    method: Literal["doubling", "adaptive", "ramp"]
    order: list[str] = []  # the levels in the order measured (`levels` is sorted by load)
    endpoint_minutes: float  # wall time of the levels (simulated on the emulator) × instances
    doubling_endpoint_minutes: float | None = None  # adaptive: estimate for a doubling sweep to its first error
    budget_minutes: float | None = None  # --budget-minutes
    predicted_knee: int | None = None  # adaptive: the concurrency it started from
    predicted_max: int | None = None  # adaptive: the lowest load predicted to reach 95 % of the max throughput
    outcome: str | None = None  # why the sweep ended


class Results(_Strict):
    """The whole run."""

    schema_version: Literal[2] = SCHEMA_VERSION
    run: Run
    levels: list[Level]
    knee: Pick | None
    max_throughput: Pick | None
    slo: Slo | None = None
    cost: Cost
    teardown: Teardown
    gate: GateVerdict | None = None  # None when no thresholds were given
    stopped_reason: str | None = None  # why the sweep stopped before its last planned level
    failure: Failure | None = None  # None when the run went through (its gate may still have failed)
    ramp: RampRecord | None = None  # `bench --ramp` only
    sweep: SweepRecord | None = None  # how levels were chosen, endpoint-minutes spent (None in older files)
    predicted_curve: list[PredictedPoint] = []  # closed loop with a prediction: from 1 past the highest level

    def level(self, where: int | str) -> Level | None:
        """The measured level named `where` (a concurrency such as 16, or a rate such as `4/s`), if reached."""
        key = parse_load(where)
        if key is None:
            return None
        name = load_name(None, key) if isinstance(key, float) else load_name(key, None)
        return next((lv for lv in self.levels if lv.load == name), None)


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
        older = isinstance(version, int) and version < SCHEMA_VERSION
        why = ("written by an older sagellm, before per-request ITL, p95 and request-rate levels"
               if older else "not a version this sagellm knows")
        raise InputError(f"{path}: schema_version {version!r} is {why}; this sagellm reads version "
                         f"{SCHEMA_VERSION} (re-run the bench to get one)")
    try:
        return Results.model_validate(data)
    except ValidationError as exc:
        raise InputError([f"{path}: {_loc(e['loc'])}: {e['msg']}" for e in exc.errors()]) from None

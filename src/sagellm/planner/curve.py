"""The predicted latency–throughput curve of a shape under closed-loop load, its knee and its cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from sagellm.catalog import Price, pricing
from sagellm.engines import Generation, generation
from sagellm.planner import constants as k
from sagellm.planner.shape import Calibration, Payload, Shape
from sagellm.planner.steps import StepModel

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Point:
    """Predicted steady state of one concurrency level (endpoint-wide)."""

    concurrency: int
    ms_per_token: float  # e2e ÷ output tokens, the published definition
    ttft_ms: float
    itl_ms: float
    e2e_s: float
    throughput_tokens_per_s: float
    requests_per_s: float
    running_per_copy: float
    queued_per_copy: float
    rejected: bool  # above the admission limit: TGI answers 429 at once
    within_timeout: bool
    queue_wait_s: float = 0.0  # in the server's queue before the prefill (batching + no free slot)
    own_prefill_s: float = 0.0  # the request's own prefill pass alone
    # From simulated requests (p50 above): None for the steady-state mean, whose every percentile is the mean.
    ms_per_token_p90: float | None = None
    ttft_ms_p90: float | None = None


@dataclass(frozen=True)
class Curve:
    """A predicted sweep plus what people read off it."""

    payload: Payload
    points: tuple[Point, ...]
    kv_capacity_tokens: int  # per copy
    max_sequences_per_copy: int
    usd_per_h: float | None
    knee: Point | None = None
    max_throughput: Point | None = None
    notes: tuple[str, ...] = field(default=())
    generation: str = k.DEFAULT_GENERATION  # the server generation predicted for
    calibration: Calibration | None = None  # the measured correction applied, if any
    region: str = "us-east-1"  # whose price `usd_per_h` is
    price: Price | None = None  # one instance's price there (source and date); None where none is known

    def usd_per_1m_tokens(self, point: Point | None) -> float | None:
        """$ per 1M output tokens at a point: 10^6 ÷ throughput ÷ 3600 × $/h (method.md §1)."""
        return usd_per_1m_tokens(point.throughput_tokens_per_s if point else None, self.usd_per_h)

    def to_dict(self) -> dict:
        """JSON-ready form (the `sagellm plan --json` format)."""
        return {
            "payload": asdict(self.payload),
            "kv_capacity_tokens_per_copy": self.kv_capacity_tokens,
            "max_sequences_per_copy": self.max_sequences_per_copy,
            "usd_per_h": self.usd_per_h,
            "price": {"region": self.region, **asdict(self.price)} if self.price else {"region": self.region},
            "knee": asdict(self.knee) if self.knee else None,
            "max_throughput": asdict(self.max_throughput) if self.max_throughput else None,
            "usd_per_1m_tokens_at_max_throughput": self.usd_per_1m_tokens(self.max_throughput),
            "points": [asdict(p) for p in self.points],
            "step_times": step_times(self.generation, self.calibration),
            "notes": list(self.notes),
        }


def step_times(name: str, calibration: Calibration | None) -> dict:
    """What a prediction's step times rest on: the generation, whose measurements, and any calibration."""
    gen = generation(name)
    return {
        "generation": gen.name,
        "server": gen.label,
        "calibrated_for": generation(gen.constants_from).label,
        "measured_on": k.MEASURED[gen.constants_from][1],
        "extrapolated": not gen.calibrated,
        "calibration": None if calibration is None else {
            "decode_floor": calibration.decode_floor, "decode_per_sequence": calibration.decode_per_sequence,
            "prefill": calibration.prefill, "source": calibration.source},
    }


def step_time_notes(shape: Shape) -> tuple[str, ...]:
    """Say which measurements a prediction's step times rest on (`plan` and `profiles show` print this)."""
    info = step_times(shape.generation, shape.calibration)
    if info["extrapolated"]:
        line = (f"step times calibrated for {info['calibrated_for']} ({info['measured_on']}); for "
                f"{info['server']} they are an extrapolation: `sagellm calibrate RUN` corrects them from a "
                "measured run")
    else:
        line = f"step times calibrated for {info['server']} ({info['measured_on']})"
    notes = [line]
    if shape.calibration is not None:
        notes.append(f"calibrated from measured runs: {shape.calibration.describe()}")
    return tuple(notes)


def _prefill_passes(running: float, payload: Payload, prefill_budget: int,
                    gen: Generation) -> tuple[float, float]:
    """How the router batches prompts in a closed loop: (prefill passes per request lifetime, decode steps
    a prompt waits for its pass).

    A router that admits waiting prompts at every step (ratio 0: TGI 3 with prefill chunking, vLLM) keeps
    a closed loop's streams in the groups they started in: the bench starts them together, the first
    passes take as many prompts as the prefill budget holds, and prompts prefilled together finish
    together (equal outputs) and come back together. So a lifetime sees one pass per group, and never
    more than one per decode step: out × (1 - e^(-running / out)) steps see an arrival when arrivals are
    spread out (traffic whose outputs differ in length tends towards that bound).

    A router with a ratio waits until floor(ratio × running) prompts are queued, or max_waiting_tokens
    decode steps; a prompt that finds the batch empty goes at once, and below a minimum of one every prompt
    goes alone. At a ratio of 1 or more (TGI 1.x: 1.2) a closed loop never queues that many, so requests
    run in waves: equal outputs finish together, the batch empties and the whole wave is prefilled at once,
    unless one pass cannot hold floor(ratio × running) prompts: then it goes in passes of what one holds.
    """
    out = max(1, payload.output_tokens)
    if gen.waiting_served_ratio == 0:
        groups = math.ceil(running * payload.input_tokens / max(1, prefill_budget))
        return max(1.0, min(groups, out * -math.expm1(-running / out))), 0.0
    if gen.waiting_served_ratio * running < 1:
        return max(1.0, running), 0.0
    if gen.waiting_served_ratio >= 1:
        per_pass = max(1, prefill_budget // max(1, payload.input_tokens))
        # A wave that one pass cannot hold goes in passes of what fits (see _router_running_cap).
        return (running / per_pass, 0.0) if math.floor(gen.waiting_served_ratio * running) > per_pass else (1.0, 0.0)
    finishing_per_step = running / out
    interval = min(gen.max_waiting_tokens, math.floor(gen.waiting_served_ratio * running) / finishing_per_step)
    interval = max(1.0, interval)
    return min(running, max(1.0, out / interval)), (interval - 1) / 2


def _router_running_cap(payload: Payload, prefill_budget: int, gen: Generation) -> float:
    """Most sequences a router that waits for prompts (ratio > 0: TGI 1.x) keeps running in a closed loop.

    TGI 1.x's router adds prompts to a running batch of n only when floor(ratio × n) of them fit in one
    prefill pass (`MAX_BATCH_PREFILL_TOKENS`), or once `max_waiting_tokens` decode steps have passed since the
    last pass (huggingface/text-generation-inference v1.1.0 @7a6fad6a: router/src/infer.rs `batching_task`
    sets min_size, router/src/queue.rs `State::next_batch` returns no batch below it). Where a pass holds fewer prompts than
    that (long prompts: one 3,840-token prompt in 4,096 tokens), the batch grows by one pass every
    `max_waiting_tokens` steps while running ÷ output requests finish per step: it levels off at
    output × prompts per pass ÷ max_waiting_tokens, and the rest wait in the queue.
    """
    if gen.waiting_served_ratio == 0:
        return math.inf
    per_pass = max(1, prefill_budget // max(1, payload.input_tokens))
    free = (per_pass + 1) / gen.waiting_served_ratio  # below this batch size a pass always holds enough
    return max(free, max(1, payload.output_tokens) * per_pass / gen.max_waiting_tokens)


def predict_point(shape: Shape, payload: Payload, concurrency: int) -> Point:
    """Closed-loop steady state: `concurrency` clients spread evenly over all copies."""
    steps = StepModel(shape)
    per_copy = concurrency / shape.total_copies
    admit = shape.max_concurrent_requests
    rejected = admit is not None and per_copy > admit
    in_server = min(per_copy, admit) if admit is not None else per_copy
    capacity = max(1, shape.max_sequences(Payload(payload.input_tokens, payload.output_tokens)))
    cap = _router_running_cap(payload, shape.prefill_budget, steps.generation)
    running = max(min(in_server, capacity, cap), 1e-9)
    out = max(1, payload.output_tokens)

    batch = max(1, round(running))
    context = batch * (payload.input_tokens + out / 2)  # mean KV held while decoding
    step = steps.decode_step_s(batch, int(context))
    passes, wait_steps = _prefill_passes(running, payload, shape.prefill_budget, steps.generation)
    group = running / passes
    pass_s = steps.prefill_s(round(group * payload.input_tokens), max(1, round(group)))
    own_prefill = steps.prefill_s(payload.input_tokens)
    # Continuous batching pauses decode for every prefill pass during a request's life (its own too).
    service = out * step + passes * pass_s
    # Prompts wait for the router to group them ...
    batching_wait = wait_steps * step
    cycle = service + batching_wait
    # ... and, beyond the KV capacity, for a free slot (closed loop, Little's law).
    e2e = cycle * in_server / running
    wait = e2e - service
    # The prefill pass yields the first token (TGI streams it at once). A closed-loop request arrives just
    # after the decode step in which its predecessor finished began, so it waits about one step for it,
    # unless nothing else is decoding (one request in the copy).
    ttft = wait + pass_s + step * min(1.0, max(0.0, running - 1))
    itl = (service - pass_s) / max(1, out - 1) if out > 1 else 0.0
    throughput = shape.total_copies * running * out / cycle
    return Point(
        concurrency=concurrency,
        ms_per_token=e2e / out * 1000,
        ttft_ms=ttft * 1000,
        itl_ms=itl * 1000,
        e2e_s=e2e,
        throughput_tokens_per_s=throughput,
        requests_per_s=throughput / out,
        running_per_copy=running,
        queued_per_copy=in_server - running,
        rejected=rejected,
        within_timeout=e2e <= k.INVOCATION_TIMEOUT_S,
        queue_wait_s=wait,
        own_prefill_s=own_prefill,
    )


def knee_index(throughputs: Sequence[float], latencies: Sequence[float],
               usable: Sequence[bool] | None = None) -> int | None:
    """Index of the knee: the highest throughput ÷ latency ("power") among usable points; first on ties.

    One definition for predicted and measured curves (the bench's summary calls this too).
    """
    best: int | None = None
    best_power = -math.inf
    for i, (tput, lat) in enumerate(zip(throughputs, latencies, strict=True)):
        if (usable is not None and not usable[i]) or lat <= 0 or tput <= 0:
            continue
        if tput / lat > best_power:
            best, best_power = i, tput / lat
    return best


def knee_of(points: Sequence[Point]) -> Point | None:
    """The predicted knee: max throughput ÷ ms/token among levels inside the timeout and admitted."""
    i = knee_index([p.throughput_tokens_per_s for p in points], [p.ms_per_token for p in points],
                   [p.within_timeout and not p.rejected for p in points])
    return None if i is None else points[i]


def usd_per_1m_tokens(throughput_tokens_per_s: float | None, usd_per_h: float | None) -> float | None:
    """$ per 1M output tokens: 10^6 ÷ throughput ÷ 3600 × $/h (method.md §1); None without price or tokens."""
    if usd_per_h is None or not throughput_tokens_per_s or throughput_tokens_per_s <= 0:
        return None
    return 1e6 / throughput_tokens_per_s / 3600 * usd_per_h


def predict(shape: Shape, payload: Payload, concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY,
            region: str = "us-east-1") -> Curve:
    """The steady-state mean curve of a shape over a concurrency sweep (what prunes: simulated requests give
    the curve `plan` prints)."""
    return curve_of(shape, payload, tuple(predict_point(shape, payload, c) for c in concurrency), region)


def curve_of(shape: Shape, payload: Payload, points: tuple[Point, ...], region: str = "us-east-1") -> Curve:
    """A curve from its points: the knee, the max-throughput point inside the timeout, the cost and notes."""
    usable = [p for p in points if p.within_timeout and not p.rejected]
    best = max(usable, key=lambda p: p.concurrency, default=None)
    price = shape.instance.price_per_h(region)
    notes = list(step_time_notes(shape))
    if price is None:
        notes.append(cost_unknown(shape.instance.instance_type, region, shape.instance.price(region)))
    if shape.memory_shortfall_gb > 0:
        notes.append(f"weights need {shape.memory_shortfall_gb:.1f} GB more per accelerator than is free")
    return Curve(
        payload=payload,
        points=points,
        kv_capacity_tokens=shape.batch_token_budget,
        max_sequences_per_copy=shape.max_sequences(payload),
        usd_per_h=price * shape.instance_count if price is not None else None,
        knee=knee_of(points),
        max_throughput=best,
        notes=tuple(notes),
        generation=shape.generation,
        calibration=shape.calibration,
        region=region,
        price=shape.instance.price(region),
    )


def cost_unknown(instance_type: str, region: str, price: Price | None) -> str:
    """The note where a region has no known USD price for an instance type, and why (never another region's)."""
    if price is not None:  # CNY in the China regions: not converted without a dated rate
        return f"cost unknown in USD: {instance_type} is {price.label()}, not converted"
    return (f"cost unknown: no {region} price of {instance_type} ({pricing.unknown_why(region)}; give your own with "
            f"{pricing.PRICES_ENV}, docs/regions.md)")


def max_concurrency_in_timeout(shape: Shape, payload: Payload, limit: int = 4096) -> int:
    """Largest power-of-two endpoint concurrency whose requests finish inside the invocation timeout."""
    best, c = 0, 1
    while c <= limit and predict_point(shape, payload, c).within_timeout:
        best, c = c, c * 2
    return best

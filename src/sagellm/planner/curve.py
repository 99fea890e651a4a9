"""The predicted latency–throughput curve of a shape under closed-loop load, its knee and its cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sagellm.planner import constants as k
from sagellm.planner.shape import Payload, Shape
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

    def usd_per_1m_tokens(self, point: Point | None) -> float | None:
        """$ per 1M output tokens at a point: 10^6 ÷ throughput ÷ 3600 × $/h (method.md §1)."""
        if point is None or self.usd_per_h is None or point.throughput_tokens_per_s <= 0:
            return None
        return 1e6 / point.throughput_tokens_per_s / 3600 * self.usd_per_h

    def to_dict(self) -> dict:
        """JSON-ready form (the `sagellm plan --json` format)."""
        return {
            "payload": asdict(self.payload),
            "kv_capacity_tokens_per_copy": self.kv_capacity_tokens,
            "max_sequences_per_copy": self.max_sequences_per_copy,
            "usd_per_h": self.usd_per_h,
            "knee": asdict(self.knee) if self.knee else None,
            "max_throughput": asdict(self.max_throughput) if self.max_throughput else None,
            "usd_per_1m_tokens_at_max_throughput": self.usd_per_1m_tokens(self.max_throughput),
            "points": [asdict(p) for p in self.points],
            "notes": list(self.notes),
        }


def predict_point(shape: Shape, payload: Payload, concurrency: int) -> Point:
    """Closed-loop steady state: `concurrency` clients spread evenly over all copies."""
    steps = StepModel(shape)
    per_copy = concurrency / shape.total_copies
    admit = shape.max_concurrent_requests
    rejected = admit is not None and per_copy > admit
    in_server = min(per_copy, admit) if admit is not None else per_copy
    capacity = max(1, shape.max_sequences(Payload(payload.input_tokens, payload.output_tokens)))
    running = min(in_server, capacity)
    queued = in_server - running

    out = max(1, payload.output_tokens)
    batch = max(1, round(running))
    context = batch * (payload.input_tokens + out / 2)  # mean KV held while decoding
    step = steps.decode_step_s(batch, int(context))
    prefill = steps.prefill_s(payload.input_tokens)
    # Each running slot restarts once per request lifetime, so a request lives through the
    # prefills of every slot (its own included): continuous batching pauses decode for them.
    service = out * step + running * prefill
    # Closed loop beyond capacity: requests wait for a slot; latency grows with the queue (Little).
    e2e = service * in_server / running
    wait = e2e - service
    ttft = wait + prefill + step
    itl = (service - prefill) / max(1, out - 1) if out > 1 else 0.0
    throughput = shape.total_copies * running * out / service
    return Point(
        concurrency=concurrency,
        ms_per_token=e2e / out * 1000,
        ttft_ms=ttft * 1000,
        itl_ms=itl * 1000,
        e2e_s=e2e,
        throughput_tokens_per_s=throughput,
        requests_per_s=throughput / out,
        running_per_copy=running,
        queued_per_copy=queued,
        rejected=rejected,
        within_timeout=e2e <= k.INVOCATION_TIMEOUT_S,
    )


def knee_of(points: tuple[Point, ...] | list[Point]) -> Point | None:
    """The knee: the level with the highest throughput ÷ latency ("power"), among usable levels."""
    usable = [p for p in points if p.within_timeout and not p.rejected]
    return max(usable, key=lambda p: p.throughput_tokens_per_s / p.ms_per_token, default=None)


def predict(shape: Shape, payload: Payload, concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY,
            region: str = "us-east-1") -> Curve:
    """Predict the curve of a shape over a concurrency sweep."""
    points = tuple(predict_point(shape, payload, c) for c in concurrency)
    usable = [p for p in points if p.within_timeout and not p.rejected]
    best = max(usable, key=lambda p: p.concurrency, default=None)
    price = shape.instance.price_per_h(region)
    notes = []
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
    )


def max_concurrency_in_timeout(shape: Shape, payload: Payload, limit: int = 4096) -> int:
    """Largest power-of-two endpoint concurrency whose requests finish inside the invocation timeout."""
    best, c = 0, 1
    while c <= limit and predict_point(shape, payload, c).within_timeout:
        best, c = c, c * 2
    return best

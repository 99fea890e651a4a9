"""Learn from runs: a per model × instance × container correction of the step-time model.

The correction is three multipliers: on the batch-independent floor of a decode step (fixed cost and
weight reads), on what the running sequences add to it (KV reads, per-sequence work, compute), and on a
prefill pass. Every predicted figure a bench measures is linear in them — e2e, TTFT and the time per
generated token (1 ÷ throughput) are sums of decode steps and prefill passes whose number depends only on
the concurrency, the payload and the KV capacity — so the fit is a small weighted least squares on
relative errors, pulled weakly toward 1 so a term the runs cannot see keeps the physics' value.
The planner reads no results files: callers hand it plain numbers (Observation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sagellm.planner.curve import predict_point
from sagellm.planner.shape import Calibration, Payload, Shape

# Bounds on a multiplier: a term off by more than 2× means the model's structure, not its constants, misses
# this shape; a correction that large would mislead other payloads more than it helps (see the accuracy
# script's calibration-transfer table).
MIN_FACTOR, MAX_FACTOR = 0.5, 2.0
# Weight of the pull toward 1, per relative-error row: a 50 % move costs what a 5 % misfit of every row does.
# Runs measure ms/token and throughput (nearly the same information in a closed loop) far better than they
# separate the three terms, so the pull keeps the terms a run barely sees where the physics put them.
PRIOR_WEIGHT = 0.01


_TERMS = (Calibration(1.0, 0.0, 0.0), Calibration(0.0, 1.0, 0.0), Calibration(0.0, 0.0, 1.0))


@dataclass(frozen=True)
class Observation:
    """One measured level in plain numbers: the shape and payload it ran, and what was measured."""

    shape: Shape
    payload: Payload
    concurrency: int
    ms_per_token: float | None = None  # p50 of e2e ÷ output tokens
    ttft_ms: float | None = None  # p50
    throughput_tokens_per_s: float | None = None


@dataclass(frozen=True)
class Fit:
    """A fitted calibration and how well it, and the uncorrected model, describe the runs."""

    calibration: Calibration
    levels: int  # observations used
    error_before: dict[str, float]  # mean absolute relative error (%) per metric, uncorrected
    error_after: dict[str, float]  # ... with the calibration


def _rows(obs: Observation) -> list[tuple[str, list[float]]]:
    """(metric, per-term prediction ÷ measurement): each row should sum, weighted by the factors, to 1."""
    points = [predict_point(replace(obs.shape, calibration=term), obs.payload, obs.concurrency) for term in _TERMS]
    if points[0].rejected:
        return []  # 429s measure the admission limit, not step times
    rows = []
    if obs.ms_per_token:
        rows.append(("ms_per_token", [p.ms_per_token / obs.ms_per_token for p in points]))
    if obs.ttft_ms:
        rows.append(("ttft_ms", [p.ttft_ms / obs.ttft_ms for p in points]))
    if obs.throughput_tokens_per_s:
        # Time per generated token (1 ÷ throughput) is linear in the factors; throughput itself is not.
        rows.append(("throughput", [obs.throughput_tokens_per_s / p.throughput_tokens_per_s for p in points]))
    return rows


def _errors(rows: list[tuple[str, list[float]]], factors: Sequence[float]) -> dict[str, float]:
    """Mean absolute relative error (%) per metric, for throughput on tokens/s (not its inverse)."""
    out: dict[str, list[float]] = {}
    for metric, row in rows:
        ratio = sum(f * r for f, r in zip(factors, row))  # predicted ÷ measured (measured ÷ predicted for thr)
        err = abs(1 / ratio - 1) if metric == "throughput" else abs(ratio - 1)
        out.setdefault(metric, []).append(100 * err)
    return {metric: sum(v) / len(v) for metric, v in out.items()}


def fit_calibration(observations: Sequence[Observation], source: str = "") -> Fit:
    """Fit the three multipliers to measured levels (ValueError when no level can be used)."""
    import numpy as np  # lazy: only `sagellm calibrate` and the accuracy script fit

    rows = [row for obs in observations for row in _rows(obs)]
    if not rows:
        raise ValueError("no level with a measured ms/token, TTFT or throughput that the endpoint admitted")
    used = sum(1 for obs in observations if _rows(obs))
    a = np.array([r for _, r in rows])
    ridge = PRIOR_WEIGHT * len(rows) * np.eye(3)
    lhs = a.T @ a + ridge
    rhs = a.T @ np.ones(len(rows)) + ridge @ np.ones(3)
    factors = np.clip(np.linalg.solve(lhs, rhs), MIN_FACTOR, MAX_FACTOR)
    floor, per_seq, prefill = (round(float(f), 3) for f in factors)
    cal = Calibration(floor, per_seq, prefill, source=source)
    return Fit(cal, used, _errors(rows, (1.0, 1.0, 1.0)),
               _errors(rows, (cal.decode_floor, cal.decode_per_sequence, cal.prefill)))

"""Predictions from simulated requests: a candidate's endpoint run on the emulator's engine on a virtual clock at
a load, its requests summarised as the bench summarises a level (same percentiles, same token counting)."""

from __future__ import annotations

from dataclasses import astuple
from functools import cached_property
from typing import Any, cast

from sagellm.bench.client.records import RequestRecord
from sagellm.bench.client.summary import summarize, tokens_in_window
from sagellm.emulator.serving.simulate import (
    SimulatedClosedLoop,
    SimulatedOpenLoop,
    SimulatedRequest,
    Simulation,
    simulate,
)
from sagellm.planner import Payload, StepModel
from sagellm.profiles import Design
from sagellm.profiles.plan import DeploymentPlan
from sagellm.recommend.slo import Load
from sagellm.results.schema import ErrorKind, LevelSummary

# Measured requests per simulated candidate: p90 rests on the 60 slowest, and a whole catalog takes seconds.
SIMULATED_REQUESTS = 600


def record_of(req: SimulatedRequest, load: Load) -> RequestRecord:
    """A simulated request as the bench records one (times in seconds since the run started). The simulator
    stamps the first and last token; the tokens between are spread evenly (what ITL and throughput read)."""
    ok = req.ok and req.first_token_s is not None
    first = req.first_token_s if req.first_token_s is not None else req.arrived_s
    n = req.output_tokens if ok else 0
    gap = (req.end_s - first) / (n - 1) if n > 1 else 0.0
    return RequestRecord(
        concurrency=load.concurrency, request_rate=load.request_rate, worker=req.user, start_s=req.arrived_s,
        ok=ok, e2e_s=req.end_s - req.arrived_s, output_tokens=n, input_tokens=req.input_tokens,
        input_tokens_by="server", ttft_s=first - req.arrived_s if ok else None, token_gaps_s=[gap] * (n - 1),
        status=req.status, error_kind=cast(ErrorKind, req.error), warmup=not req.measured,
        late_s=0.0 if load.request_rate is not None else None)


def summary_of(sim: Simulation, load: Load) -> LevelSummary:
    """The measured requests' summary; throughput counts every request's tokens inside the window (the
    warm-up's and the tail's too: they are the load the window saw)."""
    records = [record_of(r, load) for r in sim.requests]
    start, end = sim.window_start_s, sim.window_end_s
    summary = summarize(records, window_start_s=start, window_end_s=end)
    tokens = tokens_in_window([r for r in records if r.ok], start, end)  # it reads no warm-up flag: all of them
    ok = [r for r in records if r.ok and not r.warmup]
    mean_tokens = sum(r.output_tokens for r in ok) / len(ok) if ok else 0
    return summary.model_copy(update={
        "output_tokens": tokens, "throughput_tokens_per_s": tokens / (end - start),
        "requests_per_s": tokens / mean_tokens / (end - start) if mean_tokens else 0.0})


class Simulator:
    """Simulated summaries of one design at any instance count and load, shared with designs whose copies
    run alike (same accelerator, split, server and limits: ml.g5.xlarge and ml.g5.4xlarge at TP 1)."""

    def __init__(self, design: Design, payload: Payload, cache: dict[tuple[Any, ...], LevelSummary],
                 requests: int = SIMULATED_REQUESTS):
        self.design = design
        self.payload = payload
        self.requests = requests
        self.cache = cache

    @cached_property
    def _plan(self) -> DeploymentPlan:
        """The design's deployment plan (looked up once, and only for a design that gets simulated)."""
        return self.design.plan()

    def summary(self, count: int, load: Load) -> LevelSummary:
        """The summary of `count` instances at `load`."""
        key = (*self._alike(), count, astuple(self.payload), load.concurrency, load.request_rate, self.requests)
        if key not in self.cache:
            plan = self._plan.model_copy(update={"initial_instance_count": count})
            steps = StepModel(self.design.shape(count))
            at: SimulatedOpenLoop | SimulatedClosedLoop = (
                SimulatedOpenLoop(load.request_rate) if load.request_rate is not None
                else SimulatedClosedLoop(load.concurrency or 1))
            sim = simulate(plan, self.payload.input_tokens, self.payload.output_tokens, at,
                           requests=self.requests, steps=steps)
            self.cache[key] = summary_of(sim, load)
        return self.cache[key]

    def _alike(self) -> tuple[Any, ...]:
        """What the simulation depends on, less the instance type's name, host and price."""
        i, d = self.design.instance, self._plan.primary
        return (i.accelerator, i.device_mem_mib, i.bw_per_accel_gbps, i.tflops_per_accel, i.interconnect,
                d.model_id, d.tp_degree, d.quantization, d.copy_count, tuple(sorted(d.environment.items())),
                self._plan.container, self._plan.container_version, self.design.generation, self.design.calibration)

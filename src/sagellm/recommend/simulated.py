"""Predictions from simulated requests for the search: a candidate's endpoint at any instance count and load
(bench.predicted runs and summarises them), shared by designs whose copies run alike."""

from __future__ import annotations

from dataclasses import astuple
from functools import cached_property
from typing import Any

from sagellm.bench.predicted import SIMULATED_REQUESTS, simulated_level
from sagellm.planner import Payload, StepModel
from sagellm.profiles import Design
from sagellm.profiles.plan import DeploymentPlan
from sagellm.recommend.slo import Load
from sagellm.results.schema import LevelSummary


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
            self.cache[key] = simulated_level(plan, StepModel(self.design.shape(count)), self.payload,
                                              concurrency=load.concurrency if load.request_rate is None else None,
                                              request_rate=load.request_rate, requests=self.requests)
        return self.cache[key]

    def _alike(self) -> tuple[Any, ...]:
        """What the simulation depends on, less the instance type's name, host and price."""
        i, d = self.design.instance, self._plan.primary
        return (i.accelerator, i.device_mem_mib, i.bw_per_accel_gbps, i.tflops_per_accel, i.interconnect,
                d.model_id, d.tp_degree, d.quantization, d.copy_count, tuple(sorted(d.environment.items())),
                self._plan.container, self._plan.container_version, self.design.generation, self.design.calibration)

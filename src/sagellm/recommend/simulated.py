"""Predictions from simulated requests for the search: a candidate's endpoint at any instance count and load
(results.simulated runs and summarises them), shared by designs whose copies run alike and by every search of the
process at that load."""

from __future__ import annotations

from dataclasses import astuple
from functools import cached_property
from typing import Any

from sagellm.planner import Payload, StepModel
from sagellm.planner.simulate import run_inputs
from sagellm.profiles import Design
from sagellm.profiles.plan import DeploymentPlan, served
from sagellm.recommend.slo import Load
from sagellm.results.schema import LevelSummary, RequestSlo
from sagellm.results.simulated import SIMULATED_REQUESTS, simulated_level

# Simulated summaries by everything a simulation reads, for the whole process: a simulation is deterministic
# (one seed), so searches that differ only in the SLO (the study's targets, a test's sweep of limits, peak
# sizing) run each one once. Emptied when full: a whole-catalog search fills a few hundred.
SUMMARIES: dict[tuple[Any, ...], LevelSummary] = {}
MAX_SUMMARIES = 10_000


class Simulator:
    """Simulated summaries of one design at any instance count and load, shared with designs whose copies
    run alike (same step times, limits, scheduling and copies: ml.g5.xlarge and ml.g5.4xlarge at TP 1; LMI and
    vLLM where they read the same limits)."""

    def __init__(self, design: Design, payload: Payload, requests: int = SIMULATED_REQUESTS,
                 slo: RequestSlo | None = None):
        self.design = design
        self.payload = payload
        self.requests = requests
        self.slo = slo  # per-request SLOs: each summary's attainment and goodput

    @cached_property
    def _plan(self) -> DeploymentPlan:
        """The design's deployment plan (looked up once, and only for a design that gets simulated)."""
        return self.design.plan()

    def summary(self, count: int, load: Load) -> LevelSummary:
        """The summary of `count` instances at `load`."""
        plan = self._plan.model_copy(update={"initial_instance_count": count})
        steps = StepModel(self.design.shape(count))
        # Keyed by what the run reads (step times' inputs, limits, scheduling, copies), so engines that schedule
        # alike and instance types with the same accelerators share it.
        key = (run_inputs(served(plan, steps)), astuple(self.payload), load.concurrency, load.request_rate,
               self.requests, self.slo)
        if key not in SUMMARIES:
            if len(SUMMARIES) >= MAX_SUMMARIES:
                SUMMARIES.clear()
            SUMMARIES[key] = simulated_level(plan, steps, self.payload,
                                             concurrency=load.concurrency if load.request_rate is None else None,
                                             request_rate=load.request_rate, requests=self.requests, slo=self.slo)
        return SUMMARIES[key]

"""The bench: deploy (or reach) a target, measure levels of load, report, gate, tear down.

Run one from Python by describing it with the specs (bench/specs.py) and calling `run`; the outcome holds
the results and the exit status `sagellm bench` would end with::

    from pathlib import Path

    from sagellm import bench

    outcome = bench.run(bench.Bench(
        serving=bench.ServingSpec(profile="max-throughput", model="llama2-7b", instance="ml.g5.2xlarge"),
        target=bench.Local(time_scale=0.05),  # the emulator, 20× faster than real time
        load=bench.Closed(concurrency=(1, 4), requests_per_level=8),
        output=bench.Output(Path("run-1"))))
    print(outcome.exit_status.name, outcome.results.max_throughput)

Sub-packages, each importing only those below it: `sweep` and `targets` → `load` → `client`; above them the
specs, then the planning and the runner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagellm.bench.runner import BenchOutcome, run
    from sagellm.bench.specs import (
        AwsBenchmarkJob,
        Bench,
        Closed,
        Endpoint,
        Gate,
        Http,
        LoadSpec,
        Local,
        Open,
        Output,
        Ramp,
        RampIfAutoscaled,
        SageMaker,
        ServingSpec,
        Sweep,
        TargetSpec,
        Workers,
        WorkloadOptions,
    )

__all__ = ["AwsBenchmarkJob", "Bench", "BenchOutcome", "Closed", "Endpoint", "Gate", "Http", "LoadSpec", "Local",
           "Open", "Output", "Ramp", "RampIfAutoscaled", "SageMaker", "ServingSpec", "Sweep", "TargetSpec", "Workers",
           "WorkloadOptions", "run"]

# Each name is imported from its module on first use (PEP 562): `sagellm plan` needs only the workload and
# bench.predicted's adapters, and the runner brings the load tools, aiohttp and boto3 (a third of `plan`'s time).
_MODULE_OF = {"BenchOutcome": "runner", "run": "runner"} | {name: "specs" for name in __all__ if name not in
                                                          ("BenchOutcome", "run")}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)

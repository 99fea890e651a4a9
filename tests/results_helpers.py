"""Synthetic results for the tests of what is rendered, gated and exported from results.json."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagellm.results.picks import make_results
from sagellm.results.schema import (
    ERROR_KINDS,
    Failure,
    Level,
    Predicted,
    Results,
    Run,
    Stats,
    Teardown,
    write_results,
)

RUN = Run(profile="max-throughput", model="meta-llama/Llama-2-7b-hf", instance_type="ml.g5.2xlarge",
          instance_count=1, target="local", emulated=True, time_scale=0.05, region="us-east-1",
          environment={"MAX_CONCURRENT_REQUESTS": "64"},
          container="huggingface-pytorch-tgi-inference:2.4.0-tgi3.0.1-gpu-py311-cu124-ubuntu22.04",
          input_tokens=256, output_tokens=256, concurrency=[1, 2, 4, 8, 16, 32], tool_version="0.1.0",
          started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC), ended_at=datetime(2025, 1, 2, 3, 6, 35, tzinfo=UTC),
          command="sagellm bench --profile max-throughput --model meta-llama/Llama-2-7b-hf")


def level(c: int, tput: float, p50: float, *, p90: float | None = None, overloaded: int = 0,
          ok: int = 100) -> Level:
    """A measured level: `ok` successes, `overloaded` 429s, p50 ms/token as given (p90 1.2 × p50 unless given)."""
    errors = dict.fromkeys(ERROR_KINDS, 0) | {"overloaded": overloaded}
    latency = Stats(p50=p50, p90=p90 or p50 * 1.2, p99=p50 * 1.5, mean=p50) if ok else Stats()
    return Level(
        concurrency=c, requests=ok + overloaded, ok=ok, errors=errors, error_rate=overloaded / (ok + overloaded),
        retries=0, window_s=10, output_tokens=int(tput * 10), throughput_tokens_per_s=tput,
        requests_per_s=tput / 256, latency_ms_per_token=latency, ttft_ms=Stats(p50=50, p90=60, p99=70, mean=55),
        itl_ms=Stats(p50=9, p90=10, p99=12, mean=9.5), e2e_s=Stats(p50=3, p90=4, p99=5, mean=3),
        predicted=Predicted(ms_per_token=p50 * 0.9, ttft_ms=45, itl_ms=8, e2e_s=2.8,
                            throughput_tokens_per_s=tput * 1.1, requests_per_s=1, rejected=False,
                            within_timeout=True))


LEVELS = [level(1, 100, 10), level(2, 190, 10.5), level(4, 300, 14), level(8, 360, 25),
          level(16, 380, 50, overloaded=20)]


def results(levels: list[Level] | None = None, *, run: Run = RUN, failure: Failure | None = None,
            stopped_reason: str | None = "error rate 16.7% > 5% at concurrency 16 (20 overloaded)") -> Results:
    """A finished sweep that stopped at 16 of its planned 1…32 (no gate yet)."""
    r = make_results(run, LEVELS if levels is None else levels, usd_per_h=1.21, slo_ms_per_token=20,
                     teardown=Teardown(status="destroyed"), stopped_reason=stopped_reason)
    return r.model_copy(update={"failure": failure})


def write_run(folder: Path, r: Results | None = None, **run_changes: Any) -> Path:
    """results.json of a synthetic run in `folder` (its run fields changed as given); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    r = r or results()
    if run_changes:
        r = r.model_copy(update={"run": r.run.model_copy(update=run_changes)})
    path = folder / "results.json"
    write_results(path, r)
    return path


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file as plain data."""
    return json.loads(path.read_text(encoding="utf-8"))

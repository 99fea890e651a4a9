"""`plan --trace`: a replayed trace's arrivals and lengths on the simulated endpoint (planner/traces.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sagellm.bench.client.trace import TraceOptions
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.planner import Payload, StepModel
from sagellm.planner.simulate import simulate
from sagellm.planner.traces import SimulatedTrace, prefix_segments
from sagellm.profiles import design_for
from sagellm.profiles.plan import served
from sagellm.results.simulated import simulated_trace

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SAGELLM = Path(sys.executable).with_name("sagellm")
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


def replay_of(name: str, **options: object) -> Workload:
    return Workload(WorkloadOptions(trace=TraceOptions(TRACES / name, **options)), Payload(1, 1))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["mooncake.jsonl", "azure_conv.csv"])
def test_a_simulated_trace_sends_each_request_at_its_arrival_with_its_lengths(name: str) -> None:
    w = replay_of(name, speed=2)
    assert w.trace is not None
    rows, arrivals = w.trace.rows, w.trace.arrivals_s
    d = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", payload=Payload(*w.longest()))

    sim = simulate(served(d.plan(), StepModel(d.shape())), 1, 1, SimulatedTrace(arrivals), sizes=w.sizes)

    assert [r.arrived_s for r in sim.requests] == list(arrivals)
    assert [r.input_tokens for r in sim.requests] == [row.input_tokens for row in rows]
    assert all(r.measured and not r.warmup and r.ok for r in sim.requests)
    assert [r.output_tokens for r in sim.requests] == [row.output_tokens for row in rows]
    assert (sim.window_start_s, sim.window_end_s) == (0.0, arrivals[-1])


def test_a_trace_level_summarises_every_request_named_by_its_mean_rate() -> None:
    w = replay_of("mooncake.jsonl")
    assert w.trace is not None
    d = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", payload=Payload(*w.longest()))
    sim, level = simulated_trace(d.plan(), StepModel(d.shape()), w.payload(), w.trace.arrivals_s, w.sizes,
                                 w.trace.rate, warmup=2)
    assert sum(r.warmup for r in sim.requests) == 2 and len(sim.requests) == len(w.trace.rows)
    assert level.requests == len(w.trace.rows) - 2 and level.request_rate == w.trace.rate


def test_faster_replay_queues_more_so_first_tokens_wait_longer() -> None:
    d = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", payload=Payload(2048, 64))

    def ttft_p90(speed: float) -> float:
        w = replay_of("mooncake.jsonl", speed=speed)
        assert w.trace is not None
        _, level = simulated_trace(d.plan(), StepModel(d.shape()), w.payload(), w.trace.arrivals_s, w.sizes,
                                   w.trace.rate)
        return level.ttft_ms.p90 or 0.0

    assert ttft_p90(50) > ttft_p90(1)


def test_a_mooncake_request_becomes_one_prefix_segment_per_block_keyed_by_its_hash_id() -> None:
    assert prefix_segments((7, 9, 11), 1100) == ((("mooncake", 7), 512), (("mooncake", 9), 512),
                                                  (("mooncake", 11), 76))
    assert prefix_segments((), 300) == ()


def test_arrivals_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="in time order"):
        SimulatedTrace((0.0, 2.0, 1.0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mooncake.jsonl", "azure_conv.csv"])
def test_plan_trace_json_reports_the_replay_and_its_level(tmp_path: Path, name: str) -> None:
    result = subprocess.run([str(SAGELLM), "plan", "--profile", "max-throughput", "--model", LLAMA2_7B,
                             "--instance", "ml.g5.2xlarge", "--trace", str(TRACES / name), "--trace-requests", "12",
                             "--trace-speed", "2", "--json"], cwd=tmp_path, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    w = replay_of(name, speed=2, requests=12)
    assert w.trace is not None
    assert out["trace"] == w.trace.describe().model_dump(mode="json")
    assert out["level"]["requests"] == 12 and out["level"]["request_rate"] == pytest.approx(w.trace.rate)


@pytest.mark.slow
def test_plan_with_a_bad_trace_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 0}\n')
    result = subprocess.run([str(SAGELLM), "plan", "--profile", "max-throughput", "--model", LLAMA2_7B,
                             "--trace", str(bad)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sagellm: error: {bad}:1: output_length: 0 must be")


def test_a_mooncake_trace_hands_the_simulation_one_segment_per_block_and_an_azure_one_none() -> None:
    from sagellm.bench.client.trace import trace_prefixes

    mooncake, azure = replay_of("mooncake.jsonl").trace, replay_of("azure_conv.csv").trace
    assert mooncake is not None and azure is not None
    segments = trace_prefixes(mooncake)
    assert [[key for key, _ in s] for s in segments] == [[("mooncake", h) for h in r.hash_ids] for r in mooncake.rows]
    assert [sum(n for _, n in s) for s in segments] == [r.input_tokens for r in mooncake.rows]  # ids cover each
    assert trace_prefixes(azure) == ((),) * len(azure.rows)


def test_a_mooncake_traces_shared_blocks_are_served_from_a_vllm_copys_prefix_cache() -> None:
    # A request whose leading hash ids an earlier request's prompt held finds those blocks in the copy's cache.
    w = replay_of("mooncake.jsonl")
    assert w.trace is not None
    rows = w.trace.rows
    d = design_for("max-throughput", LLAMA2_7B, "ml.g5.2xlarge", payload=Payload(*w.longest()), engine="vllm")
    prefixes = tuple(prefix_segments(row.hash_ids, row.input_tokens) for row in rows)
    sim = simulate(served(d.plan(), StepModel(d.shape())), 1, 1, SimulatedTrace(w.trace.arrivals_s, prefixes),
                   sizes=w.sizes)
    seen: set[int] = set()
    for row, req in zip(rows, sim.requests, strict=True):
        shared = next((i for i, h in enumerate(row.hash_ids) if h not in seen), len(row.hash_ids))
        if shared == 0:
            assert req.cached_tokens == 0  # no block of it was sent before
        seen.update(row.hash_ids)
    assert any(req.cached_tokens >= 512 for req in sim.requests)  # the fixture's requests share whole blocks

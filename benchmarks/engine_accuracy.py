"""Replay published vLLM and SGLang serving measurements through sagellm's simulation and print how far off it is.

    python benchmarks/engine_accuracy.py                  # errors: borrowed TGI 1.x constants vs each engine's own
    python benchmarks/engine_accuracy.py --fit            # fit VLLM_1 and SGLANG_1 outside the hold-out, print them
    python benchmarks/engine_accuracy.py --loso           # leave-one-source-out: fit on the other sources, score one;
                                                          # then fit outside the hold-out (held_out) and score it
    python benchmarks/engine_accuracy.py --breakdown      # MAPE and bias by GPU, engine, size, precision, TP, load, source
    python benchmarks/engine_accuracy.py --json out.json  # ... and the figures as JSON

Each usable row of benchmarks/data/engines.csv (one published load level; engines.md says what each column means)
is replayed on the simulator of its engine (planner/batching.py: vLLM V1's token-budgeted mixed passes,
SGLang's prefill-first alternation) for one copy of `tp` GPUs of its type, with the limits its server ran with: the
ones the source states, else the engine's defaults by GPU memory (research/schedulers.md tables 1.2 and 2.1), and a
KV pool sized as each engine sizes it. The load is the client's: `num_requests` prompts through a semaphore of N
(closed rows), or all N at once (bursts). Lengths are the row's (means where the source gives means: every request
of a level gets the mean), except where the source's tool drew each request's lengths: ShareGPT levels draw theirs
from ShareGPT's own (data/sharegpt_lengths.csv), sglang.bench_serving's random levels as that tool draws them (its
seeded uniform draws up to the set lengths), each scaled to the level's means (`--lengths`). Each level is compared on its own statistic: median (p50)
TTFT, median TPOT (per request (e2e − TTFT)/(n − 1), vLLM's definition: the first token excluded), output tokens ÷
level duration, and where the source prints it the median ITL (every token gap pooled). Bursts of requests that
generate a handful of tokens measure the server's request handling, not its passes: they are scored apart and never
fitted on (FRONT_END_MAX_OUTPUT).

Speed: a pass's place in the schedule does not depend on how long passes take (bursts and zero-think closed loops
send at pass ends), so each row is simulated ONCE with every pass costing one unit of time, recording what each pass
computes; any set of constants then costs those passes in numpy (`pass_seconds` mirrors planner.StepModel term for
term, checked against it on every run) and the request times follow by cumulative sums. The traces are cached.

Fits start from TODAY_START (TGI_1's form with the facts of CUDA-graph engines from NVIDIA AIConfigurator 0.12.0's
measured tables: all-reduce latency, each GPU's GEMM rates, fused-MoE efficiency and floor; no paged-attention floor)
and never see the rows `held_out` sets aside; `priors()` is that start with every fitted constant at its prior,
nothing fitted, scored beside the fits.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import pickle
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from sagellm.catalog import Instance, Model, find_instance, find_model
from sagellm.catalog.hub import model_from_config
from sagellm.engines import ENGINES, Limits, sglang, vllm
from sagellm.planner import Shape, StepModel
from sagellm.planner import constants as planner_constants
from sagellm.planner.constants import StepConstants
from sagellm.planner.simulate import Served, SimulatedPromptSet, simulate
from sagellm.planner.steps import (
    matmul_flops_per_accel,
    measured_allreduce,
    routed_active_b,
    weight_only_slowdown,
    weight_read_efficiency,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_CSV = HERE / "data" / "engines.csv"
# Models the catalog lacks, with their config.json facts and where those were read (see the file's `source`).
MODELS_CSV = HERE / "data" / "engine_models.csv"
HUB_CONFIGS = ROOT / "tests" / "catalog" / "hub_configs"  # sourced config.json copies (SOURCES.md there)
BORROWED = "tgi-1"  # the constants vLLM, LMI and SGLang used before this study
ENGINES_FITTED = ("vllm", "sglang")

# One copy of `tp` GPUs of the row's type: the catalog instance type that carries it.
INSTANCE_OF_GPU = {
    "L4": "ml.g6.12xlarge", "A10G": "ml.g5.12xlarge", "A100-40GB": "ml.p4d.24xlarge",
    "A100-80GB": "ml.p4de.24xlarge", "A100-SXM-80GB": "ml.p4de.24xlarge",
    # gpustack's Qwen3-14B A100 page does not say which A100; its other A100 pages are the 80 GB SXM box.
    "A100-SXM (memory not stated)": "ml.p4de.24xlarge",
    "H100-SXM": "ml.p5.48xlarge", "H200-SXM": "ml.p5e.48xlarge", "B200": "ml.p6-b200.48xlarge",
}
# Models whose rows are left out: an architecture sagellm's Model cannot describe, or no sourced config.
UNDESCRIBABLE = {
    "deepseek-ai/DeepSeek-V3.2": "DeepSeek sparse attention (V3.2's indexer attends to 2,048 chosen tokens): "
                                 "sagellm's step model has no sparse attention",
    "openai/gpt-oss": "gpt-oss: attention sinks, 128-token sliding window on every other layer, MXFP4 experts (no "
                      "mxfp4 quantization, no per-layer window in sagellm's Model)",
    "nvidia/Llama-3_3-Nemotron-Super": "Nemotron Super 49B: NAS-pruned layers of differing widths, some without "
                                       "attention (DeciLM): not one layer shape",
    "google/gemma-2-2b-it": "not in the catalog, and no sourced copy of its config.json was found",
}
# The checkpoint a served id has the architecture of (quantized and instruct variants of a base in the catalog;
# Qwen2.5 Instruct differs from its base only in max_position_embeddings, which the step model does not read).
BASE_MODEL = {
    "Qwen/Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct-AWQ": "Qwen/Qwen2.5-7B",
    "meta-llama/Llama-3.2-3B-Instruct": "meta-llama/Llama-3.2-3B",
    "cognitivecomputations/Qwen3-30B-A3B-AWQ": "Qwen/Qwen3-30B-A3B",
    # R1 is trained from DeepSeek-V3-Base: the same architecture (MLA, 256 routed experts, FP8 weights).
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-V3",
}
# Prompt tokens where the source does not publish them (the level's TTFT then rests on this assumption):
# ree2raz's prompts are chat one-liners under a chat template; varad's short_chat prompts average 8 words.
ASSUMED_INPUT_TOKENS = {"ree2raz-inference-bench": 48, "varad-more-a10g": 48}
# ree2raz's long regime sends ~1.8k-token documents from a small set, which the prefix cache (on by default in both
# engines) serves after their first use (its c=1 TTFT is within 10 % of the short regime's): replayed as short prompts,
# so the replay under-counts those rows' KV reads. sagellm does not model prefix caching.

# --- the engines' memory and limit defaults (research/schedulers.md; the data's versions: vLLM 0.8.5-0.20.1,
# SGLang 0.4.6-0.5.6 and a 2026 nightly) ---
VLLM_GPU_MEMORY_UTILIZATION = 0.9  # the default of every vLLM version in the data (0.30.0 made it 0.92)


def _mib(instance_type: str) -> float:
    return float(find_instance(instance_type).device_mem_mib)


def vllm_defaults(instance_type: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of `vllm serve` by device memory (schedulers.md table 1.2)."""
    gib, name = _mib(instance_type) / 1024, find_instance(instance_type).accelerator
    if gib >= 160:
        return 16384, 1024
    if gib >= 70 and "a100" not in name.lower():
        return 8192, 1024
    return 2048, 256


def sglang_defaults(instance_type: str, tp: int) -> tuple[int, float]:
    """(chunked_prefill_size, mem_fraction_static) of SGLang by GPU memory (schedulers.md table 2.1): the product's
    own rule (engines/sglang.py)."""
    mib = _mib(instance_type)
    return sglang.default_chunked_prefill(mib), sglang.mem_fraction_static(mib, tp)


@dataclass(frozen=True)
class Case:
    """One published level, as the simulation replays it."""

    index: int  # data row in engines.csv (0-based)
    source: str
    engine: str
    gpu: str
    instance_type: str
    model_id: str
    quantization: str
    tp: int
    input_tokens: int
    output_tokens: int
    prompts: int
    concurrency: int | None  # None: a burst (all prompts at once)
    step_tokens: int  # max_num_batched_tokens (vLLM) / chunked_prefill_size (SGLang)
    max_running: int | None
    kv_tokens: int
    ttft_ms: float | None
    tpot_ms: float | None
    throughput: float | None
    itl_ms: float | None = None  # median inter-token latency (every token gap pooled), where the source prints it
    assumed_input: bool = False
    eager: bool = False  # CUDA graphs off (--enforce-eager, --disable-cuda-graph): not the engine's default
    sharegpt: bool = False  # prompts and output lengths drawn from ShareGPT (the row's lengths are their means)
    # sglang.bench_serving's random dataset: (--random-input-len, --random-output-len, --random-range-ratio, --seed),
    # from which each request's lengths were drawn (the row's lengths are their means)
    sglang_random: tuple[int, int, float, int] | None = None
    model: Model | None = field(default=None, compare=False, repr=False)

    @property
    def front_end_bound(self) -> bool:
        """A burst whose requests generate next to nothing: the server's per-request handling, not its passes."""
        return self.concurrency is None and self.output_tokens <= FRONT_END_MAX_OUTPUT

    @property
    def kinds(self) -> dict[str, str]:
        """What the error is broken down by: architecture, size, precision, TP, load."""
        m = self.model
        assert m is not None
        arch = "MLA" if m.compressed_kv else "MoE" if m.n_experts > 1 else "dense"
        size = "<5B" if m.active_b < 5 else "5-10B" if m.active_b < 10 else "10-20B" if m.active_b < 20 else ">=20B"
        if self.concurrency is not None:
            load = "closed c=1" if self.concurrency == 1 else "closed c<=8" if self.concurrency <= 8 else "closed c>8"
        elif self.output_tokens <= FRONT_END_MAX_OUTPUT:
            load = "burst, 4 out"
        elif self.input_tokens >= 1000:
            load = "burst, >=2k in"
        else:
            load = "burst, ShareGPT"
        return {"arch": arch, "active": size, "quant": self.quantization, "tp": f"tp{self.tp}", "load": load}

    @property
    def label(self) -> str:
        q = "" if self.quantization == "none" else f" {self.quantization}"
        load = f"c={self.concurrency}" if self.concurrency is not None else f"burst {self.prompts}"
        return (f"{self.source[:6]} {self.engine:6} {self.gpu[:9]:9} {self.model_id.split('/')[-1][:24]}{q} tp{self.tp} "
                f"{self.input_tokens}/{self.output_tokens} {load}")

    def shape(self) -> Shape:
        """One copy as the planner sees it, under the engine's generation (whose constants it names)."""
        assert self.model is not None
        return Shape(self.model, find_instance(self.instance_type), self.tp, quantization=self.quantization,
                     generation=ENGINES[self.engine].generation(None).name)


def _study_models() -> dict[str, Model]:
    out = {}
    with MODELS_CSV.open() as f:
        for r in csv.DictReader(f):
            out[r["hf_id"]] = Model(
                hf_id=r["hf_id"], params_b=float(r["params_b"]), active_params_b=float(r["active_params_b"]),
                n_layers=int(r["n_layers"]), hidden_size=int(r["hidden_size"]), n_heads=int(r["n_heads"]),
                n_kv_heads=int(r["n_kv_heads"]), head_dim=int(r["head_dim"]), max_context=int(r["max_context"]),
                n_experts=int(r["n_experts"]), experts_per_token=int(r["experts_per_token"]), source=r["source"])
    return out


def model_of(served: str) -> Model:
    """The architecture of a served checkpoint: the catalog, this study's table, or a sourced config.json copy."""
    base = BASE_MODEL.get(served, re.sub(r"-(FP8|AWQ)$", "", served))
    study = _study_models()
    if base in study:
        return study[base]
    config = HUB_CONFIGS / f"{base.replace('/', '__')}.json"
    if config.exists():
        return model_from_config(base, json.loads(config.read_text()))
    return find_model(base)


def _quantization(dtype: str) -> str:
    d = dtype.lower()
    if d.startswith("awq"):
        return "awq"
    if d.startswith("fp8"):
        return "fp8"
    if d.startswith(("bf16", "fp16")):
        return "none"
    raise ValueError(f"dtype {dtype!r}")


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def _flag(notes: str, flag: str) -> float | None:
    m = re.search(rf"{flag}[ =]([0-9.]+)", notes)
    return float(m.group(1)) if m else None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# sglang.bench_serving's random dataset (`--dataset-name random`, and `random-ids`, which draws the same lengths) at
# the versions sgl-cookbook ran (sglang 0.5.6, 0.5.8, 0.5.9 wheels from PyPI, python/sglang/bench_serving.py:
# sample_random_requests, compute_random_lens from 0.5.8): `np.random.seed(args.seed)` (default 1), then each
# request's input length uniform in [max(int(L·r), 1), L] and its output length in [int(L·r), L] (0.5.8 on: at
# least 1), `--random-range-ratio` r defaulting to 0.0: every length from 1 (or 0) to the set one. Its
# `--random-input-len` and `--random-output-len` default to 1024.
SGLANG_RANDOM_DEFAULTS = {"--random-input-len": 1024.0, "--random-output-len": 1024.0, "--random-range-ratio": 0.0,
                          "--seed": 1.0}
_SGLANG_RANDOM = re.compile(r"sglang\.bench_serving\b[^;]*?--dataset-name random(?:-ids)?(?![\w-])[^;]*")


def sglang_random_args(notes: str) -> tuple[int, int, float, int] | None:
    """(input length, output length, range ratio, seed) of a row measured with sglang.bench_serving's random dataset,
    from the client command in its notes (each flag the command leaves out at the tool's default); None otherwise."""
    m = _SGLANG_RANDOM.search(notes)
    if m is None:
        return None
    flag = {f: _flag(m.group(0), f) for f in SGLANG_RANDOM_DEFAULTS}
    value = {f: default if flag[f] is None else flag[f] for f, default in SGLANG_RANDOM_DEFAULTS.items()}
    return (int(value["--random-input-len"]), int(value["--random-output-len"]), float(value["--random-range-ratio"]),
            int(value["--seed"]))


def load_cases(path: Path = DEFAULT_CSV) -> tuple[list[Case], list[tuple[int, str, str]]]:
    """The replayable rows, and (row, what, why) for those left out."""
    cases, skipped = [], []
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for i, r in enumerate(rows):
        what = f"{r['source_id']} {r['engine']} {r['gpu']} {r['model']}"
        reason = next((why for prefix, why in UNDESCRIBABLE.items() if r["model"].startswith(prefix)), None)
        if reason is None and r["gpu"] not in INSTANCE_OF_GPU:
            reason = f"no catalog instance for GPU {r['gpu']!r}"
        if reason is not None:
            skipped.append((i, what, reason))
            continue
        model = model_of(r["model"])
        instance_type = INSTANCE_OF_GPU[r["gpu"]]
        tp = int(r["tp"])
        quant = _quantization(r["dtype"])
        shape = Shape(model, find_instance(instance_type), tp, quantization=quant)
        assumed = not r["input_tokens"]
        n_in = ASSUMED_INPUT_TOKENS[r["source_id"]] if assumed else round(float(r["input_tokens"]))
        n_out = round(float(r["output_tokens"]))
        notes = r["notes"]
        per_gpu_gb = _mib(instance_type) * 2**20 / 1e9
        weights_gb = shape.weight_gb_per_gpu
        context = int(_flag(notes, "--max-model-len") or _flag(notes, "--context-length") or model.max_context)
        if r["engine"] == "vllm":
            step, running = vllm_defaults(instance_type)
            util = _flag(notes, "--gpu-memory-utilization") or VLLM_GPU_MEMORY_UTILIZATION
            free_gb = util * per_gpu_gb - weights_gb - vllm.OTHER_GB  # what its profile run keeps (the product's estimate)
        else:
            step, fraction = sglang_defaults(instance_type, tp)
            fraction = _flag(notes, "--mem-fraction-static") or fraction
            free_gb = fraction * per_gpu_gb - weights_gb
            running = None
        kv = shape.kv_tokens_in(free_gb)  # the planner's rule: replicated KV heads and MLA's latent on every GPU
        if kv < n_in + n_out:
            skipped.append((i, what, (f"the weights ({weights_gb:.0f} GB per GPU by sagellm's count) leave no KV "
                                      f"cache on {tp} × {r['gpu']}: the published configuration cannot be replayed")))
            continue
        if r["engine"] == "sglang":  # max_running_requests sized from the pool (fields/schedule.py)
            running = min(max(int(kv / context * 512), 2048), 4096, kv // 2)
        running = _int(r["max_num_seqs"]) or running
        step = _int(r["max_num_batched_tokens"]) or _int(str(_flag(notes, "--chunked-prefill-size") or "")) or step
        closed = r["load_kind"] == "closed"
        eager = r["cuda_graph"].startswith("off")
        cases.append(Case(
            index=i, source=r["source_id"], engine=r["engine"], gpu=r["gpu"], instance_type=instance_type,
            model_id=r["model"], quantization=quant, tp=tp, input_tokens=n_in, output_tokens=n_out,
            prompts=_int(r["num_requests"]) or int(r["load"]), concurrency=int(r["load"]) if closed else None,
            step_tokens=step, max_running=running, kv_tokens=kv, ttft_ms=_float(r["ttft_ms"]),
            tpot_ms=_float(r["tpot_ms"]), throughput=_float(r["output_throughput_tok_s"]),
            itl_ms=_float(r["itl_ms"]) if r["itl_stat"].startswith(("median", "p50")) else None, assumed_input=assumed,
            eager=eager, sharegpt=r["dataset"].lower().startswith("sharegpt"), sglang_random=sglang_random_args(notes),
            model=model))
    return cases, skipped


# --- traces: each row simulated once on unit-time passes ------------------------------------------------------------

@dataclass(frozen=True)
class _UnitPasses(StepModel):
    """Every pass takes one unit of time; what it computes is recorded (prompt tokens, prompts, decodes, context, the
    prompt chunks' query-key pairs with earlier tokens of their prompts)."""

    passes: list[tuple[int, int, int, int, int]] = field(default_factory=list, compare=False)

    @cached_property
    def k(self) -> StepConstants:
        """The engine's constants without the front end's latency, which would put sends between pass ends
        (`predict` adds it)."""
        return replace(StepModel(self.shape).k, request_latency_s=0.0)

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        self.passes.append((0, 0, batch, context_tokens, 0))
        return 1.0

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        self.passes.append((tokens, sequences, 0, 0, prior_pairs))
        return 1.0

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        self.passes.append((prompt_tokens, prompts, batch, context_tokens, prior_pairs))
        return 1.0


@dataclass
class Trace:
    """The passes of one replayed level and, per request, the pass it arrived after, its first and last token's."""

    passes: np.ndarray  # (n, 5): prompt tokens, prompts, decoding sequences, their context tokens, prior pairs
    arrived: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray


def limits_of(case: Case) -> Limits:
    engine = ENGINES[case.engine]
    total = max(case.model.max_context if case.model else 0, case.input_tokens + case.output_tokens + 1)
    return Limits(max_input_tokens=total - 1, max_total_tokens=total, max_batch_prefill_tokens=case.step_tokens,
                  max_batch_total_tokens=case.kv_tokens, max_concurrent_requests=None, max_batch_size=case.max_running,
                  kv_block_tokens=engine.kv_block_tokens)


# How levels whose requests differ in length are replayed: "drawn" gives each request the lengths the source's tool drew
# for it: ShareGPT levels from ShareGPT's own (data/sharegpt_lengths.csv, made by sharegpt_lengths.py), sglang.bench_serving's
# random levels as that tool draws them (uniform up to the set length), each scaled to the level's stated means;
# "sharegpt" draws ShareGPT levels only (the replay of round 5); "means" gives every request the means (before
# round 5). vLLM's `vllm bench serve --dataset-name random` draws from [L·(1−r), L·(1+r)] with `--random-range-ratio`
# r defaulting to 0.0 (vllm/benchmarks/datasets.py@0056b87: RandomDataset.get_sampling_params; the flag's help in
# `vllm bench serve`): every request at the set length, so its rows (none sets r) are replayed at their means in
# every mode. `--lengths` sets it.
LENGTHS = "drawn"
SHAREGPT_LENGTHS = HERE / "data" / "sharegpt_lengths.csv"


def sharegpt_lengths(case: Case) -> list[tuple[int, int]]:
    """(input, output) tokens per request of a ShareGPT level: pairs drawn from ShareGPT as `vllm bench serve` samples
    it (seeded by the row, so a trace is the same on every run), each side scaled so the level's totals are the
    published ones."""
    with SHAREGPT_LENGTHS.open() as f:
        pairs = np.array([(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)], dtype=float)
    drawn = pairs[np.random.default_rng(case.index).integers(0, len(pairs), case.prompts)]
    drawn *= np.array([case.input_tokens, case.output_tokens]) / drawn.mean(axis=0)
    return [(max(1, round(a)), max(2, round(b))) for a, b in drawn]


def sglang_random_draws(case: Case) -> np.ndarray:
    """(input, output) tokens per request exactly as sglang.bench_serving's random dataset draws them for the row's
    flags and request count (its own seeded legacy NumPy stream, request i the i-th draw), before any scaling."""
    assert case.sglang_random is not None
    input_len, output_len, ratio, seed = case.sglang_random
    rng = np.random.RandomState(seed)  # what np.random.seed(args.seed) sets: the draws are the tool's own
    inputs = rng.randint(max(int(input_len * ratio), 1), input_len + 1, size=case.prompts)
    outputs = rng.randint(max(int(output_len * ratio), 1), output_len + 1, size=case.prompts)  # 0.5.8's floor of 1
    return np.stack([inputs, outputs], axis=1)


def sglang_random_lengths(case: Case) -> list[tuple[int, int]]:
    """(input, output) tokens per request of an sglang.bench_serving random level: the tool's draws, each side scaled
    so the level's means are the published ones (the draws give them within a token; tokenisers shift them)."""
    drawn = sglang_random_draws(case).astype(float)
    drawn *= np.array([case.input_tokens, case.output_tokens]) / drawn.mean(axis=0)
    return [(max(1, round(a)), max(1, round(b))) for a, b in drawn]


def request_lengths(case: Case) -> list[tuple[int, int]] | None:
    """Each request's (input, output) tokens as the replay gives them (LENGTHS), or None: every request at the means."""
    if LENGTHS in ("drawn", "sharegpt") and case.sharegpt:
        return sharegpt_lengths(case)
    if LENGTHS == "drawn" and case.sglang_random is not None:
        return sglang_random_lengths(case)
    return None


def trace(case: Case) -> Trace:
    """Simulate the level once on unit-time passes."""
    steps = _UnitPasses(case.shape())
    spread = request_lengths(case)
    sim = simulate(Served(steps, limits_of(case), ENGINES[case.engine].scheduling, 1), case.input_tokens,
                   case.output_tokens, SimulatedPromptSet(case.prompts, case.concurrency), timeout_s=None,
                   every_pass=True, sizes=None if spread is None else spread.__getitem__)
    reqs = sim.measured
    times = np.array([[r.arrived_s, r.first_token_s, r.last_token_s] for r in reqs], dtype=float)
    assert np.all(times == np.round(times)), "a pass started between pass ends: the schedule depends on timing"
    return Trace(np.array(steps.passes, dtype=float).reshape(-1, 5), times[:, 0].astype(int), times[:, 1].astype(int),
                 times[:, 2].astype(int), np.array([r.output_tokens for r in reqs]))


def _fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    for p in (path, MODELS_CSV, SHAREGPT_LENGTHS, ROOT / "src/sagellm/planner/batching.py",
              ROOT / "src/sagellm/planner/simulate.py"):
        h.update(p.read_bytes())
    # This script up to where passes are costed: what a trace depends on (costing and scoring may change freely).
    h.update(Path(__file__).read_text().partition(_COSTING_MARK)[0].encode())
    h.update(LENGTHS.encode())
    return h.hexdigest()[:16]


def traces(cases: list[Case], path: Path = DEFAULT_CSV, cache: bool = True) -> dict[int, Trace]:
    """Every case's trace, from the cache where the data and the scheduler code are unchanged."""
    where = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sagellm" / \
        f"engine-traces-{_fingerprint(path)}.pkl"
    if cache and where.exists():  # plain arrays (a pickled class would tie the file to how the script was run)
        held = {i: Trace(*arrays) for i, arrays in pickle.loads(where.read_bytes()).items()}
        if all(c.index in held for c in cases):
            return held
    out = {c.index: trace(c) for c in cases}
    if cache:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(pickle.dumps({i: (t.passes, t.arrived, t.first, t.last, t.tokens) for i, t in out.items()}))
    return out


_COSTING_MARK = "# --- costing the passes"


# --- costing the passes with a set of constants (planner.StepModel, vectorised) --------------------------------------

@dataclass
class Physics:
    """What a case's passes cost, independent of the fitted constants (from StepModel's own terms)."""

    layers: int
    hidden: int
    heads: int
    head_dim: int
    kv_heads: int  # per accelerator
    kv_head_bytes: float  # one cached head's K and V (MLA: its latent) per token over all layers
    tp: int
    interconnect: str
    per_layer: int  # all-reduces per layer
    bw: float  # aggregate HBM bytes/s
    bw_accel: float
    instance: Instance  # its matmul rate depends on the constants (measured GEMM rates or the datasheet's)
    quantization: str
    params: float  # parameters each row multiplies through
    routed: float  # ... of which routed experts'
    quantized: bool
    moe: bool
    w_prompt: np.ndarray  # weight bytes read by each pass's prompt rows
    w_decode: np.ndarray  # ... by its decode rows
    w_one: float
    # Requests each client slot sends one after another (1 for a burst): each pays the front end's latency
    # (request_latency_s) before the engine sees it, which the unit-time trace leaves out.
    cycles: float = 1.0


def physics(case: Case, passes: np.ndarray) -> Physics:
    sm = StepModel(case.shape())
    m, inst = case.model, sm.shape.instance
    assert m is not None and sm.generation.moe_dense_max_tokens == 0

    def weights(tokens: np.ndarray) -> np.ndarray:
        total = m.weight_bytes(case.quantization)
        if m.n_experts <= 1:
            return np.full(tokens.shape, total)
        active = total * m.active_b / m.params_b
        share = m.experts_per_token / m.n_experts
        touched = 1 - (1 - share) ** np.maximum(1, tokens)
        return active + (total - active) * (touched - share) / (1 - share)

    return Physics(layers=m.n_layers, hidden=m.hidden_size, heads=m.n_heads, head_dim=m.head_dim,
                   kv_heads=math.ceil(m.cached_kv_heads / case.tp),
                   kv_head_bytes=m.kv_bytes_per_token(2.0) / m.cached_kv_heads, tp=case.tp, interconnect=inst.interconnect,
                   per_layer=1 if m.parallel_attention else 2, bw=inst.bw_per_accel_gbps * 1e9 * case.tp,
                   bw_accel=inst.bw_per_accel_gbps * 1e9, instance=inst, quantization=case.quantization,
                   params=m.active_b * 1e9, routed=routed_active_b(m) * 1e9,
                   quantized=case.quantization in ("gptq", "awq"), moe=m.n_experts > 1,
                   w_prompt=weights(passes[:, 0]), w_decode=weights(passes[:, 2]),
                   w_one=float(weights(np.array([1.0]))[0]),
                   cycles=1.0 if case.concurrency is None else case.prompts / min(case.concurrency, case.prompts))


def pass_seconds(ph: Physics, passes: np.ndarray, k: StepConstants) -> np.ndarray:
    """StepModel.mixed_step_s of every pass (prefill_s where no sequence decodes, decode_step_s where no prompt)."""
    t, s, b, c, prior = passes.T
    params = ph.params + ph.routed * (k.moe_routing_skew / k.moe_compute_efficiency - 1)
    eff = weight_read_efficiency(ph.quantization, k)
    flops_total = (matmul_flops_per_accel(ph.instance, ph.quantization, k) * ph.tp
                   / weight_only_slowdown(ph.instance, ph.quantization, k))
    log_tp = math.log2(ph.tp) if ph.tp > 1 else 0.0
    measured = measured_allreduce(ph.instance, ph.tp, k) if ph.tp > 1 else None
    if ph.tp <= 1:
        ar_fixed, ar_per_row = 0.0, 0.0
    elif measured is not None:
        ar_fixed = ph.per_layer * ph.layers * measured[0]
        ar_per_row = ph.per_layer * ph.layers * ph.hidden * 2 * 2 * (ph.tp - 1) / ph.tp / measured[1]
    elif ph.interconnect == "pcie":
        ar_fixed = ph.per_layer * ph.layers * k.pcie_allreduce_latency_s * log_tp
        ar_per_row = ph.per_layer * ph.layers * ph.hidden * 2 * 2 * (ph.tp - 1) / (k.pcie_host_bw_gbps * 1e9)
    else:
        ar_fixed = ph.per_layer * ph.layers * k.nvlink_allreduce_latency_s * log_tp + k.nvlink_pass_overhead_s * log_tp
        ar_per_row = ph.per_layer * ph.layers * ph.hidden * 2 * 2 * (ph.tp - 1) / ph.tp / (k.nvlink_bw_gbps * 1e9)
    triton = k.quant_sharded_layer_overhead_s * ph.layers if ph.quantized and ph.tp > 1 else 0.0
    per_layer = (k.layer_overhead_s + (k.moe_layer_overhead_s if ph.moe else 0.0)) * ph.layers
    fixed = k.step_overhead_s + triton + per_layer + ar_fixed
    floor = fixed + ph.w_one / (ph.bw * eff)
    # decode
    bb = np.maximum(b, 1)
    matmul = np.maximum(ph.w_decode / (ph.bw * eff), b * 2 * params / (flops_total * k.decode_mfu))
    per_token_head = ph.kv_head_bytes
    kv = (c / bb * k.kv_latency_blocks + c * ph.kv_heads) * per_token_head / (ph.bw_accel * k.kv_bandwidth_efficiency)
    decode = fixed + matmul + kv + b * k.seq_overhead_s + b * ar_per_row
    # prefill
    ss = np.maximum(s, 1)
    flops = t * 2 * params + (2 * t * t / ss + 4 * prior) * ph.heads * ph.head_dim * ph.layers
    mfu = k.prefill_mfu / (k.quant_prefill_slowdown if ph.quantized else 1.0)
    prefill = (fixed + np.maximum(flops / (flops_total * mfu), ph.w_prompt / (ph.bw * eff)) + t * ar_per_row
               + k.prompt_overhead_s * ss)
    return np.where(t > 0, np.where(b > 0, prefill + decode - floor, prefill), decode)


def check_mirror(case: Case, tr: Trace, sample: int = 40) -> None:
    """pass_seconds agrees with planner.StepModel (the simulator's step model) on a sample of the case's passes."""
    sm = StepModel(case.shape())
    picks = tr.passes[np.linspace(0, len(tr.passes) - 1, min(sample, len(tr.passes))).astype(int)]
    ours = pass_seconds(physics(case, picks), picks, sm.k)
    theirs = np.array([sm.mixed_step_s(*map(int, p)) for p in picks])
    assert np.allclose(ours, theirs, rtol=1e-9), (case.label, ours[:3], theirs[:3])


def predict(tr: Trace, ph: Physics, k: StepConstants) -> tuple[float, float, float, float]:
    """(median TTFT ms, median TPOT ms, output tokens/s, median ITL ms) of the level under constants `k`.

    The front end's latency per request (k.request_latency_s) is added outside the passes: to every TTFT, and to the
    level's duration once per request a client slot sends in turn. (The simulator delays each request's hand-over to
    the engine instead, which shifts a closed loop's schedule a little; the trace keeps the schedule without it.)"""
    seconds = pass_seconds(ph, tr.passes, k)
    clock = np.concatenate([[0.0], np.cumsum(seconds)])
    front_end = k.request_latency_s
    ttft = clock[tr.first] - clock[tr.arrived] + front_end
    many = tr.tokens > 1
    tpot = (clock[tr.last[many]] - clock[tr.first[many]]) / (tr.tokens[many] - 1)
    duration = clock[tr.last.max()] - clock[tr.arrived.min()] + front_end * ph.cycles
    return (float(np.median(ttft)) * 1000, float(np.median(tpot)) * 1000 if many.any() else math.nan,
            float(tr.tokens.sum() / duration), _median_itl(tr, clock) * 1000)


def _median_itl(tr: Trace, clock: np.ndarray) -> float:
    """Median of every token gap pooled over requests (`vllm bench serve`'s ITL): each pass with decodes gives each of
    its sequences a token; those that also decoded in the previous decoding pass waited since its end (SGLang's prefill
    passes between them included), the others (first token in a prefill pass just before) since the pass began."""
    decoding = np.flatnonzero(tr.passes[:, 2] > 0)
    if len(decoding) == 0:
        return math.nan
    b = tr.passes[decoding, 2]
    ended = np.bincount(tr.last[tr.tokens > 1] - 1, minlength=len(tr.passes))[decoding]  # last tokens at that pass
    previous = np.concatenate([[-1], decoding[:-1]])
    still = np.concatenate([[0.0], (b - ended)[:-1]])  # sequences of the previous decoding pass still running
    old = np.minimum(b, np.maximum(still, 0))
    gap_old = clock[decoding + 1] - clock[previous + 1]
    gap_new = clock[decoding + 1] - clock[decoding]
    gaps = np.concatenate([gap_old, gap_new])
    weights = np.concatenate([old, b - old])
    order = np.argsort(gaps)
    cumulative = np.cumsum(weights[order])
    return float(gaps[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


# --- scoring and fitting --------------------------------------------------------------------------------------------

METRICS = ("ttft", "tpot", "thr", "itl")  # scored; "itl" only on rows that publish a median ITL
ALL = ("ttft", "tpot", "thr")  # what "all" averages (as in every earlier run of the study)
# The decode figure the fit's residuals use: "tpot" (median TPOT, every row), or "itl" (median ITL where the source
# prints it, TPOT elsewhere: closed loops at fixed lengths, where the two agree). Median ITL is the decode step itself;
# a burst's median TPOT also carries how its ShareGPT lengths spread, which the replay (every request at the means)
# does not have.
DECODE_FIT = "tpot"
# Bursts of requests that generate this few tokens measure the server's handling of requests (HTTP, chat template,
# tokenising, output set-up, one request at a time in the API process), not its passes: gpustack's 1,000-prompt
# 128-in/4-out levels take 18-33 s on one H100 under vLLM 0.11 where their 128k prompt tokens need 4-8 s of matmuls,
# and the same page's SGLang does the level ~3x faster (docs/studies.md). The step model has no term for it, so these
# rows are scored apart as "front-end bound: not predicted" and never fitted on.
FRONT_END_MAX_OUTPUT = 8


@dataclass
class Study:
    """The cases with their traces and physics, ready to be scored under any constants."""

    cases: list[Case]  # the rows fitted and scored: the engines' default configuration (CUDA graphs on)
    eager: list[Case]  # rows run without CUDA graphs: scored apart, never fitted on
    skipped: list[tuple[int, str, str]]
    trace: dict[int, Trace]
    physics: dict[int, Physics]
    front_end: list[Case] = field(default_factory=list)  # front-end-bound bursts: scored apart, never fitted on

    def measured(self, c: Case) -> tuple[float | None, float | None, float | None, float | None]:
        return c.ttft_ms, c.tpot_ms, c.throughput, c.itl_ms

    def score(self, constants: dict[str, StepConstants], cases: list[Case] | None = None) -> list[dict]:
        """Per case: measured, predicted and the absolute percentage errors, with each engine's constants."""
        out = []
        for c in cases if cases is not None else self.cases:
            pred = predict(self.trace[c.index], self.physics[c.index], constants[c.engine])
            row = {"row": c.index, "label": c.label, "engine": c.engine, "gpu": c.gpu, "source": c.source, **c.kinds}
            for name, meas, p in zip(METRICS, self.measured(c), pred):
                row[name], row[f"pred_{name}"] = meas, p
                row[f"ape_{name}"] = None if meas is None or not math.isfinite(p) else abs(p - meas) / meas * 100
            out.append(row)
        return out

    def residuals(self, engine_constants: StepConstants, cases: list[Case]) -> list[float]:
        res = []
        for c in cases:
            ttft, tpot, thr, itl = predict(self.trace[c.index], self.physics[c.index], engine_constants)
            decode = (itl, c.itl_ms) if DECODE_FIT == "itl" and c.itl_ms is not None else (tpot, c.tpot_ms)
            for p, meas in ((ttft, c.ttft_ms), decode, (thr, c.throughput)):
                if meas is not None and math.isfinite(p) and p > 0:
                    res.append(math.log(p / meas))
        return res


def build(path: Path = DEFAULT_CSV, cache: bool = True, select: Callable[[Case], bool] | None = None) -> Study:
    """Load, trace and cost the replayable rows (those `select` keeps), checking the numpy step model on each."""
    cases, skipped = load_cases(path)
    if select is not None:
        cases = [c for c in cases if select(c)]
    tr = traces(cases, path, cache)
    ph = {c.index: physics(c, tr[c.index].passes) for c in cases}
    for c in cases:
        check_mirror(c, tr[c.index])
    return Study([c for c in cases if not c.eager and not c.front_end_bound], [c for c in cases if c.eager], skipped,
                 tr, ph, [c for c in cases if c.front_end_bound and not c.eager])


def table(scored: list[dict]) -> dict:
    """Mean absolute percentage error of each metric over scored rows."""
    out: dict = {"n": len(scored)}
    for m in METRICS:
        vals = [s[f"ape_{m}"] for s in scored if s[f"ape_{m}"] is not None]
        out[m] = sum(vals) / len(vals) if vals else None
    vals = [s[f"ape_{m}"] for s in scored for m in ALL if s[f"ape_{m}"] is not None]
    out["all"] = sum(vals) / len(vals) if vals else None
    return out


def bias(scored: list[dict]) -> dict:
    """Geometric mean of predicted ÷ measured of each metric over scored rows (1: unbiased)."""
    out: dict = {"n": len(scored)}
    for m in METRICS:
        logs = [math.log(s[f"pred_{m}"] / s[m]) for s in scored if s[f"ape_{m}"] is not None and s[f"pred_{m}"] > 0]
        out[m] = math.exp(sum(logs) / len(logs)) if logs else None
    return out


def breakdown(scored: list[dict]) -> dict[str, tuple[dict, dict]]:
    """(MAPE, bias) per value of every dimension the error may come from."""
    out = {"overall": (table(scored), bias(scored))}
    for key in ("gpu", "engine", "arch", "active", "quant", "tp", "load", "source"):
        for v in sorted({s[key] for s in scored}):
            rows = [s for s in scored if s[key] == v]
            out[f"{key}={v}"] = (table(rows), bias(rows))
    return out


def render_breakdown(title: str, scored: list[dict], out=sys.stdout) -> None:
    print(f"\n{title}", file=out)
    print(f"{'group':28} {'n':>4}   " + "  ".join(f"{m:>16}" for m in METRICS), file=out)
    for name, (t, b) in breakdown(scored).items():
        cells = "  ".join("       -        " if t[m] is None else f"{t[m]:5.1f}% (×{b[m]:4.2f})" for m in METRICS)
        print(f"{name:28} {t['n']:4d}   {cells}", file=out)


def groups(scored: list[dict]) -> dict[str, dict]:
    out = {"overall": table(scored)}
    for key in ("engine", "gpu", "source"):
        for v in sorted({s[key] for s in scored}):
            out[f"{key}={v}"] = table([s for s in scored if s[key] == v])
    for e in sorted({s["engine"] for s in scored}):
        for key in ("gpu", "source"):
            for v in sorted({s[key] for s in scored if s["engine"] == e}):
                out[f"{e} {key}={v}"] = table([s for s in scored if s["engine"] == e and s[key] == v])
    return out


# What a fit for today's engines starts from: TGI_1's form with the facts of CUDA-graph engines measured elsewhere.
# All-reduces: vLLM's custom all-reduce under CUDA graphs takes 4.2-4.9 us for small messages at TP 2-8 on H100/H200
# (4.8-5.7 on A100), hardly growing with TP (AIConfigurator 0.12.0, aiconfigurator-core
# systems/data/{h100_sxm,h200_sxm,a100_sxm}/comm/vllm/*/custom_allreduce_perf.parquet, backend vllm_graph), where
# TGI_1 (no CUDA graphs) pays 35 us per doubling per all-reduce and 3.7 ms per pass per doubling: 2.2 us per doubling
# (4.4 at TP 4), nothing per pass. Matmuls at each GPU's measured GEMM rate (planner.constants.GEMM_RATE).
# Routed experts: vLLM 0.24.0's fused-MoE kernels take 2.9-3.6x their matmul roofline at 4,096-16,384 tokens for
# Qwen3-235B's experts at TP 4-8 (fp8_block and bf16), 1.8-2.1x for Qwen3-30B's at TP 1 (AIConfigurator 0.12.0,
# systems/data/h100_sxm/moe/vllm/0.24.0/moe_perf.parquet, balanced routing): a third of the dense rate.
# A fused-MoE layer at 1-16 tokens takes a floor of 29-38 us plus its experts' weights read at 0.80-0.87 of peak
# (the same tables, h100_sxm and h200_sxm moe/vllm/0.24.0, bf16 and fp8_block Triton kernels, balanced routing, TP 1-8,
# least squares on relative error over their rows of <= 16 tokens; docs/studies.md): ~25 us per MoE layer beyond the
# ~5 us a dense MLP's two small GEMMs take.
# Decode attention: TGI 1.x's paged attention ran one thread block per head and sequence, so a lone long sequence left
# most SMs idle (TGI_1's kv_latency_blocks, 71 heads' worth of its KV per step); vLLM V1's FlashAttention splits a
# decode's KV over up to 16 blocks per head under CUDA graphs (vllm/v1/attention/backends/flash_attn.py@0084b783:
# get_scheduler_metadata(num_splits=...), _DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH = 16), FlashInfer's decode likewise
# (SGLang's default): the floor is gone, the KV is read at the bandwidth.
TODAY_START = replace(planner_constants.TGI_1, nvlink_allreduce_latency_s=2.2e-6, nvlink_pass_overhead_s=0.0,
                      measured_gemm_rates=True, moe_compute_efficiency=0.33, moe_layer_overhead_s=25e-6,
                      kv_latency_blocks=0.0)

# Constants the fit may move: bounds and the physics prior each starts from and is pulled toward (never a previous
# fit). Bandwidth: AIConfigurator's bf16 GEMMs of m <= 8 read weights at 0.69 (A100), 0.81 (H100), 0.74 (H200) of peak
# (gemm_perf.parquet as above); FP8 ones at 0.78 of bf16's (H100 per-tensor FP8, 2111 vs 2701 GB/s). CUDA graphs put
# a pass's fixed cost near 2 ms, spent in the layers' kernels (50 us a layer for a 40-layer model), not on the host.
# MFUs are of the measured GEMM rate. The TP/NVLink terms are TODAY_START's.
FIT: dict[str, tuple[float, float, float]] = {
    "bandwidth_efficiency": (0.5, 0.98, 0.8),
    "step_overhead_s": (0.0, 0.02, 0.0),
    "layer_overhead_s": (0.0, 0.0002, 0.00005),
    "seq_overhead_s": (0.0, 0.003, 0.00003),
    "kv_bandwidth_efficiency": (0.05, 1.0, 0.5),
    "decode_mfu": (0.1, 1.0, 0.5),  # bursts of hundreds of sequences make decode compute-bound
    "prefill_mfu": (0.1, 1.0, 0.7),
    "fp8_bandwidth_efficiency": (0.3, 1.0, 0.78),
    "quant_bandwidth_efficiency": (0.2, 1.0, 0.6),
    "quant_prefill_slowdown": (1.0, 5.0, 2.0),
}
# The previous round's form (docs/studies.md, "Physics terms for today's engines"): the whole fixed cost per pass
# (2 ms prior), no per-layer or per-MoE-layer term. `--form step` reruns it.
STEP_FORM_START = replace(TODAY_START, moe_layer_overhead_s=0.0, kv_latency_blocks=planner_constants.TGI_1.kv_latency_blocks)
STEP_FORM_FIT = {**{n: v for n, v in FIT.items() if n != "layer_overhead_s"}, "step_overhead_s": (0.0, 0.02, 0.002)}
START = TODAY_START  # what fit() starts from (main() switches it with --form)
PRIOR_WEIGHT = 1.0  # as planner_accuracy.py (per bound's width, against log errors)
# What each constant is pulled toward: "physics" (FIT's priors, as TGI_1 was fitted) or "borrowed" (TGI_1's values:
# the constants the engines use now, moved only where these data say so). docs/studies.md gives both LOSO results.
PRIOR = "physics"


def fit(study: Study, cases: list[Case], start: StepConstants | None = None,
        prior_weight: float | None = None) -> StepConstants:
    """Least squares on the log errors of TTFT, TPOT (or ITL: DECODE_FIT) and throughput, pulled toward the priors."""
    from scipy.optimize import least_squares

    start = START if start is None else start
    prior_weight = PRIOR_WEIGHT if prior_weight is None else prior_weight

    names = list(FIT)
    lo, hi, x0 = ([FIT[n][i] for n in names] for i in range(3))
    if PRIOR == "borrowed":
        x0 = [min(max(getattr(start, n), a), b) for n, a, b in zip(names, lo, hi)]
    width = [b - a for a, b in zip(lo, hi)]

    def fun(x: np.ndarray) -> list[float]:
        k = replace(start, **{n: float(v) for n, v in zip(names, x)})
        return study.residuals(k, cases) + [prior_weight * (xi - si) / w for xi, si, w in zip(x, x0, width)]

    sol = least_squares(fun, x0, bounds=(lo, hi), x_scale=width, diff_step=1e-3)
    return replace(start, **{n: float(v) for n, v in zip(names, sol.x)})


# A hold-out set aside before any fit of this study's sets (chosen once, by hash, never re-drawn): every row of the
# (GPU, served model) pairs whose SHA-256 is 0 mod 5, whatever the engine or load, so that repeats of one level
# cannot sit on both sides. Fits (and the leave-one-source-out) see only the other rows.
def held_out(case: Case) -> bool:
    """Whether the row is in the study's own hold-out."""
    return int(hashlib.sha256(f"{case.gpu}|{case.model_id}".encode()).hexdigest(), 16) % 5 == 0


def priors() -> dict[str, StepConstants]:
    """The physics priors as they stand, nothing fitted: START with every FIT constant at its prior (one set for both
    engines)."""
    k = replace(START, **{n: v[2] for n, v in FIT.items()})
    return {e: k for e in ENGINES_FITTED}


def ready() -> dict[str, StepConstants]:
    """The set made ready for vLLM, LMI and SGLang (planner.constants.VLLM_1: round 4's priors with the measured
    all-reduces, weight-only kernels, MoE routing skew and the front end's latency), one for both engines."""
    return {e: planner_constants.VLLM_1 for e in ENGINES_FITTED}


# Closed loops of at most this many in flight: their TTFT is one prompt's pass and the front end, so what the passes
# leave of it is the front end's latency (request_latency_s).
FRONT_END_FIT_MAX_CONCURRENCY = 4


def fit_request_latency(study: Study, cases: list[Case], k: StepConstants) -> float:
    """The front end's latency as the median of measured minus predicted TTFT (without it) over the closed loops of
    `cases` with few in flight; the only constant of `ready()` taken from the rows."""
    bare = replace(k, request_latency_s=0.0)
    gaps = [c.ttft_ms - predict(study.trace[c.index], study.physics[c.index], bare)[0] for c in cases
            if c.concurrency is not None and c.concurrency <= FRONT_END_FIT_MAX_CONCURRENCY and c.ttft_ms is not None]
    return max(0.0, float(np.median(gaps))) / 1000 if gaps else 0.0


def borrowed() -> dict[str, StepConstants]:
    return {e: planner_constants.MEASURED[BORROWED][0] for e in ENGINES_FITTED}


def shipped() -> dict[str, StepConstants]:
    """Each engine's constants as its generation names them now."""
    return {e: planner_constants.MEASURED[ENGINES[e].generation(None).constants_from][0] for e in ENGINES_FITTED}


def fit_engines(study: Study, cases: list[Case] | None = None) -> dict[str, StepConstants]:
    """One set per engine, each fitted on that engine's rows (of `cases`; by default every row outside the
    hold-out)."""
    cases = cases if cases is not None else [c for c in study.cases if not held_out(c)]
    return {e: fit(study, [c for c in cases if c.engine == e]) for e in ENGINES_FITTED}


def leave_one_source_out(study: Study) -> dict[str, dict]:
    """Fit each engine's set on every source but one, score the held-out source's rows with it; beside it, the
    borrowed constants on the same rows."""
    out: dict[str, dict] = {}
    pooled_fit: list[dict] = []
    pooled_borrowed: list[dict] = []
    pooled_priors: list[dict] = []
    pooled_ready: list[dict] = []
    usable = [c for c in study.cases if not held_out(c)]
    for source in sorted({c.source for c in usable}):
        train = [c for c in usable if c.source != source]
        held = [c for c in usable if c.source == source]
        fitted = fit_engines(study, train)
        after, before = study.score(fitted, held), study.score(borrowed(), held)
        unfitted = study.score(priors(), held)
        # The ready set with its one constant from the rows (the front end's latency) taken from the other sources.
        k = planner_constants.VLLM_1
        latency = fit_request_latency(study, train, k)
        ready_held = study.score({e: replace(k, request_latency_s=latency) for e in ENGINES_FITTED}, held)
        out[f"source={source}"] = {"borrowed": table(before), "fitted": table(after), "priors": table(unfitted),
                                   "ready": table(ready_held), "request_latency_s": latency,
                                   "constants": {e: {n: getattr(k, n) for n in FIT} for e, k in fitted.items()}}
        pooled_fit += after
        pooled_borrowed += before
        pooled_priors += unfitted
        pooled_ready += ready_held
    out["pooled held-out rows"] = {"borrowed": table(pooled_borrowed), "fitted": table(pooled_fit),
                                   "priors": table(pooled_priors), "ready": table(pooled_ready)}
    for e in ENGINES_FITTED:
        out[f"pooled {e}"] = {"borrowed": table([s for s in pooled_borrowed if s["engine"] == e]),
                              "fitted": table([s for s in pooled_fit if s["engine"] == e]),
                              "priors": table([s for s in pooled_priors if s["engine"] == e]),
                              "ready": table([s for s in pooled_ready if s["engine"] == e])}
    return out


def hold_out_check(study: Study) -> dict[str, dict]:
    """Fit each engine's set on every row outside the hold-out, score the hold-out with it and with the borrowed set."""
    fitted = fit_engines(study, [c for c in study.cases if not held_out(c)])
    held = [c for c in study.cases if held_out(c)]
    after, before, unfitted = study.score(fitted, held), study.score(borrowed(), held), study.score(priors(), held)
    out = {"hold-out": {"borrowed": table(before), "fitted": table(after), "priors": table(unfitted)}}
    for e in ENGINES_FITTED:
        out[f"hold-out {e}"] = {"borrowed": table([s for s in before if s["engine"] == e]),
                                "fitted": table([s for s in after if s["engine"] == e]),
                                "priors": table([s for s in unfitted if s["engine"] == e])}
    out["constants"] = {e: {n: getattr(k, n) for n in FIT} for e, k in fitted.items()}
    return out


# --- output ---------------------------------------------------------------------------------------------------------

def _f(v: float | None) -> str:
    return "    -  " if v is None else f"{v:6.1f}%"


def render(title: str, before: dict[str, dict], after: dict[str, dict], out=sys.stdout) -> None:
    print(f"\n{title}", file=out)
    print(f"{'group':40} {'n':>4}   {'TTFT':>15} {'TPOT':>15} {'throughput':>15} {'ITL':>15} {'all':>15}", file=out)
    for name, b in before.items():
        a = after[name]
        cells = "  ".join(f"{_f(b[m])}→{_f(a[m])}" for m in (*METRICS, "all"))
        print(f"{name:40} {b['n']:4d}  {cells}", file=out)


def render_worst(scored: list[dict], out=sys.stdout, n: int = 12) -> None:
    print(f"\n{n} worst rows (measured → predicted: TTFT ms, TPOT ms, tok/s):", file=out)
    worst = sorted(scored, key=lambda s: -max(s[f"ape_{m}"] or 0 for m in METRICS))[:n]
    for s in worst:
        cells = "  ".join("-" if s[m] is None else f"{s[m]:.4g}→{s[f'pred_{m}']:.4g}" for m in METRICS)
        print(f"  #{s['row']:<3} {s['label']:78} {cells}", file=out)


def render_constants(fitted: dict[str, StepConstants], out=sys.stdout) -> None:
    for e, k in fitted.items():
        print(f"\n{e.upper()}_1 (fitted; paste into src/sagellm/planner/constants.py):", file=out)
        for n in FIT:
            print(f"    {n}={getattr(k, n):.4g},", file=out)


def main() -> int:
    global PRIOR, PRIOR_WEIGHT, FIT, DECODE_FIT, FRONT_END_MAX_OUTPUT, START, LENGTHS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="published levels (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="also write the figures here as JSON")
    ap.add_argument("--fit", action="store_true", help="fit each engine's constants outside the hold-out, print them")
    ap.add_argument("--loso", action="store_true", help="leave-one-source-out check (one fit per source and engine)")
    ap.add_argument("--no-cache", action="store_true", help="simulate every row again")
    ap.add_argument("--prior", choices=("physics", "borrowed"), default=PRIOR,
                    help="what the fit pulls toward: FIT's physics priors or TGI_1's values (default: %(default)s)")
    ap.add_argument("--prior-weight", type=float, default=PRIOR_WEIGHT, help="pull toward the prior (%(default)s)")
    ap.add_argument("--free", help="comma-separated constants to fit (default: all of FIT)")
    ap.add_argument("--decode-fit", choices=("tpot", "itl"), default=DECODE_FIT,
                    help="decode figure the fit uses: median TPOT, or median ITL where published (%(default)s)")
    ap.add_argument("--front-end-max-output", type=int, default=FRONT_END_MAX_OUTPUT,
                    help="bursts generating at most this many tokens are front-end bound, scored apart "
                         "(0: score them with the rest, as the study did before; default %(default)s)")
    ap.add_argument("--breakdown", action="store_true",
                    help="MAPE and bias (geometric mean of predicted ÷ measured) by GPU, engine, architecture, size, "
                         "precision, TP, load and source, outside the hold-out")
    ap.add_argument("--lengths", choices=("drawn", "sharegpt", "means"), default=LENGTHS,
                    help="request lengths of levels whose requests differ: drawn as the source's tool drew them "
                         "(ShareGPT's, sglang.bench_serving's random dataset), scaled to the level's means; ShareGPT "
                         "levels only (round 5's replay); or every request at the means; default %(default)s")
    ap.add_argument("--no-hold-out", action="store_true",
                    help="with --loso: stop before scoring the hold-out (while the form is still being chosen)")
    ap.add_argument("--out-of-sample", action="store_true",
                    help="every row of --csv is one nothing was fitted on (e.g. benchmarks/data/holdout2.csv): score "
                         "the shipped constants and the ready set on all of them, no hold-out split, nothing fitted")
    ap.add_argument("--form", choices=("layer", "step"), default="layer",
                    help="step form: fixed costs per layer and per MoE layer (layer), or per pass as the previous "
                         "round fitted (step); default %(default)s")
    args = ap.parse_args()
    PRIOR, PRIOR_WEIGHT, DECODE_FIT = args.prior, args.prior_weight, args.decode_fit
    if args.form == "step":
        START, FIT = STEP_FORM_START, STEP_FORM_FIT
    FRONT_END_MAX_OUTPUT, LENGTHS = args.front_end_max_output, args.lengths
    if args.free:
        FIT = {n: FIT[n] for n in args.free.split(",")}
    study = build(args.csv.resolve(), cache=not args.no_cache)

    print(f"{len(study.cases)} rows replayed, {len(study.skipped)} left out:")
    reasons: dict[str, int] = {}
    for _, what, why in study.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda x: -x[1]):
        print(f"  {n:3d}  {why}")
    assumed = sum(c.assumed_input for c in study.cases)
    print(f"  {len(study.eager)} rows ran without CUDA graphs: scored apart below, not fitted on")
    print(f"  ({assumed} fitted rows have no published prompt length; assumed {ASSUMED_INPUT_TOKENS})")

    before = study.score(borrowed())
    current = study.score(shipped())
    report: dict = {"rows": len(study.cases), "skipped": study.skipped,
                    "borrowed": groups(before), "shipped": groups(current)}
    labels = {e: ENGINES[e].generation(None).constants_from for e in ENGINES_FITTED}
    render(f"MAPE: borrowed {BORROWED} → each engine's shipped constants {labels} (median TTFT, median TPOT, output "
           "tok/s)", groups(before), groups(current))
    render_worst(current)
    render("Rows run without CUDA graphs (not fitted on): borrowed → shipped", groups(study.score(borrowed(), study.eager)),
           groups(study.score(shipped(), study.eager)))
    if study.front_end:
        render(f"Front-end-bound bursts (<= {FRONT_END_MAX_OUTPUT} output tokens; not predicted, not fitted on): "
               "borrowed → shipped", groups(study.score(borrowed(), study.front_end)),
               groups(study.score(shipped(), study.front_end)))
    if args.out_of_sample:
        report["ready"] = groups(study.score(ready()))
        render("Out of sample, every row: shipped → the set ready for vLLM, LMI and SGLang (planner.constants.VLLM_1, "
               "as it would ship)", groups(current), report["ready"])
        render_breakdown("Out of sample, every row: shipped, MAPE (bias)", study.score(shipped()))
        render_breakdown("... and the ready set (VLLM_1)", study.score(ready()))
    if args.breakdown:
        outside = [c for c in study.cases if not held_out(c)]
        render_breakdown("Where the error is, outside the hold-out: each engine's shipped constants, MAPE (bias)",
                         study.score(shipped(), outside))
        render_breakdown("... and the same rows with TODAY_START (the physics priors, unfitted)",
                         study.score({e: replace(START, **{n: v[2] for n, v in FIT.items()})
                                      for e in ENGINES_FITTED}, outside))
        render_breakdown("... and with the set ready for vLLM, LMI and SGLang (planner.constants.VLLM_1)",
                         study.score(ready(), outside))
    if args.fit:
        fitted = fit_engines(study)
        render_constants(fitted)
        after = study.score(fitted)
        report["fitted"] = {"constants": {e: {n: getattr(k, n) for n in FIT} for e, k in fitted.items()},
                            **groups(after)}
        render("MAPE with the constants fitted outside the hold-out, on every row: borrowed → fitted", groups(before),
               groups(after))
    if args.loso:
        loso = leave_one_source_out(study)
        report["leave_one_source_out"] = loso
        render("Leave-one-source-out (each engine fitted on the other sources): borrowed → fitted, held-out MAPE",
               {k: v["borrowed"] for k, v in loso.items()}, {k: v["fitted"] for k, v in loso.items()})
        render("... borrowed → the physics priors, nothing fitted (so nothing seen of the source)",
               {k: v["borrowed"] for k, v in loso.items()}, {k: v["priors"] for k, v in loso.items()})
        render("... borrowed → the set ready for vLLM, LMI and SGLang (planner.constants.VLLM_1; its front-end latency "
               "taken from the other sources: " + ", ".join(f"{k.split('=')[1][:8]} {v['request_latency_s'] * 1000:.1f} ms"
                                                            for k, v in loso.items() if k.startswith("source=")) + ")",
               {k: v["borrowed"] for k, v in loso.items()}, {k: v["ready"] for k, v in loso.items()})
        if args.no_hold_out:
            print("\n(the study's own hold-out not scored: --no-hold-out)")
            return 0
        hold = hold_out_check(study)
        report["hold_out"] = hold
        groups_ = {k: v for k, v in hold.items() if k != "constants"}
        render("The study's own hold-out (fitted on every other row): borrowed → fitted",
               {k: v["borrowed"] for k, v in groups_.items()}, {k: v["fitted"] for k, v in groups_.items()})
        render("... borrowed → the physics priors, nothing fitted",
               {k: v["borrowed"] for k, v in groups_.items()}, {k: v["priors"] for k, v in groups_.items()})
        render_constants({e: replace(START, **v) for e, v in hold["constants"].items()})
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

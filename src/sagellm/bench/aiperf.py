"""A bench workload as an AIPerf workload spec (SageMaker AI's AIWorkloadConfig), and such a spec as a bench workload.

The spec is the document SageMaker AI's CreateAIWorkloadConfig takes inline: `{"benchmark": {"type": "aiperf"},
"parameters": {...}}`, the parameters named as AIPerf's command-line options in snake case, as AWS's guide writes
them (prompt_input_tokens_mean, output_tokens_mean, …). What maps, both ways:

| bench | AIPerf parameter |
|---|---|
| `--input-tokens 512` / `512:64` | prompt_input_tokens_mean (less the shared prefix) / _stddev |
| `--output-tokens` | output_tokens_mean / output_tokens_stddev |
| `--shared-prefix N --prefixes K` | num_prefix_prompts: K, prefix_prompt_length: N (AIPerf prepends one of them to each prompt) |
| `--concurrency C` (one level) | concurrency |
| `--request-rate R` (one level), `--arrivals`, `--max-in-flight` | request_rate, arrival_pattern, concurrency |
| `--requests-per-level` / `--duration-per-level` | request_count / benchmark_duration |
| `--warmup` (per stream in a closed loop) | warmup_request_count (in all) |
| `--seed` | random_seed |

What does not map is refused in one line: several levels (an AIPerf run is one), uniform lengths (AIPerf draws
normal ones), a local dataset or tokenizer, and any other AIPerf parameter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from sagellm.bench.client.workload import Lengths
from sagellm.bench.load.open_loop import Arrivals
from sagellm.bench.specs import DEFAULT_PAYLOAD, Closed, Open, WorkloadOptions
from sagellm.bench.sweep.run import MAX_IN_FLIGHT, default_budget
from sagellm.errors import InputError
from sagellm.planner import Payload

TOOL = "aiperf"  # the only benchmark type SageMaker AI's schema takes (`^(aiperf)$`)
AIPERF_INPUT_TOKENS = 550  # AIPerf's default prompt_input_tokens_mean
# The parameters sagellm reads back; anything else is refused by name.
PARAMETERS = ("prompt_input_tokens_mean", "prompt_input_tokens_stddev", "output_tokens_mean", "output_tokens_stddev",
              "num_prefix_prompts", "prefix_prompt_length", "concurrency", "request_rate", "arrival_pattern",
              "request_count", "benchmark_duration", "warmup_request_count", "random_seed")


@dataclass(frozen=True)
class AiperfWorkload:
    """A spec read as a bench: what each request sends, and the one level of load it runs."""

    workload: WorkloadOptions
    load: Closed | Open


def spec_of(workload: WorkloadOptions, load: Closed | Open, default: Payload = DEFAULT_PAYLOAD) -> dict[str, Any]:
    """The AIPerf spec of a bench workload at one level of load (InputError for what AIPerf cannot express)."""
    problems = []
    if workload.dataset is not None:
        problems.append("WorkloadOptions.dataset: a local file; AIPerf reads a dataset from S3 (upload it in "
                        "AIPerf's format and give its S3 URI)")
    if workload.trace is not None:  # not exported (yet): AIPerf takes a trace as its own input file
        problems.append("WorkloadOptions.trace: a local trace file; not exported to an AIPerf spec (leave it out)")
    if workload.tokenizer is not None:
        problems.append("WorkloadOptions.tokenizer: AIPerf counts tokens with the served model's tokenizer; leave it "
                        "out")
    if workload.turns is not None:  # not mapped yet onto AIPerf's conversation parameters
        problems.append("WorkloadOptions.turns: conversations are not exported to AIPerf yet; leave it out")
    levels = load.concurrency if isinstance(load, Closed) else load.request_rate
    if len(levels) != 1:
        field = "Closed.concurrency" if isinstance(load, Closed) else "Open.request_rate"
        problems.append(f"{field}: {len(levels)} levels; an AIPerf run is one level (give one)")
    if load.repeats != 1:
        problems.append(f"{type(load).__name__}.repeats: an AIPerf run runs once")
    inputs = outputs = None
    try:
        inputs = _normal(workload.input_tokens or str(default.input_tokens), "WorkloadOptions.input_tokens")
        outputs = _normal(workload.output_tokens or str(default.output_tokens), "WorkloadOptions.output_tokens")
    except InputError as exc:
        problems += exc.messages
    if problems or inputs is None or outputs is None:
        raise InputError(problems)
    prefix = workload.shared_prefix
    if prefix >= inputs.low:
        raise InputError(f"WorkloadOptions.shared_prefix: {prefix} tokens leave no unique part in prompts as short "
                         f"as {inputs.low} tokens")
    p: dict[str, Any] = {"prompt_input_tokens_mean": inputs.a - prefix, "prompt_input_tokens_stddev": inputs.b,
                         "output_tokens_mean": outputs.a, "output_tokens_stddev": outputs.b}
    if prefix:
        p |= {"num_prefix_prompts": workload.prefixes, "prefix_prompt_length": prefix}
    level = levels[0]
    if isinstance(load, Closed):
        p["concurrency"] = int(level)
        warmup = load.warmup * int(level)  # sagellm's closed-loop warm-up is per stream, AIPerf's in all
    else:
        p |= {"request_rate": level, "arrival_pattern": load.arrivals, "concurrency": load.max_in_flight}
        warmup = load.warmup
    if load.duration_per_level_s is not None:
        p["benchmark_duration"] = load.duration_per_level_s
    else:
        p["request_count"] = load.requests_per_level or default_budget(open_loop=isinstance(load, Open))(level)
    p["warmup_request_count"] = warmup
    p["random_seed"] = workload.seed
    return {"benchmark": {"type": TOOL}, "parameters": p}


def _normal(text: str, option: str) -> Lengths:
    lengths = Lengths.parse(text, option)
    if lengths.kind == "uniform":
        raise InputError(f"{option}: {text!r}: AIPerf draws lengths from a normal distribution; give a fixed length "
                         "(512) or mean:stddev (512:64)")
    return lengths


# ------------------------------------------------------------------------------------------------ reading one

def read_spec(path: Path) -> AiperfWorkload:
    """A bench workload from a file: a CreateAIWorkloadConfig request (as `sagellm workload export` writes it) or
    the AIPerf spec itself, JSON or YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    document = _load(text, str(path))
    if isinstance(document, dict) and "AIWorkloadConfigs" in document:
        if "DatasetConfig" in document:
            raise InputError(f"{path}: DatasetConfig: a dataset in S3; the bench reads prompts from a local file "
                             "(download it and pass --dataset, without --workload-config)")
        try:
            inline = document["AIWorkloadConfigs"]["WorkloadSpec"]["Inline"]
        except (KeyError, TypeError):
            raise InputError(f"{path}: AIWorkloadConfigs.WorkloadSpec.Inline: missing; it holds the AIPerf "
                             "spec") from None
        document = _load(str(inline), f"{path}: AIWorkloadConfigs.WorkloadSpec.Inline")
    return workload_of(document, str(path))


def _load(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: neither JSON nor YAML: {exc}") from None


def workload_of(spec: Any, where: str) -> AiperfWorkload:
    """An AIPerf spec as a bench workload; InputError with every parameter that does not map."""
    p = _parameters(spec, where)
    problems = [f"{where}: parameters.{key}: sagellm's bench has no such setting (it reads {', '.join(PARAMETERS)})"
                for key in p if key not in PARAMETERS]
    number = _reader(p, where, problems)
    in_mean, in_sd = number("prompt_input_tokens_mean", int, 1), number("prompt_input_tokens_stddev", int, 0)
    out_mean, out_sd = number("output_tokens_mean", int, 1), number("output_tokens_stddev", int, 0)
    prefixes, prefix = number("num_prefix_prompts", int, 0), number("prefix_prompt_length", int, 0) or 0
    concurrency, rate = number("concurrency", int, 1), number("request_rate", float, 0)
    requests, duration = number("request_count", int, 1), number("benchmark_duration", float, 0)
    warmup, seed = number("warmup_request_count", int, 0) or 0, number("random_seed", int, 0) or 0
    arrivals = p.get("arrival_pattern", "poisson")  # AIPerf's default
    if prefixes == 0:
        prefix = 0
    problems += _conflicts(where, concurrency=concurrency, rate=rate, requests=requests, duration=duration,
                           arrivals=arrivals, out_mean=out_mean, out_sd=out_sd)
    if problems:
        raise InputError(problems)
    if prefixes == 0:
        prefix = 0
    mean = (in_mean or AIPERF_INPUT_TOKENS) + prefix

    def lengths(m: int, sd: int | None) -> str:
        return f"{m}:{sd}" if sd else str(m)

    workload = WorkloadOptions(input_tokens=lengths(mean, in_sd),
                               # no output_tokens_mean: AIPerf sets no max_tokens; the bench sends the profile's
                               output_tokens=lengths(out_mean, out_sd) if out_mean is not None else None,
                               shared_prefix=prefix, prefixes=prefixes or 1 if prefix else 1, seed=seed)
    load: Closed | Open
    if rate is not None:
        load = Open((rate,), cast(Arrivals, arrivals), concurrency or MAX_IN_FLIGHT, requests, duration, warmup)
    else:
        assert concurrency is not None
        load = Closed((concurrency,), requests, duration, math.ceil(warmup / concurrency))
    return AiperfWorkload(workload, load)


def _parameters(spec: Any, where: str) -> dict[str, Any]:
    """The parameters of an AIPerf workload spec (`benchmark.type` names the tool)."""
    benchmark = spec.get("benchmark") if isinstance(spec, dict) else None
    if not isinstance(benchmark, dict) or benchmark.get("type") != TOOL:
        raise InputError(f"{where}: benchmark.type: must be {TOOL!r} (an AIPerf workload spec: "
                         f"{{\"benchmark\": {{\"type\": \"{TOOL}\"}}, \"parameters\": {{...}}}})")
    p = spec.get("parameters", {})
    if not isinstance(p, dict):
        raise InputError(f"{where}: parameters: must be a mapping of AIPerf parameters")
    return p


def _conflicts(where: str, *, concurrency: int | None, rate: float | None, requests: int | None,
               duration: float | None, arrivals: Any, out_mean: int | None, out_sd: int | None) -> list[str]:
    """Parameters the bench cannot honour together: its load, how a level stops, the lengths."""
    problems = []
    if concurrency is None and rate is None:
        problems.append(f"{where}: parameters: give concurrency (closed loop) or request_rate (open loop)")
    if requests is not None and duration is not None:
        problems.append(f"{where}: parameters.request_count/benchmark_duration: give one (the bench stops a level "
                        "on one of them)")
    if rate is not None and arrivals not in ("constant", "poisson"):
        problems.append(f"{where}: parameters.arrival_pattern: {arrivals!r}; the bench sends constant or poisson")
    if out_mean is None and out_sd:
        problems.append(f"{where}: parameters.output_tokens_stddev: needs output_tokens_mean")
    return problems


def _reader(p: dict[str, Any], where: str, problems: list[str]) -> Any:
    """A getter of numeric parameters that records a wrong one in `problems` (and gives None for it)."""
    def number(key: str, kind: type[int | float], least: float) -> Any:
        value = p.get(key)
        if value is None:
            return None
        ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
        if not ok or not value >= least or (kind is float and not math.isfinite(value)):
            what = "a whole number" if kind is int else "a number"
            problems.append(f"{where}: parameters.{key}: {value!r} must be {what} ≥ {least:g}")
            return None
        return kind(value)
    return number

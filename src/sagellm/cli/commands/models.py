"""`sagellm models`: the models the catalog knows, and where one fits."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import (
    InputTokens,
    Json,
    OutputTokens,
    Region,
    payload_from,
)
from sagellm.errors import InputError


@app.command("models", epilog="Examples:\n\n"
             "  sagellm models\n\n"
             "  sagellm models --model Qwen/Qwen2.5-7B-Instruct   # outside the catalog: read from its config.json\n\n"
             "  sagellm --offline models --model Qwen/Qwen2.5-7B-Instruct --quantization awq --json")
def models_command(
    model: Annotated[str | None, typer.Option("--model", help="a catalog model or any Hugging Face id: its "
                                                 "facts and the instance types it fits, at which TP")] = None,
    quantization: Annotated[str, typer.Option("--quantization", help="none, fp8, eetq, bitsandbytes, gptq or "
                                                 "awq (with --model)")] = "none",
    input_tokens: InputTokens = None,
    output_tokens: OutputTokens = None,
    region: Region = "us-east-1",
    json_out: Json = False,
) -> None:
    """List the models sagellm knows, or where one model fits (any Hugging Face id, from its config.json)."""
    from dataclasses import asdict

    from sagellm.catalog import find_model, models

    if model is None:
        known = list(models().values())
        if json_out:
            print(json.dumps([asdict(m) for m in known], indent=2))
            return
        _print_models(known)
        return
    from sagellm.catalog import BYTES_PER_PARAM

    if quantization not in BYTES_PER_PARAM:
        raise InputError(f"--quantization: {quantization!r}: use one of {', '.join(BYTES_PER_PARAM)}")
    from sagellm.planner import Payload

    found = find_model(model, "--model")
    payload = payload_from(input_tokens, output_tokens) or Payload()  # the profiles' default payload, 256 in / 256 out
    fits = _fits_by_instance(found, quantization, payload, region)
    if json_out:
        print(json.dumps({"model": asdict(found), "quantization": quantization, "fits": fits}, indent=2))
        return
    _print_model_fits(found, quantization, fits)


def _fits_by_instance(model, quantization: str, payload, region: str) -> list[dict]:
    """Per catalog instance type: the TP degrees where the model fits (the planner's test), cheapest first."""
    from sagellm.catalog import instances
    from sagellm.planner import fitting_tps

    rows = [{"instance_type": i.instance_type, "tensor_parallel": fitting_tps(model, i, quantization, payload),
             "accelerators": i.n_accelerators, "usd_per_h": i.price_per_h(region),
             "note": "Inferentia: needs Neuron-compiled weights" if i.is_neuron else ""}
            for i in instances().values()]
    return sorted(rows, key=lambda r: (not r["tensor_parallel"], r["usd_per_h"] is None, r["usd_per_h"] or 0))


def _print_models(known: list) -> None:
    from sagellm.render import print_table

    rows = [[m.hf_id, m.alias or "", f"{m.params_b:g}" + (f" ({m.active_b:g} active)" if m.n_experts > 1 else ""),
             str(m.n_layers), f"{m.n_heads}/{m.n_kv_heads}", str(m.max_context),
             f"{m.n_experts}×top{m.experts_per_token}" if m.n_experts > 1 else "", "yes" if m.gated else ""]
            for m in known]
    print_table(["model", "alias", "params B", "layers", "heads/KV", "context", "experts", "gated"], rows,
                right=("params B", "layers", "heads/KV", "context"))
    print(f"{len(known)} models in the catalog; any other Hugging Face id is read from its config.json "
          "(sagellm models --model ID)")


def _print_model_fits(model, quantization: str, fits: list[dict]) -> None:
    from sagellm.render import print_table

    moe = f" · {model.n_experts} experts, {model.experts_per_token} per token" if model.n_experts > 1 else ""
    window = f" · sliding window {model.sliding_window}" if model.sliding_window else ""
    print(f"{model.hf_id}: {model.architecture or 'catalog model'} · {model.params_b:g} B parameters"
          f"{moe} · {model.n_layers} layers · {model.n_heads} heads / {model.n_kv_heads} KV heads · hidden "
          f"{model.hidden_size} · head dim {model.head_dim} · context {model.max_context}{window}"
          + (f" · {model.dtype}" if model.dtype else ""))
    print(f"source: {model.source}")
    rows = [[r["instance_type"], ", ".join(map(str, r["tensor_parallel"])) or "does not fit",
             f"{r['usd_per_h']:.2f}" if r["usd_per_h"] is not None else "–", r["note"]] for r in fits]
    print_table(["instance type", f"fits at TP ({quantization})", "$/h", "note"], rows, right=("$/h",))

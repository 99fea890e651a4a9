"""Terminal rendering of plans, predicted curves and reports (rich); bench progress is bench/progress.py."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sagellm.engines import variable_names
from sagellm.planner import Curve
from sagellm.profiles.plan import DeploymentPlan


def _console() -> Console:
    # soft_wrap: a long line (an image URI, a tag list) stays one line, for the terminal or a pipe to wrap;
    # piped, tables get room to stay whole rather than rich's default 80 columns.
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = 1000
    return console


def print_plan(plan: DeploymentPlan, notes: tuple[str, ...] = ()) -> None:
    """The resolved plan as a person reads it (notes: what its predicted auto values rest on)."""
    c = _console()
    c.print(f"[bold]{plan.profile}[/] · {plan.instance_type} × {plan.initial_instance_count} · "
            f"{plan.endpoint_kind} endpoint · {plan.container} {plan.container_version or ''} · {plan.region}")
    c.print(f"payload {plan.input_tokens} in / {plan.output_tokens} out · start-up timeout "
            f"{plan.startup_health_check_timeout_s} s · download timeout {plan.model_data_download_timeout_s} s"
            + (f" · volume {plan.volume_size_gb} GB" if plan.volume_size_gb else ""))
    for m in plan.models:
        c.print(f"\n[bold]{m.name}[/]  {m.model_id}  TP {m.tensor_parallel}"
                + (f" · {m.copy_count} copies × ({m.compute.accelerators} accelerators, {m.compute.cpu_cores:g} "
                   f"CPUs, {m.compute.min_memory_mib} MiB)" if m.compute else ""))
        c.print(f"  image {escape(m.image_uri)}")
        for key, value in m.environment.items():
            c.print(escape(f"  {key}={value}"))
    if plan.scaling:
        s = plan.scaling
        unit = "per copy" if plan.endpoint_kind == "inference-component" else "per instance"
        c.print(f"\nautoscaling {s.min_capacity}..{s.max_capacity}, target {s.target_value:g} requests in flight "
                f"{unit} ({s.metric}, every {s.period_s} s), "
                f"cooldowns in {s.scale_in_cooldown_s} s / out {s.scale_out_cooldown_s} s")
    if plan.hf_token_secret:
        c.print(f"HF token from Secrets Manager: {plan.hf_token_secret}")
    c.print(escape("tags " + ", ".join(f"{k}={v}" for k, v in plan.tags.items())))
    for text in notes:
        c.print(f"note: {text}", markup=False)


def print_curve(shape: dict, env: dict[str, str], curve: Curve) -> None:
    """The predicted sweep, its knee, max-throughput point and cost."""
    c = _console()
    c.print(f"[bold]{shape['profile']}[/] · {shape['model']} on {shape['instance_type']} × {shape['instance_count']}"
            f" · TP {shape['tensor_parallel']} × {shape['copies_per_instance']} copies · {shape['quantization']} · "
            f"{shape.get('container', '')} · "
            f"{curve.payload.input_tokens} in / {curve.payload.output_tokens} out (predicted)")
    t = Table(box=None, pad_edge=False)
    for col in ("concurrency", "ms/token", "TTFT ms", "ITL ms", "e2e s", "tokens/s", "req/s", "$/1M tok", "note"):
        t.add_column(col, justify="right" if col != "note" else "left")
    for p in curve.points:
        note: list[str] = []
        if p.rejected:
            note.append("429: over admission")
        elif not p.within_timeout:
            note.append("over 60 s")
        if p.queued_per_copy > 0 and not p.rejected:
            note.append(f"queue {p.queued_per_copy:.0f}")
        if curve.knee is p:
            note.append("knee")
        if curve.max_throughput is p:
            note.append("max")
        cost = curve.usd_per_1m_tokens(p)
        t.add_row(str(p.concurrency), f"{p.ms_per_token:.1f}", f"{p.ttft_ms:.0f}", f"{p.itl_ms:.1f}",
                  f"{p.e2e_s:.1f}", f"{p.throughput_tokens_per_s:.0f}", f"{p.requests_per_s:.2f}",
                  f"{cost:.2f}" if cost is not None else "–", ", ".join(note))
    c.print(t)
    c.print("ms/token = e2e ÷ output tokens · knee = max tokens/s ÷ ms/token · max = highest concurrency inside "
            "the timeout, admitted")
    batch = next((env[name] for name in variable_names("max_batch_size") if name in env), None)
    admission = next((f"{name}={env[name]}" for name in variable_names("max_concurrent_requests") if name in env),
                     "none (the server queues)")
    c.print(f"KV capacity {curve.kv_capacity_tokens} tokens per copy · {curve.max_sequences_per_copy} running "
            f"sequences at {curve.payload.total_tokens} tokens" + (f" (batch limit {batch})" if batch else "")
            + f" · admission {admission}")
    if curve.usd_per_h is not None:
        best = curve.usd_per_1m_tokens(curve.max_throughput)
        c.print(f"${curve.usd_per_h:.2f}/h" + (f" · ${best:.2f} per 1M tokens at max throughput" if best else "")
                + (f" · {curve.region} price of {curve.price.date} ({curve.price.source})" if curve.price else ""),
                markup=False)
    for text in curve.notes:
        c.print(f"note: {text}", markup=False)


def print_report(directory: Path) -> None:
    """Print report.md of a bench folder: the Markdown as written when stdout is not a terminal (a pipe, a CI
    log); in a terminal its prose rendered, its tables and image links printed whole."""
    from rich.markdown import Markdown

    text = (directory / "report.md").read_text(encoding="utf-8")
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        sys.stdout.write(text)
    else:
        for block, verbatim in markdown_blocks(text):
            console.print(block, markup=False) if verbatim else console.print(Markdown(block))
    done = (f"\nwritten to {directory}/: results.json, requests.jsonl, report.md, curve.png, junit.xml, "
            "results.csv")
    print(done) if not console.is_terminal else console.print(done, markup=False)


def markdown_blocks(text: str) -> list[tuple[str, bool]]:
    """The report cut into (block, verbatim) runs: tables and image links verbatim, since rich's Markdown
    squeezes a table to the terminal's width and drops an image's target; the prose between them rendered."""
    blocks: list[tuple[str, bool]] = []
    for line in text.splitlines():
        verbatim = line.startswith(("|", "!["))
        if blocks and blocks[-1][1] == verbatim:
            blocks[-1] = (blocks[-1][0] + "\n" + line, verbatim)
        else:
            blocks.append((line, verbatim))
    return blocks


def print_table(columns: list[str], rows: list[list[str]], right: tuple[str, ...] = ()) -> None:
    """Rows under column heads: a rich table in a terminal; plain aligned text, never wrapped, when piped."""
    console = Console(highlight=False)
    if console.is_terminal:
        t = Table(box=None, pad_edge=False)
        for col in columns:
            t.add_column(col, justify="right" if col in right else "left", overflow="fold")
        for row in rows:
            t.add_row(*row)
        console.print(t)
        return
    widths = [max(len(str(x)) for x in [col, *(r[i] for r in rows)]) for i, col in enumerate(columns)]
    for row in [columns, *rows]:
        cells = [cell.rjust(w) if col in right else cell.ljust(w) for cell, w, col in zip(row, widths, columns)]
        print("  ".join(cells).rstrip())

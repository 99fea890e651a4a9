"""A vLLM plan served for real: vLLM's CPU build started from the flags AWS's vLLM image makes of a standard plan's
environment (the tiny model substituted), benched over the wire the sagemaker target uses (`/ping`, and
`/invocations` with the body SageMaker passes on): one level, every request's output tokens exact.

Run it alone: `.venv/bin/python -m pytest tests/engines/test_vllm_plan_served.py -v -s` (the first run on a
machine installs vLLM, about 10 minutes; later runs start the server in about a minute).
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from entrypoints import standard_plans, vllm_argv

from sagellm.bench.client.responses import openai_event
from sagellm.bench.client.transports import COMPLETIONS, Api, HttpTransport, invocation_body
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.bench.load.closed_loop import run_level
from sagellm.planner import Payload
from sagellm.results.records import RequestRecord
from vllm_server import VllmServer, build_tiny_model, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200, func_only=True)]  # the server starts inside

MAX_MODEL_LEN = 1024  # the tiny model's context is 2048; the plan's 4096 is the 7B model's
# The sagemaker target's request to a vLLM endpoint, sent to the container as SageMaker passes it on.
INVOCATIONS = Api("openai", "/invocations", lambda prompt, n, _model: invocation_body(COMPLETIONS, prompt, n),
                  openai_event, b"[DONE]")


def served_argv(tmp: Path, model_dir: Path) -> list[str]:
    """The image's argv for the standard max-throughput plan, with what a CPU cannot run substituted."""
    env = standard_plans("vllm", tmp)["max-throughput"].environment
    cpu = {"SM_VLLM_MODEL": str(model_dir), "SM_VLLM_TENSOR_PARALLEL_SIZE": "1",
           "SM_VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN)}
    assert set(cpu) <= set(env)  # substituted, never added
    argv = vllm_argv(env | cpu)
    # VllmServer picks the port; the routing middleware is the image's own module (not in vLLM's CPU build).
    for flag in ("--port", "--middleware"):
        i = argv.index(flag)
        del argv[i:i + 2]
    return argv


def test_a_vllm_plan_serves_the_sagemaker_wire_with_exact_tokens(tmp_path: Path) -> None:
    model = build_tiny_model(tmp_path / "tiny-llama")
    argv = served_argv(tmp_path, model)
    assert argv[argv.index("--max-num-seqs") + 1] == "256"  # the plan's running limit, as planned
    with VllmServer(model, max_model_len=MAX_MODEL_LEN, extra_args=tuple(argv)) as vllm:
        with urllib.request.urlopen(f"{vllm.url}/ping", timeout=10) as reply:
            assert reply.status == 200
        records: list[RequestRecord] = []
        before = scrape(vllm.url)
        level = asyncio.run(run_level(
            HttpTransport(vllm.url, INVOCATIONS), concurrency=2, requests=6, duration_s=None, warmup=0,
            workload=Workload(WorkloadOptions(seed=29), Payload(64, 16)), on_record=records.append))
        after = scrape(vllm.url)
    assert len(records) == 6 and all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert [r.output_tokens for r in records] == [16] * 6
    generated = after["vllm:generation_tokens_total"] - before.get("vllm:generation_tokens_total", 0.0)
    assert generated == 96  # vLLM's own count agrees
    ttft = sorted(r.ttft_s or 0.0 for r in records)
    print(f"\nvLLM plan over /invocations: {len(records)} requests at concurrency 2 in {level.window_s:.2f} s, "
          f"{96 / level.window_s:.1f} tokens/s, TTFT p50 {ttft[len(ttft) // 2] * 1000:.0f} ms")

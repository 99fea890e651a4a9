"""Issue 43's done-when on the local target: a 4-copy endpoint (the replicas profile on vLLM, emulated) under a
workload of 16 shared prefixes finds more of its prompts in the copies' prefix caches (each level's server block)
and answers sooner with prefix-aware routing than with least-outstanding routing, as its prediction says."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_helpers import results_of, sagellm

ROUTINGS = {"least": "{strategy: least-outstanding}",
            "routed": "{strategy: prefix-aware, prefix_length: 4096, concurrency_threshold: 16}"}


@pytest.mark.integration
def test_prefix_aware_routing_on_a_local_four_copy_endpoint_lowers_ttft(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    ttft, predicted, hit_rate = {}, {}, {}
    for name, routing in ROUTINGS.items():
        (profiles / f"{name}.yaml").write_text(f"name: {name}\nextends: replicas\ncontainer: {{kind: vllm}}\n"
                                               f"routing: {routing}\n")
        out = tmp_path / name
        ran = sagellm("bench", "--profile", name, "--profiles-dir", str(profiles), "--model",
                      "meta-llama/Llama-2-7b-hf", "--instance", "ml.g5.12xlarge", "--time-scale", "0.05",
                      "--input-tokens", "2048", "--output-tokens", "32", "--shared-prefix", "1536", "--prefixes", "16",
                      "--concurrency", "16", "--requests-per-level", "160", "--warmup", "1", "--out", str(out),
                      timeout=300)
        assert ran.returncode == 0, ran.stderr
        results = results_of(out)
        assert results["run"]["workload"]["shared_prefixes"] == 16
        (level,) = results["levels"]
        ttft[name], predicted[name] = level["ttft_ms"]["p50"], level["predicted"]["ttft_ms"]
        server = level["server"]["metrics"]
        hit_rate[name] = server["prefix_cache_hits"]["stats"]["sum"] / server["prefix_cache_queries"]["stats"]["sum"]
    assert hit_rate["least"] < 0.75 * hit_rate["routed"] <= 0.75 * 1536 / 2048  # at most the prefixes' share
    assert ttft["routed"] < 0.75 * ttft["least"]
    assert predicted["routed"] < 0.75 * predicted["least"]  # the prediction routes as the profile says too

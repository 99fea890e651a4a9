"""The plan-versus-emulator study's ceiling (benchmarks/plan_vs_emulator.py --ceiling): what a perfect model of the
server scores against one run as long as a measured level."""

from __future__ import annotations

from pathlib import Path

from benchmark_scripts import load_benchmark
from sagellm.bench.planning import plan_bench
from sagellm.clock import Clock
from sagellm.planner import StepModel
from sagellm.results.schema import Level
from sagellm.results.simulated import simulated_level


def test_a_perfect_model_meets_one_short_run_only_as_often_as_the_run_lands_near_its_median(tmp_path: Path) -> None:
    study = load_benchmark("plan_vs_emulator")
    p = plan_bench(study.spec_of("max-throughput", "falcon-7b", (1, 4), 0.2, tmp_path))
    assert p.plan is not None and p.shape is not None
    scored = {}
    for concurrency, requests in ((1, 8), (4, 12), (4, 48)):
        # A measured level stands in as the simulator's own run: only its concurrency and length are read.
        run = simulated_level(p.plan, StepModel(p.shape), p.workload.payload(), concurrency=concurrency,
                              sizes=p.workload.sizes, requests=requests, clock=Clock(0.2), seed=99, warmup=concurrency)
        level = Level(**run.model_dump())
        hits = study.ceiling(p, level, study.planned(p, concurrency, 0.2), 0.2, 12, 0.15)
        assert {len(h) for h in hits.values()} == {12}
        scored[(concurrency, requests)] = {metric: sum(h) / len(h) for metric, h in hits.items()}
    # Alone, a request's TTFT is one prefill whichever run it is in; ms/token barely moves at any length.
    assert scored[(1, 8)] == {metric: 1.0 for metric in scored[(1, 8)]}
    assert min(scored[(4, 12)]["ms/token p50"], scored[(4, 48)]["ms/token p50"]) == 1.0
    # At 4 it rests on which pass each request joins: a dozen requests miss more often than four dozen.
    assert scored[(4, 12)]["TTFT p50"] < 1.0
    assert scored[(4, 12)]["TTFT p50"] <= scored[(4, 48)]["TTFT p50"]

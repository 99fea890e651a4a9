"""recommend across engines: every registered engine with an image on the instance type, and which one won."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.engines import ENGINES
from sagellm.planner import Payload
from sagellm.recommend import Load, Space, choose, search
from sagellm.recommend.choose import engine_verdict
from sagellm.recommend.search import Search
from sagellm.results.gate import Rule

LOAD = Load(concurrency=16)
RULES = (Rule(metric="itl_ms.p50", where=LOAD.name, max=40),)


def _search(engines: tuple[str, ...] | None = None) -> Search:
    space = Space(find_model("llama2-7b"), Payload(), (find_instance("ml.g6e.xlarge"), find_instance("ml.g5.2xlarge")))
    return search(space if engines is None else replace(space, engines=engines), LOAD, RULES)


@pytest.mark.slow
def test_every_registered_engine_is_searched_unless_narrowed() -> None:
    assert {c.config.engine for c in _search().candidates} == {k for k, e in ENGINES.items() if e.gpu}
    assert {c.config.engine for c in _search(("lmi",)).candidates} == {"lmi"}
    assert engine_verdict(choose(_search(("lmi",)), LOAD, RULES, Payload())) is None  # one engine: nothing to say


@pytest.mark.slow
def test_inferentia_is_searched_with_the_engines_named_and_vllm_neuronx_serves_what_tgis_cache_lacks() -> None:
    space = Space(find_model("Qwen/Qwen3-8B"), Payload(), (find_instance("ml.inf2.xlarge"),),
                  engines=("tgi", "vllm-neuronx"))
    assert search(space, LOAD, RULES).candidates == []  # not asked for Inferentia: not searched
    found = search(replace(space, inferentia=True), LOAD, RULES)
    by_engine = {c.config.engine: c for c in found.candidates}
    assert by_engine["tgi"].problem is not None and "no compiled model in the neuron cache" in by_engine["tgi"].problem
    assert by_engine["vllm-neuronx"].problem is None and by_engine["vllm-neuronx"].point is not None


def test_the_verdict_names_the_cheaper_engine_and_what_the_other_costs() -> None:
    found = _search(("tgi", "lmi"))
    for c in found.candidates:  # LMI made dearer: TGI wins on price
        if c.config.engine == "lmi":
            c.usd_per_h *= 2
    rec = choose(found, LOAD, RULES, Payload())
    assert rec.pick is not None and rec.pick.config.engine == "tgi"
    verdict = engine_verdict(rec)
    assert verdict is not None
    assert verdict.startswith(f"engine: tgi won, the cheapest deployment that meets the SLO with 10 % headroom "
                              f"(${rec.pick.usd_per_h:.2f}/h); lmi's cheapest is ")
    assert f"at ${2 * rec.pick.usd_per_h:.2f}/h" in verdict


def test_the_verdict_says_when_the_winner_is_the_only_engine_meeting_the_slo() -> None:
    found = _search(("tgi", "lmi"))
    for c in found.candidates:  # LMI made to miss everywhere
        if c.config.engine == "lmi":
            c.problem = "refused for the test"
    rec = choose(found, LOAD, RULES, Payload())
    verdict = engine_verdict(rec)
    assert verdict is not None and verdict.startswith("engine: tgi won, the only engine predicted to meet the SLO")
    assert "lmi meets it nowhere (closest: " in verdict and "refused for the test" in verdict


def test_engines_that_schedule_alike_tie_and_registry_order_decides() -> None:
    rec = choose(_search(("lmi", "vllm")), LOAD, RULES, Payload())
    assert rec.pick is not None and rec.pick.config.engine == "lmi"
    verdict = engine_verdict(rec)
    assert verdict is not None
    # LMI runs vLLM's engine: the same scheduler, the same limits, the same step times.
    assert verdict.endswith(
        f"vllm's {rec.pick.label().replace('lmi', 'vllm')} ties on $/h and margin: predicted equal, as LMI and vLLM "
        "both schedule as vLLM V1 does and run one set of step times (NVIDIA AIConfigurator 0.12.0's kernel tables, "
        "checked on 157 published vLLM and SGLang levels), and no published measurement "
        "compares the pinned versions on one GPU and model (docs/containers.md) (lmi comes first in the registry: "
        "lmi, vllm)")


def test_an_exact_tie_goes_to_the_engine_upstream_still_develops() -> None:
    found = _search(("tgi", "lmi"))
    tgi = {(c.config.instance_type, c.config.tensor_parallel, c.instance_count): c for c in found.candidates
           if c.config.engine == "tgi"}
    for c in found.candidates:  # LMI's predictions made TGI's: an exact tie
        if c.config.engine == "lmi":
            twin = tgi[(c.config.instance_type, c.config.tensor_parallel, c.instance_count)]
            c.values, c.usd_per_h, c.problem, c.gaps = dict(twin.values), twin.usd_per_h, twin.problem, twin.gaps
    rec = choose(found, LOAD, RULES, Payload())
    assert rec.pick is not None and rec.pick.config.engine == "lmi"  # TGI comes first in the registry
    verdict = engine_verdict(rec)
    assert verdict is not None
    assert verdict.endswith("(lmi is chosen over tgi: upstream TGI has been in maintenance mode since 2025-12-11)")
    assert rec.frontier and rec.pick in rec.frontier

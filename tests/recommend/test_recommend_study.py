"""The recommend study (benchmarks/recommend_study.py) on one published group: it runs, and its figures mean what
they say."""

from __future__ import annotations

import math
from types import ModuleType

import pytest

from benchmark_scripts import load_benchmark
from sagellm.planner import constants as planner_constants


def _study() -> ModuleType:
    return load_benchmark("recommend_study")


@pytest.mark.slow
def test_study_on_the_jumpstart_long_prompt_group() -> None:
    study = _study()
    rows = study.load_rows(study.DEFAULT_CSV)
    outcomes = study.run_study(rows, only="js llama2-7b 3840/256")
    published = {math.ceil(r.ms_per_token) for r in rows if r.source == "jumpstart" and r.input_tokens == 3840
                 and r.ms_per_token is not None and r.throughput is not None}
    assert [o.target_ms for o in outcomes] == sorted(published)
    for o in outcomes:
        # the published cheapest met its target, and the cost ratio is the recommendation over it
        assert o.published_usd_per_1m > 0
        if o.recommended_usd_per_1m is not None:
            assert o.cost_ratio == o.recommended_usd_per_1m / o.published_usd_per_1m
            assert o.matched == (o.recommended_shape == o.published)
    # the loosest target: one g5.2xlarge at its published throughput, the published cheapest itself
    loosest = outcomes[-1]
    assert loosest.published.startswith("ml.g5.2xlarge") and loosest.matched and loosest.cost_from == "published"
    share, median_ratio = study.agreement(outcomes)
    assert 0 < share <= 1 and median_ratio is not None and median_ratio > 0
    text = study.table(outcomes)
    assert text.count("\n") == len(outcomes) + 1 and "js llama2-7b 3840/256" in text



def test_only_the_published_deployment_itself_is_a_match() -> None:
    study = _study()

    def picked(label: str, shape: str) -> bool:
        return study.Outcome("js llama2-7b 256/256", 60, 4, "ml.g5.2xlarge TP1", 1.0, label, "ml.g5.2xlarge", 1.0,
                             "pred", shape).matched

    assert picked("1 × ml.g5.2xlarge TP1 tgi", "ml.g5.2xlarge TP1")
    assert not picked("2 × ml.g5.2xlarge TP1 tgi", "2 × ml.g5.2xlarge TP1 tgi")  # two instances: another deployment
    assert not picked("1 × ml.g5.12xlarge IC 4×TP1 tgi", "1 × ml.g5.12xlarge IC 4×TP1 tgi")
    assert not picked("1 × ml.g5.12xlarge TP4 tgi", "ml.g5.12xlarge TP4")


def test_fmbench_levels_group_by_prompt_bucket_and_only_where_the_client_kept_them_in_flight() -> None:
    study = _study()
    fmbench = [r for r in study.load_rows(study.HOLDOUT_CSV) if r.source == "fmbench"]
    found = study.groups(fmbench)
    assert found and all(g.name.startswith("fm ") for g in found)
    for g in found:
        # one payload file per group, whatever each run's mean prompt; none of the levels its client's pool capped
        assert len({study._payload_of(r) for r in g.rows}) == 1
        assert max(r.concurrency for r in g.rows) <= study.FMBENCH_CLIENT_THREADS
    assert len(found) < len({(r.model, r.input_tokens, r.output_tokens) for r in fmbench})  # runs' means merge
    # a real choice: Llama 2 13B's short-prompt bucket was measured on three instance types
    short_13b = next(g for g in found if g.model == "llama2-13b" and g.payload.input_tokens < 500)
    assert {r.instance_type for r in short_13b.rows} == {"ml.g5.12xlarge", "ml.g5.24xlarge", "ml.g5.48xlarge"}


@pytest.mark.slow
def test_held_out_study_recommends_with_constants_fitted_without_the_source() -> None:
    study = _study()
    consts = planner_constants.MEASURED["tgi-1"][0]
    outcomes = study.held_out_study(only="fm llama2-70b 304")
    group = next(g for g in study.groups(study.load_rows(study.HOLDOUT_CSV)) if g.name.startswith("fm llama2-70b 304"))
    assert [o.target_ms for o in outcomes] == sorted({math.ceil(r.ms_per_token or 0) for r in group.rows})
    assert all(o.group == group.name for o in outcomes)
    # the fold's constants were installed only while it ran
    assert planner_constants.MEASURED["tgi-1"][0] == consts

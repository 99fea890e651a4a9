"""The vLLM/SGLang accuracy study (benchmarks/engine_accuracy.py): every published row is replayed or left out with a
reason, the unit-time traces cost exactly as the simulator does, and the error stays where docs/studies.md puts it."""

from __future__ import annotations

import csv
import dataclasses
import statistics
from types import ModuleType

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from sagellm.engines import ENGINES
from sagellm.engines.engine import CUDA_GRAPH_CONSTANTS
from sagellm.planner import StepModel
from sagellm.planner.constants import MEASURED
from sagellm.planner.simulate import Served, SimulatedPromptSet, simulate


def _study() -> ModuleType:
    return load_benchmark("engine_accuracy")


def test_every_row_is_replayed_or_left_out_with_a_reason() -> None:
    study = _study()
    cases, skipped = study.load_cases()
    assert len(cases) + len(skipped) == 271  # engines.md: 271 rows
    assert len(cases) == 180  # 13 DeepSeek-R1 rows (MLA) replayed since Model describes compressed KV
    assert all(why for _, _, why in skipped)
    assert {c.engine for c in cases} == {"vllm", "sglang"}
    for c in cases:  # the copy holds its weights and at least one request's KV
        assert c.shape().memory_shortfall_gb == 0 and c.kv_tokens >= c.input_tokens + c.output_tokens


# vLLM and SGLang at c=1 (A10G), a vLLM burst of 1000 (H100), SGLang's ShareGPT burst (H100: lengths spread), and
# SGLang's cookbook at c=16 (holdout2.csv: sglang.bench_serving's random lengths, 8 × A100)
@pytest.mark.parametrize(("csv_name", "row"), [("engines.csv", 262), ("engines.csv", 261), ("engines.csv", 195),
                                               ("engines.csv", 187), ("holdout2.csv", 1)])
def test_costing_a_unit_time_trace_gives_what_the_simulator_gives(csv_name: str, row: int) -> None:
    # The schedule does not depend on how long passes take, so a trace recorded on unit-time passes and costed
    # afterwards must give the simulation's own request times.
    study = _study()
    case = next(c for c in study.load_cases(study.DEFAULT_CSV.with_name(csv_name))[0] if c.index == row)
    tr = study.trace(case)
    steps = StepModel(case.shape())
    # Without the front end's latency: the simulator delays each hand-over by it, which moves a closed loop's sends off
    # pass ends once requests differ in length; `predict` adds it outside the passes (the last test of this file).
    steps.__dict__["k"] = dataclasses.replace(steps.k, request_latency_s=0.0)
    spread = study.request_lengths(case)
    sizes = spread.__getitem__ if spread is not None else None
    sim = simulate(Served(steps, study.limits_of(case), ENGINES[case.engine].scheduling, 1), case.input_tokens,
                   case.output_tokens, SimulatedPromptSet(case.prompts, case.concurrency), timeout_s=None,
                   every_pass=True, sizes=sizes)
    reqs = sim.measured
    ttft = statistics.median(r.first_token_s - r.arrived_s for r in reqs) * 1000
    tpot = statistics.median((r.last_token_s - r.first_token_s) / (r.output_tokens - 1) for r in reqs) * 1000
    thr = sum(r.output_tokens for r in reqs) / (max(r.end_s for r in reqs) - min(r.arrived_s for r in reqs))
    predicted = study.predict(tr, study.physics(case, tr.passes), steps.k)
    assert np.allclose(predicted[:3], (ttft, tpot, thr), rtol=1e-6)


def _trace(study: ModuleType, passes: list[tuple[int, int, int, int, int]], arrived: list[int], first: list[int],
           last: list[int], tokens: list[int]):
    return study.Trace(np.array(passes, dtype=float), *(np.array(x) for x in (arrived, first, last, tokens)))


def test_median_itl_pools_every_token_gap_a_sequence_waits() -> None:
    study = _study()
    # One request after another (c = 1, vLLM): a prompt pass, two decodes; again. Passes take 1, .1, .2, 1, .1, .3 s:
    # the gaps are .1, .2 and .1, .3 (the second request's first decode is not charged the first one's end or its own
    # prompt pass); pooled, their lower median is .1 (a mean of per-request medians would say .175).
    one_by_one = _trace(study, [(10, 1, 0, 0, 0), (0, 0, 1, 11, 0), (0, 0, 1, 12, 0), (10, 1, 0, 0, 0),
                                (0, 0, 1, 11, 0), (0, 0, 1, 12, 0)], [0, 3], [1, 4], [3, 6], [3, 3])
    clock = np.array([0, 1, 1.1, 1.3, 2.3, 2.4, 2.7])
    assert study._median_itl(one_by_one, clock) == pytest.approx(0.1)
    # SGLang alternates: a second prompt's prefill pass (.5 s) stalls the running sequence, whose gap is then .7 s;
    # the newcomer's first gap is its decode pass alone. Gaps: .1, .7, .2 and .2, .2: median .2.
    alternating = _trace(study, [(10, 1, 0, 0, 0), (0, 0, 1, 11, 0), (10, 1, 0, 0, 0), (0, 0, 2, 23, 0),
                                 (0, 0, 2, 25, 0)], [0, 1], [1, 3], [5, 5], [4, 3])
    clock = np.array([0, 1, 1.1, 1.6, 1.8, 2.0])
    assert study._median_itl(alternating, clock) == pytest.approx(0.2)
    # Slower decodes once two run (1 s each): gaps .1, 1.5, 1 and 1, 1: the median follows the step that most tokens
    # wait for, 1 s.
    assert study._median_itl(alternating, np.array([0, 1, 1.1, 1.6, 2.6, 3.6])) == pytest.approx(1.0)


def test_sharegpt_levels_are_replayed_with_sharegpts_spread_at_their_stated_means() -> None:
    # gpustack's ShareGPT bursts state mean lengths only; the replay draws each request from ShareGPT's own lengths
    # (data/sharegpt_lengths.csv) scaled to those means, the same draws on every run.
    study = _study()
    case = next(c for c in study.load_cases()[0] if c.index == 187)
    assert case.sharegpt and case.prompts == 1000
    drawn = np.array(study.sharegpt_lengths(case))
    assert study.sharegpt_lengths(case) == [tuple(p) for p in drawn.tolist()]  # seeded by the row
    assert drawn.mean(axis=0) == pytest.approx((case.input_tokens, case.output_tokens), rel=0.01)
    spread = drawn.std(axis=0) / drawn.mean(axis=0)
    assert np.all((spread > 0.8) & (spread < 1.3))  # ShareGPT's: both sides about as spread as their mean
    assert not next(c for c in study.load_cases()[0] if c.index == 195).sharegpt  # vLLM's random dataset: fixed


def _holdout2_cases(study: ModuleType) -> list:
    return study.load_cases(study.DEFAULT_CSV.with_name("holdout2.csv"))[0]


def test_sglang_random_levels_are_replayed_with_the_lengths_bench_serving_drew() -> None:
    # sgl-cookbook's levels ran `sglang.bench_serving --dataset-name random` without --random-range-ratio (default
    # 0.0) or --seed (default 1): each request's lengths uniform from 1 to the set one. Drawn as the tool draws them,
    # the totals are the ones the pages print (holdout2.md), so the replay sends the very requests the source did.
    study = _study()
    cookbook = [c for c in _holdout2_cases(study) if c.source == "sgl-cookbook"]
    assert len(cookbook) == 42 and all(c.sglang_random is not None for c in cookbook)
    for c in cookbook:
        set_in, set_out, ratio, seed = c.sglang_random
        assert ratio == 0.0 and seed == 1 and (set_in, set_out) in {(1000, 1000), (1000, 8000), (8000, 1000)}
        drawn = study.sglang_random_draws(c)
        assert len(drawn) == c.prompts and drawn.min() >= 1
        assert drawn[:, 0].max() <= set_in and drawn[:, 1].max() <= set_out
        # the published means (totals ÷ requests, rounded to a token here) within one token of the tool's draws
        assert np.all(np.abs(drawn.mean(axis=0) - (c.input_tokens, c.output_tokens)) <= 1.5)
        replayed = np.array(study.request_lengths(c))
        assert replayed.mean(axis=0) == pytest.approx((c.input_tokens, c.output_tokens), rel=0.01)
        assert np.all(np.abs(replayed - drawn) <= np.ceil(drawn * 0.01))  # scaled by at most a percent
    level = next(c for c in cookbook if c.prompts == 320 and c.sglang_random[0] == 8000)
    spread = study.sglang_random_draws(level)
    assert np.all(spread.std(axis=0) / spread.mean(axis=0) > 0.5)  # uniform from 1: sd ≈ 0.58 × the mean
    assert study.request_lengths(level) == study.request_lengths(level)  # the same draws on every run


def test_vllm_random_levels_are_replayed_at_their_set_lengths() -> None:
    # `vllm bench serve --dataset-name random` draws from [L·(1−r), L·(1+r)] with r defaulting to 0.0: one length
    # for every request, so its rows keep the means; and `--lengths means` puts every level back at its means.
    study = _study()
    random_vllm = []
    for path in (study.DEFAULT_CSV, study.DEFAULT_CSV.with_name("holdout2.csv")):
        with path.open() as f:
            by_tool = {i for i, r in enumerate(csv.DictReader(f)) if r["dataset"].startswith("vllm bench serve random")}
        random_vllm += [c for c in study.load_cases(path)[0] if c.index in by_tool]
    assert len(random_vllm) >= 50 and {c.engine for c in random_vllm} == {"vllm", "sglang"}  # gpustack's and wmx's
    assert all(c.sglang_random is None and study.request_lengths(c) is None for c in random_vllm)
    cases = study.load_cases()[0] + _holdout2_cases(study)
    cookbook = next(c for c in cases if c.sglang_random is not None)
    sharegpt = next(c for c in cases if c.sharegpt)
    try:
        study.LENGTHS = "sharegpt"  # round 5's replay: ShareGPT levels drawn, the rest at the means
        assert study.request_lengths(cookbook) is None and study.request_lengths(sharegpt) is not None
        study.LENGTHS = "means"
        assert study.request_lengths(cookbook) is None and study.request_lengths(sharegpt) is None
    finally:
        study.LENGTHS = "drawn"


def test_bursts_of_four_token_requests_are_scored_apart_as_front_end_bound() -> None:
    # gpustack's 128-in/4-out bursts of ~1,000 measure the server's request handling (docs/studies.md): they are not
    # predicted and never fitted; every other level stays in.
    study = _study()
    cases = study.load_cases()[0]
    front = [c for c in cases if c.front_end_bound]
    assert len(front) == 13
    assert all(c.concurrency is None and c.output_tokens == 4 and c.prompts >= 984 for c in front)
    assert all(c.output_tokens > study.FRONT_END_MAX_OUTPUT for c in cases if not c.front_end_bound and
               c.concurrency is None)


def test_the_borrowed_constants_reproduce_the_study_on_the_single_request_rows() -> None:
    # varad-more-a10g: seven models on one A10G at concurrency 1, both engines (docs/studies.md: TPOT 5.4 %,
    # throughput 5.0 %, TTFT 39.2 % with TGI_1's constants; the prompts' lengths are assumed).
    study = _study()
    s = study.build(cache=False, select=lambda c: c.source == "varad-more-a10g")
    got = study.table(s.score(study.borrowed()))
    assert got["n"] == 11
    assert got["tpot"] < 7 and got["thr"] < 7 and got["ttft"] < 45


def test_vllm_sglang_and_lmi_run_the_set_that_beat_tgi_1_on_rows_neither_had_seen() -> None:
    # Round 5's set (planner.constants.VLLM_1) met the issue's targets leave-one-source-out and then beat TGI_1 on the
    # second hold-out, 49 published rows frozen before anyone scored them (test below; docs/studies.md).
    for kind in ("vllm", "sglang", "lmi"):
        assert ENGINES[kind].generation(None).constants_from == CUDA_GRAPH_CONSTANTS == "vllm"
    assert set(MEASURED) == {"tgi-1", "vllm"}
    assert MEASURED["vllm"][0] is study_constants().VLLM_1


def study_constants() -> ModuleType:
    return _study().planner_constants


@pytest.mark.slow
def test_on_the_second_hold_out_the_shipped_set_beats_tgi_1_on_ttft_tpot_and_throughput_together() -> None:
    # benchmarks/data/holdout2.csv: 49 levels from three sources the project had not seen, committed before any
    # scoring (holdout2.md). The rule set before it was opened: ship when the mean of TTFT, TPOT and throughput
    # MAPE beats TGI_1's. With SGLang's cookbook levels replayed at the lengths sglang.bench_serving drew (uniform up
    # to the set length, not every request at the mean, whose closed loops ran in lock-step waves: TTFT 430 %), the
    # set scores TTFT 41.8 · TPOT 20.3 · throughput 25.9 · ITL 17.2 %, TGI_1 29.2 · 148 · 55.6 · 158 (docs/studies.md).
    study = _study()
    s = study.build(study.DEFAULT_CSV.with_name("holdout2.csv"))
    assert len(s.cases) == 49
    tgi, ready = (study.table(s.score(k)) for k in (study.borrowed(), study.ready()))
    assert ready["all"] < tgi["all"]
    assert ready["itl"] < 20 < tgi["itl"] and ready["thr"] < tgi["thr"] and ready["tpot"] < tgi["tpot"]
    assert ready["ttft"] == pytest.approx(41.8, abs=2.0) and tgi["ttft"] == pytest.approx(29.2, abs=2.0)
    assert ready["all"] == pytest.approx(29.8, abs=1.5) and tgi["all"] == pytest.approx(74.1, abs=2.0)


@pytest.mark.slow
def test_the_study_holds_the_figures_docs_studies_md_gives() -> None:
    # The 137 rows (front-end-bound bursts apart), ShareGPT levels replayed with ShareGPT's spread, TGI_1: 31.8 % over
    # TTFT, TPOT and throughput. Leave-one-source-out on the 108 rows outside the hold-out: TGI_1 33.3 %, the per-layer
    # form fitted per engine 29.0 %, its physics priors with nothing fitted 23.3 %. On the 29 held-out rows TGI_1 scores
    # 26.2 %, the priors 27.3 % (throughput 19.6 → 28.2 %, big MoE models at TP 8), so they did not ship. A change that
    # moves these reruns the study and updates docs/studies.md ("Where the error comes from").
    study = _study()
    s = study.build()
    assert study.table(s.score(study.borrowed()))["all"] == pytest.approx(31.8, abs=1.0)
    pooled = study.leave_one_source_out(s)["pooled held-out rows"]
    assert pooled["borrowed"]["n"] == 108
    assert pooled["borrowed"]["all"] == pytest.approx(33.3, abs=1.0)
    assert pooled["fitted"]["all"] == pytest.approx(29.0, abs=1.5)
    assert pooled["priors"]["all"] == pytest.approx(23.3, abs=1.0)
    # Round 5: the set ready for vLLM, LMI and SGLang (VLLM_1; the front end's latency taken from the other sources)
    # meets the targets on each source held out: TTFT 31.2, throughput 14.7, ITL 15.8 % (docs/studies.md).
    ready = pooled["ready"]
    assert ready["ttft"] == pytest.approx(31.2, abs=1.0) and ready["ttft"] <= 35
    assert ready["thr"] == pytest.approx(14.7, abs=0.5)
    assert ready["itl"] == pytest.approx(15.8, abs=1.0) and ready["itl"] <= 20
    assert ready["all"] < pooled["priors"]["all"] < pooled["borrowed"]["all"]
    held = study.hold_out_check(s)["hold-out"]
    assert held["borrowed"]["n"] == 29
    assert held["borrowed"]["all"] == pytest.approx(26.2, abs=1.0)
    assert held["priors"]["all"] == pytest.approx(27.3, abs=1.0)
    assert held["priors"]["all"] > held["borrowed"]["all"]


def test_the_hold_out_is_fixed_before_fitting_and_keeps_repeats_together() -> None:
    # Every row of a (GPU, served model) pair sits on one side, so repeats of a level cannot leak across.
    study = _study()
    cases = [c for c in study.load_cases()[0] if not c.eager]
    held = [c for c in cases if study.held_out(c)]
    assert len(held) == 33
    for c in cases:
        assert study.held_out(c) == any(h.gpu == c.gpu and h.model_id == c.model_id for h in held)


def test_the_front_end_latency_is_the_median_ttft_the_passes_leave_at_low_load() -> None:
    # Two closed rows at c = 1 whose measured TTFT is the predicted pass plus 10 and 30 ms: the front end's latency
    # is their median.
    study = _study()
    s = study.build(select=lambda c: c.source == "varad-more-a10g")
    k = study.planner_constants.VLLM_1
    a, b = s.cases[:2]
    bare = dataclasses.replace(k, request_latency_s=0.0)
    pa, pb = (study.predict(s.trace[c.index], s.physics[c.index], bare)[0] for c in (a, b))
    s.cases[0], s.cases[1] = (dataclasses.replace(a, ttft_ms=pa + 10), dataclasses.replace(b, ttft_ms=pb + 30))
    assert a.concurrency == b.concurrency == 1
    assert study.fit_request_latency(s, s.cases[:2], k) == pytest.approx(0.020, abs=1e-9)
    # With it, a row's predicted TTFT grows by exactly that, and a closed loop pays it once a request.
    with_latency = dataclasses.replace(k, request_latency_s=0.02)
    before, after = (study.predict(s.trace[a.index], s.physics[a.index], kk) for kk in (bare, with_latency))
    assert after[0] == pytest.approx(pa + 20, abs=1e-6) and after[1] == before[1]
    tokens = s.trace[a.index].tokens.sum()
    assert tokens / after[2] - tokens / before[2] == pytest.approx(0.02 * a.prompts, rel=1e-6)

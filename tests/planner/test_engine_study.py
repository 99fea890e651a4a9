"""The vLLM/SGLang accuracy study (benchmarks/engine_accuracy.py): every published row is replayed or left out with a
reason, the unit-time traces cost exactly as the simulator does, and the error stays where docs/studies.md puts it."""

from __future__ import annotations

import statistics
from types import ModuleType

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from sagellm.engines import ENGINES
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


@pytest.mark.parametrize("row", [262, 261, 195])  # vLLM and SGLang at c=1 (A10G), a vLLM burst of 1000 (H100)
def test_costing_a_unit_time_trace_gives_what_the_simulator_gives(row: int) -> None:
    # The schedule does not depend on how long passes take, so a trace recorded on unit-time passes and costed
    # afterwards must give the simulation's own request times.
    study = _study()
    case = next(c for c in study.load_cases()[0] if c.index == row)
    tr = study.trace(case)
    steps = StepModel(case.shape())
    sim = simulate(Served(steps, study.limits_of(case), ENGINES[case.engine].scheduling, 1), case.input_tokens,
                   case.output_tokens, SimulatedPromptSet(case.prompts, case.concurrency), timeout_s=None,
                   every_pass=True)
    reqs = sim.measured
    ttft = statistics.median(r.first_token_s - r.arrived_s for r in reqs) * 1000
    tpot = statistics.median((r.last_token_s - r.first_token_s) / (r.output_tokens - 1) for r in reqs) * 1000
    thr = sum(r.output_tokens for r in reqs) / (max(r.end_s for r in reqs) - min(r.arrived_s for r in reqs))
    predicted = study.predict(tr, study.physics(case, tr.passes), steps.k)
    assert np.allclose(predicted, (ttft, tpot, thr), rtol=1e-6)


def test_the_borrowed_constants_reproduce_the_study_on_the_single_request_rows() -> None:
    # varad-more-a10g: seven models on one A10G at concurrency 1, both engines (docs/studies.md: TPOT 5.4 %,
    # throughput 5.0 %, TTFT 39.2 % with TGI_1's constants; the prompts' lengths are assumed).
    study = _study()
    s = study.build(cache=False, select=lambda c: c.source == "varad-more-a10g")
    got = study.table(s.score(study.borrowed()))
    assert got["n"] == 11
    assert got["tpot"] < 7 and got["thr"] < 7 and got["ttft"] < 45


def test_vllm_and_sglang_keep_the_borrowed_constants_the_study_did_not_beat() -> None:
    # Fitted per-engine sets did not beat TGI_1's on held-out sources (docs/studies.md), so none shipped.
    for kind in ("vllm", "sglang", "lmi"):
        assert ENGINES[kind].generation(None).constants_from == "tgi-1"
    assert set(MEASURED) == {"tgi-1"}


@pytest.mark.slow
def test_the_study_holds_the_figures_docs_studies_md_gives() -> None:
    # All 150 rows with TGI_1: 36.2 % over TTFT, TPOT and throughput. The physics form fitted per engine: 35.9 %
    # leave-one-source-out on the 117 rows outside the hold-out (TGI_1 37.4 % there), but 38.9 % on the 33 held-out
    # rows where TGI_1 scores 31.7 %: not better out of sample on both, which is why none shipped. A change that moves
    # these reruns the study and updates docs/studies.md ("Physics terms for today's engines").
    study = _study()
    s = study.build()
    assert study.table(s.score(study.borrowed()))["all"] == pytest.approx(36.2, abs=1.0)
    pooled = study.leave_one_source_out(s)["pooled held-out rows"]
    assert pooled["borrowed"]["n"] == 117
    assert pooled["borrowed"]["all"] == pytest.approx(37.4, abs=1.0)
    assert pooled["fitted"]["all"] == pytest.approx(35.9, abs=1.5)
    held = study.hold_out_check(s)["hold-out"]
    assert held["borrowed"]["n"] == 33
    assert held["borrowed"]["all"] == pytest.approx(31.7, abs=1.0)
    assert held["fitted"]["all"] == pytest.approx(38.9, abs=2.0)
    assert held["fitted"]["all"] > held["borrowed"]["all"]


def test_the_hold_out_is_fixed_before_fitting_and_keeps_repeats_together() -> None:
    # Every row of a (GPU, served model) pair sits on one side, so repeats of a level cannot leak across.
    study = _study()
    cases = [c for c in study.load_cases()[0] if not c.eager]
    held = [c for c in cases if study.held_out(c)]
    assert len(held) == 33
    for c in cases:
        assert study.held_out(c) == any(h.gpu == c.gpu and h.model_id == c.model_id for h in held)

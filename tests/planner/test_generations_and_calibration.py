"""What the planner does with server generations (which constants, what physics, what `plan` says) and the
calibration fit."""

import math
from dataclasses import replace

import pytest

from sagellm.catalog import find_instance, find_model
from sagellm.engines import GENERATIONS
from sagellm.planner import (
    Calibration,
    Observation,
    Payload,
    Shape,
    fit_calibration,
    predict,
    predict_point,
    step_time_notes,
)
from sagellm.planner.curve import _prefill_passes

P = Payload(256, 256)


def shape(**kw) -> Shape:
    return Shape(find_model("llama2-7b"), find_instance("ml.g5.12xlarge"), 4, **kw)


def test_an_unknown_generation_fails_at_once():
    with pytest.raises(ValueError, match="known: tgi-1, tgi-3, lmi"):
        shape(generation="tgi-9")


def test_plan_says_which_generation_the_step_times_are_calibrated_for():
    (measured,) = step_time_notes(shape(generation="tgi-1"))
    assert measured == ("step times calibrated for TGI 1.x (113 published SageMaker measurements (AWS JumpStart, "
                        "Hugging Face TGI 1.0.3))")
    (line,) = step_time_notes(shape(generation="tgi-3"))
    assert line.startswith("step times calibrated for TGI 1.x") and "for TGI 2.x–3.x they are an extrapolation" in line
    curve = predict(shape(generation="lmi"), P, (1,))
    assert curve.to_dict()["step_times"] == {
        "generation": "lmi", "server": "LMI (vLLM)", "calibrated_for": "vLLM 0.30 (AWS SageMaker image)",
        "measured_on": "NVIDIA AIConfigurator 0.12.0's kernel tables, checked on 157 published vLLM and SGLang levels",
        "extrapolated": True, "calibration": None}
    assert curve.notes[0] == step_time_notes(shape(generation="lmi"))[0]


def test_tgi_3_admits_waiting_prompts_at_every_step_and_a_ratio_router_groups_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # TGI 3 chunks prefills by default and then ignores WAITING_SERVED_RATIO and MAX_WAITING_TOKENS: waiting
    # prompts join the batch at every step (backends/v3/src/backend.rs, v3.3.6). A router with a ratio
    # (TGI 3 without chunking: 0.3) waits to group them; TGI 1.x's 1.2 runs a closed loop in whole waves.
    monkeypatch.setitem(GENERATIONS, "ratio-0.3", replace(GENERATIONS["tgi-3"], name="ratio-0.3",
                                                          waiting_served_ratio=0.3))
    every_step = predict_point(shape(generation="tgi-3"), P, 16)
    grouped = predict_point(shape(generation="ratio-0.3"), P, 16)
    waves = predict_point(shape(generation="tgi-1"), P, 16)
    assert every_step.queue_wait_s == 0  # no prompt waits for others
    assert grouped.queue_wait_s > 0  # prompts wait up to MAX_WAITING_TOKENS steps to be grouped
    assert waves.queue_wait_s == 0  # the batch empties, the whole wave is prefilled at once
    # 16 prompts of 256 tokens fill one 4,096-token prefill pass: streams that start together stay in that
    # group, as a wave does. A ratio router's groups are smaller, so more passes pause decoding.
    assert every_step.itl_ms == pytest.approx(waves.itl_ms)
    assert grouped.itl_ms > every_step.itl_ms
    # A smaller prefill budget splits the loop into more groups, each pass pausing the batch's decode.
    split = predict_point(shape(generation="tgi-3", max_batch_prefill_tokens=1024), P, 16)
    assert split.itl_ms > every_step.itl_ms
    assert split.ttft_ms < every_step.ttft_ms  # ... and each prompt's own pass is shorter
    # A lone request never waits, whatever the ratio.
    assert predict_point(shape(generation="tgi-1"), P, 1).queue_wait_s == 0


def test_every_step_admission_prefills_a_closed_loop_in_groups_the_prefill_budget_holds():
    # The groups a closed loop starts in (as many prompts as one pass takes) persist: prompts prefilled
    # together finish and return together. One pass per group per lifetime ...
    tgi3 = GENERATIONS["tgi-3"]
    assert _prefill_passes(16, Payload(256, 256), 4096, tgi3) == (1.0, 0.0)
    assert _prefill_passes(64, Payload(256, 256), 4096, tgi3) == (4.0, 0.0)
    assert _prefill_passes(64, Payload(1000, 256), 4096, tgi3) == (16.0, 0.0)  # 4 prompts of 1,000 per pass
    # ... and never more than one per decode step: out × (1 - e^(-running/out)) steps of a lifetime see an
    # arrival when they are spread out (here every prompt needs a pass of its own, 64 > 32 steps).
    passes, _ = _prefill_passes(64, Payload(4096, 32), 4096, tgi3)
    assert passes == pytest.approx(32 * (1 - math.exp(-2)))


def test_calibration_multiplies_the_three_step_terms():
    plain = predict_point(shape(), P, 8)
    slower = predict_point(shape(calibration=Calibration(2.0, 2.0, 2.0)), P, 8)
    assert slower.ms_per_token == pytest.approx(2 * plain.ms_per_token)
    assert slower.throughput_tokens_per_s == pytest.approx(plain.throughput_tokens_per_s / 2)


def observed(truth: Calibration, levels=(1, 2, 4, 8, 16, 32, 64, 128), **kw) -> list[Observation]:
    out = []
    for c in levels:
        p = predict_point(shape(calibration=truth), P, c)
        out.append(Observation(shape(), P, c, ms_per_token=p.ms_per_token, ttft_ms=p.ttft_ms,
                               throughput_tokens_per_s=p.throughput_tokens_per_s, **kw))
    return out


def test_fit_recovers_known_multipliers_and_reports_the_error_it_removes():
    truth = Calibration(0.8, 1.5, 1.2)
    fit = fit_calibration(observed(truth), source="test")
    for name in ("decode_floor", "decode_per_sequence", "prefill"):
        # The pull toward 1 shrinks each factor a little; it still covers most of the way to the truth.
        fitted, true = getattr(fit.calibration, name), getattr(truth, name)
        assert abs(fitted - true) <= 0.25 * abs(true - 1) + 0.01, name
    assert fit.levels == 8 and fit.calibration.source == "test"
    assert set(fit.error_before) == {"ms_per_token", "ttft_ms", "throughput"}
    assert all(fit.error_after[m] < fit.error_before[m] / 3 for m in fit.error_before)


def test_fit_keeps_a_term_the_runs_cannot_see_at_the_physics_value():
    # Only throughput at batch 1 measured: prefill and per-sequence cost barely show; the fit leaves them ~1.
    truth = Calibration(1.4, 1.0, 1.0)
    obs = [replace(o, ms_per_token=None, ttft_ms=None) for o in observed(truth, levels=(1,))]
    fit = fit_calibration(obs)
    assert fit.calibration.decode_per_sequence == pytest.approx(1.0, abs=0.05)
    assert fit.calibration.decode_floor > 1.2


def test_fit_bounds_each_factor_and_refuses_runs_without_usable_levels():
    # Three times slower than predicted everywhere: a correction that large says the model misses this shape.
    slow = [replace(o, ms_per_token=o.ms_per_token * 3, ttft_ms=o.ttft_ms * 3,
                    throughput_tokens_per_s=o.throughput_tokens_per_s / 3) for o in observed(Calibration())]
    cal = fit_calibration(slow).calibration
    assert (cal.decode_floor, cal.decode_per_sequence, cal.prefill) == (2.0, 2.0, 2.0)
    rejected = [Observation(shape(max_concurrent_requests=4), P, 64, ms_per_token=10.0)]
    with pytest.raises(ValueError, match="no level"):
        fit_calibration(rejected)
    with pytest.raises(ValueError, match="no level"):
        fit_calibration([Observation(shape(), P, 8)])

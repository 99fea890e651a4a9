"""A level predicted from simulated requests (results.simulated): the modelled clients, and the curve `plan`
prints."""

from __future__ import annotations

import pytest

from sagellm.clock import Clock
from sagellm.planner import StepModel
from sagellm.planner.simulate import simulate
from sagellm.profiles import design_for
from sagellm.profiles.plan import served
from sagellm.results import simulated
from sagellm.results.simulated import (
    CLIENT_START_GAP_S,
    CLIENT_TURNAROUND_S,
    modelled_clients,
    simulated_curve,
    simulated_level,
)


def test_without_measured_clients_the_loop_is_modelled_clients_that_do_not_send_in_lockstep() -> None:
    load = modelled_clients(16, clock=Clock(0.2))
    assert load == modelled_clients(16, clock=Clock(0.2))  # seeded
    assert load != modelled_clients(16, clock=Clock(0.2), seed=1)
    assert load.starts_s[1] - load.starts_s[0] == pytest.approx(CLIENT_START_GAP_S / 0.2)  # on the emulator's clock
    turns = {t for gaps in load.think_s for t in gaps}
    assert len(turns) == 16 * 16
    assert min(CLIENT_TURNAROUND_S) / 0.2 <= min(turns) and max(turns) <= max(CLIENT_TURNAROUND_S) / 0.2
    d = design_for("max-throughput", "falcon-7b", None)
    sim = simulate(served(d.plan(), StepModel(d.shape())), 256, 64, load, requests=64)
    assert len({r.arrived_s for r in sim.requests}) == len(sim.requests)  # no two requests arrive together


def test_a_levels_modelled_clients_are_the_first_of_a_larger_levels_whichever_is_drawn_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulated, "_DRAWN", {})
    small_first = modelled_clients(8), modelled_clients(32)
    monkeypatch.setattr(simulated, "_DRAWN", {})
    large_first = modelled_clients(32), modelled_clients(8)
    assert small_first == large_first[::-1]
    assert small_first[1].think_s[:8] == small_first[0].think_s
    assert modelled_clients(8, seed=1) != small_first[0]  # each seed its own stream


def test_another_draw_of_the_modelled_clients_moves_ttft_not_ms_per_token() -> None:
    # At 4 a TTFT of a few passes rests on which pass each request joins, so the draw of the clients moves it;
    # benchmarks/plan_vs_emulator.py --ceiling counts how often such a draw lands near the prediction.
    d = design_for("max-throughput", "falcon-7b", None)
    draws = [simulated_level(d.plan(), StepModel(d.shape()), d.payload, concurrency=4, requests=200, seed=seed)
             for seed in range(3)]
    assert len({level.ttft_ms.p50 for level in draws}) > 1
    tokens = [level.latency_ms_per_token.p50 or 0.0 for level in draws]
    assert max(tokens) / min(tokens) < 1.05


def test_plans_curve_is_the_simulated_requests_p50_with_their_p90_beside_it() -> None:
    d = design_for("max-throughput", "falcon-7b", None)
    curve = simulated_curve(d.plan(), d.shape(), d.payload, (1, 16), "us-east-1")
    level = simulated_level(d.plan(), StepModel(d.shape()), d.payload, concurrency=16)
    point = curve.points[1]
    assert point.ms_per_token == level.latency_ms_per_token.p50
    assert (point.ttft_ms, point.ttft_ms_p90) == (level.ttft_ms.p50, level.ttft_ms.p90)
    assert point.throughput_tokens_per_s == level.throughput_tokens_per_s
    assert curve.knee is not None and "simulated requests" in curve.notes[0]

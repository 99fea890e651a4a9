"""The one simulated clock: its range rule (checked here only) and its conversions."""

from __future__ import annotations

import pytest

from sagellm.clock import REAL, Clock
from sagellm.errors import InputError


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5, float("nan")])
def test_a_scale_outside_zero_to_one_is_bad_input_naming_where_it_came_from(scale: float) -> None:
    with pytest.raises(InputError) as bare:
        Clock(scale)
    with pytest.raises(InputError) as named:
        Clock.of(scale, "--time-scale")
    assert bare.value.messages == [f"time_scale: {scale} must be in (0, 1] (0.1 runs ten times faster)"]
    assert named.value.messages == [f"--time-scale: {scale} must be in (0, 1] (0.1 runs ten times faster)"]
    assert Clock.scale_problem(scale, "Local.time_scale") == f"Local.time_scale: {scale} must be in (0, 1] (0.1 runs ten times faster)"


@pytest.mark.parametrize("scale", [1e-6, 0.05, 1.0])
def test_a_scale_in_range_is_accepted(scale: float) -> None:
    assert Clock.scale_problem(scale, "--time-scale") is None
    assert Clock.of(scale, "--time-scale") == Clock(scale)


def test_a_compressed_clock_runs_simulated_time_faster_than_wall_time() -> None:
    tenfold = Clock(0.1)
    assert tenfold.compressed and not REAL.compressed
    assert tenfold.wall_s(30.0) == pytest.approx(3.0)  # 30 simulated seconds pass in 3 wall seconds
    assert tenfold.simulated_s(3.0) == pytest.approx(30.0)
    assert tenfold.wall_rate(2.0) == pytest.approx(20.0)  # 2 requests per simulated second, 20 per wall second
    assert tenfold.simulated_s(tenfold.wall_s(7.25)) == pytest.approx(7.25)


def test_real_time_changes_nothing() -> None:
    assert REAL == Clock() == Clock(1.0)
    assert (REAL.wall_s(4.5), REAL.simulated_s(4.5), REAL.wall_rate(4.5)) == (4.5, 4.5, 4.5)

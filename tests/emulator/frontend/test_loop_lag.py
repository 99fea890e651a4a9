"""The one event-loop lag probe the bench and the emulator share: a window's mean, max and mean since a reset."""

from __future__ import annotations

from sagellm.emulator.frontend.loop_lag import LoopLag


def test_a_window_reads_the_mean_of_the_wake_ups_inside_it() -> None:
    lag = LoopLag(keep_samples=True)
    for woke, late in ((1.0, 0.002), (2.0, 0.004), (3.0, 0.030)):
        lag.record(woke, late)
    assert lag.mean_ms(1.5, 3.0) == 1000 * (0.004 + 0.030) / 2
    assert lag.mean_ms(4.0, 5.0) is None  # no probe woke then


def test_max_and_mean_count_since_the_last_reset_and_never_below_zero() -> None:
    lag = LoopLag()
    lag.record(1.0, 0.5)
    lag.reset()
    lag.record(2.0, -1e-6)  # the two clocks a hair apart: on time, not early
    lag.record(3.0, 0.010)
    assert lag.snapshot() == {"max": 0.010, "avg": 0.010 / 2, "samples": 2}
    assert lag.samples == []  # the emulator keeps no samples: it runs for hours

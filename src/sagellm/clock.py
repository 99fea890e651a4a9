"""The simulated clock the bench, the emulator and results share: real time, or an emulator's compressed time.

`scale` is wall seconds per simulated second: an emulator at 0.1 runs ten times faster than the times it reports;
1.0 is a real server. Every layer may import this module (no import-linter layer owns it, as with errors.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sagellm.errors import InputError


@dataclass(frozen=True)
class Clock:
    """Simulated time at `scale` wall seconds per simulated second (1.0: real time)."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        if problem := Clock.scale_problem(self.scale, "time_scale"):
            raise InputError(problem)

    @staticmethod
    def scale_problem(scale: float, option: str) -> str | None:
        """The one range rule, as a one-line message naming `option`; None when `scale` is fine."""
        # An emulator may run faster than real time, never slower: a time scale above 1 only wastes wall time.
        if not 0 < scale <= 1:
            return f"{option}: {scale} must be in (0, 1] (0.1 runs ten times faster)"
        return None

    @staticmethod
    def of(scale: float, option: str) -> Clock:
        """The clock for a user's `scale`, or an InputError naming the `option` it came from."""
        if problem := Clock.scale_problem(scale, option):
            raise InputError(problem)
        return Clock(scale)

    @property
    def compressed(self) -> bool:
        """Whether simulated time runs faster than wall time (an emulator at 1.0 is emulated, not compressed)."""
        return self.scale != 1.0

    def wall_s(self, simulated_s: float) -> float:
        """Wall seconds that `simulated_s` simulated seconds take."""
        return simulated_s * self.scale

    def simulated_s(self, wall_s: float) -> float:
        """Simulated seconds that `wall_s` wall seconds stand for."""
        return wall_s / self.scale

    def wall_rate(self, simulated_rate: float) -> float:
        """Events per wall second for `simulated_rate` events per simulated second."""
        return simulated_rate / self.scale


REAL = Clock()

"""Over-saturation: an open-loop level whose requests in flight keep growing, or whose first token waits past a
limit, ends early instead of paying for its full length.

The rule follows guidellm's over-saturation constraint (`--constraint kind=over_saturation`,
vllm-project/guidellm `src/guidellm/scheduler/constraints/saturation.py`), on the level's simulated clock:
- **Queue growth**: at every send the requests in flight (sent, not yet answered) are sampled, from the end of
  the level's ramp on (before it the count rises by design, as the first requests' lifetimes fill up). Once
  `window_s` has passed since then, the samples of the last `window_s` get a least-squares line; the level is
  over-saturated when its slope is positive, the 95 % confidence half-width of the slope is below the slope
  itself, and the line rises over the window by at least `min_growth` of the requests that arrived in it (at the
  default a quarter: the endpoint answers under three in four of the arrivals). As in guidellm the
  sample count in the test is at most the window's seconds (samples a fraction of a second apart are not
  independent), and the t quantile is the Cornish–Fisher expansion of the normal one (Abramowitz & Stegun
  26.7.5), so no scipy at run time.
- **First token**: any request whose first token came more than `max_ttft_s` after it was sent (default 60 s,
  SageMaker's invocation timeout: past it the platform gives up on the request anyway).
Where it differs from guidellm, and why: guidellm stops only when the in-flight count *and* the TTFT both have
a significant positive slope (half-width under twice the slope), and with most TTFTs over 2.5 s. Here the
in-flight growth alone decides, with a stricter test (half-width under the slope) and a size of growth that
matters (a significant trickle, or a burst after a stall, is not a queue without bound): in an open loop a count that keeps growing is the definition of arrivals outpacing completions (no
steady state exists, Little's law), while a TTFT is known only when a request returns, a lifetime later; the
TTFT limit is the separate, absolute rule the platform sets.

A closed loop never applies it: its in-flight count is its concurrency and cannot grow, and its TTFT settles at
a steady state; a request past SageMaker's limit there is already the level's timeout stop (`level.StopRule`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import NormalDist

from sagellm.clock import Clock
from sagellm.results.records import RequestRecord

SAGEMAKER_INVOCATION_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SaturationRule:
    """When an open-loop level is over-saturated (simulated seconds)."""

    window_s: float = 30.0  # guidellm's minimum duration before it checks
    min_growth: float = 0.25  # the fitted in-flight count rises by this share of the window's arrivals
    max_ttft_s: float | None = SAGEMAKER_INVOCATION_TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ValueError(f"over-saturation window_s must be positive, got {self.window_s}")
        if self.max_ttft_s is not None and not self.max_ttft_s > 0:
            raise ValueError(f"max_ttft_s must be positive, got {self.max_ttft_s}")


@dataclass(frozen=True)
class OverSaturated:
    """Why a level was stopped as over-saturated, and when (simulated seconds since the level started)."""

    reason: str
    at_s: float


def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile by the Cornish–Fisher expansion of the normal one (Abramowitz & Stegun 26.7.5)."""
    z = NormalDist().inv_cdf(p)
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def growing(samples: list[tuple[float, float]], window_s: float, min_rise: float) -> float | None:
    """The fitted slope (per second) when `samples` (time, count) grow significantly and by at least `min_rise`
    over `window_s`; None when they do not."""
    n = len(samples)
    effective = min(n, window_s)  # guidellm: samples within a second are correlated
    if effective < 3:
        return None
    mean_t = sum(t for t, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in samples)
    sxy = sum((t - mean_t) * (y - mean_y) for t, y in samples)
    if sxx <= 0:
        return None
    slope = sxy / sxx
    if slope <= 0:
        return None
    rss = sum((y - mean_y - slope * (t - mean_t)) ** 2 for t, y in samples)
    half_width = t_quantile(0.975, effective - 2) * math.sqrt(rss / (effective - 2) / sxx)
    if half_width >= slope or slope * window_s < min_rise:
        return None
    return slope


class SaturationWatch:
    """Watches one open-loop level as it runs; `sent` and `answered` say when it is over-saturated."""

    def __init__(self, rule: SaturationRule, clock: Clock, rate: float, level: str):
        self.rule = rule
        self.rate = rate  # requests/s of simulated time
        self.clock = clock  # the records' wall seconds are read on it as simulated seconds
        self.level = level
        self.samples: deque[tuple[float, float]] = deque()
        self.since: float | None = None  # the ramp's end, simulated seconds since the level started

    def ramp_ended(self, at_wall_s: float) -> None:
        """The level's ramp ended `at_wall_s` wall seconds after it started: growth counts from here."""
        self.since = self.clock.simulated_s(at_wall_s)
        self.samples.clear()

    def sent(self, at_wall_s: float, in_flight: int) -> OverSaturated | None:
        """A request was sent with `in_flight` (itself included) unanswered."""
        if self.since is None:
            return None
        now = self.clock.simulated_s(at_wall_s)
        self.samples.append((now, in_flight))
        while self.samples[0][0] < now - self.rule.window_s:
            self.samples.popleft()
        if now - self.since < self.rule.window_s:
            return None
        window = self.rule.window_s
        slope = growing(list(self.samples), window, self.rule.min_growth * self.rate * window)
        if slope is None:
            return None
        return OverSaturated(f"over-saturated at request rate {self.level}: requests in flight grew by "
                             f"{slope:.3g}/s over the last {self.rule.window_s:g} s (now {in_flight})", round(now, 3))

    def answered(self, at_wall_s: float, record: RequestRecord) -> OverSaturated | None:
        """A request returned: is its first token past the limit?"""
        limit = self.rule.max_ttft_s
        ttft = record.server_ttft_s if record.server_ttft_s is not None else record.ttft_s
        if limit is None or ttft is None or self.clock.simulated_s(ttft) <= limit:
            return None
        return OverSaturated(f"over-saturated at request rate {self.level}: a first token took "
                             f"{self.clock.simulated_s(ttft):.3g} s, past the {limit:g} s limit",
                             round(self.clock.simulated_s(at_wall_s), 3))

"""What a power profile may say: a GPU capped at a lower power limit is never faster.

A lower limit can only slow a GPU down (or leave it as fast, where it draws less than either
limit). A profile that measured a lower limit faster than a higher one, beyond what a slice's
timing can tell apart, measured something else: the host's load on a simulated GPU timed by
the wall clock, another process sharing the GPU during one slice. Such a profile is
*untrusted*: nothing is priced or saved from its ratios (the Default estimate takes the runs
as measured, the budget's books the try's own cost, observe mode claims nothing), and every
surface that shows the Default estimate says why (issue 47: a lower limit measured 2.1 times
as fast as the maximum, a "45.7 % of time saved" from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zeus_airflow.core.common.cost import LimitMeasurement

SPEED_NOISE = 0.05
"""How much faster than a higher limit a lower one may measure and still be the same speed:
two slices at limits where the GPU is not capped run at one speed, and a slice's own timing
(a fraction of a second to a few seconds of steps, an energy counter that advances every
0.1 s) tells speeds apart to a few per cent, not better. Beyond this the profile contradicts
physics."""


@dataclass(frozen=True)
class Contradiction:
    """A lower limit measured faster than a higher one, beyond :data:`SPEED_NOISE`."""

    lower_w: int
    higher_w: int
    speedup: float
    """The lower limit's steps/s over the higher one's (> 1 + ``SPEED_NOISE``)."""

    def describe(self) -> str:
        """E.g. ``225 W measured 2.14x the speed of 250 W``."""
        return f"{self.lower_w} W measured {self.speedup:.2f}x the speed of {self.higher_w} W"


def contradiction(measurements: Mapping[int, LimitMeasurement]) -> Contradiction | None:
    """The profile's worst contradiction: the lower limit that measured the most faster than
    the slowest limit above it; None when the profile agrees with physics."""
    worst: Contradiction | None = None
    slowest_above: LimitMeasurement | None = None
    for limit_w in sorted(measurements, reverse=True):
        point = measurements[limit_w]
        if slowest_above is not None:
            speedup = point.steps_per_s / slowest_above.steps_per_s
            if speedup > 1.0 + SPEED_NOISE and (worst is None or speedup > worst.speedup):
                worst = Contradiction(limit_w, slowest_above.power_limit_w, speedup)
        if slowest_above is None or point.steps_per_s < slowest_above.steps_per_s:
            slowest_above = point
    return worst


def trusted(measurements: Mapping[int, LimitMeasurement]) -> bool:
    """Whether a profile's ratios may price or save anything (no :func:`contradiction`)."""
    return contradiction(measurements) is None

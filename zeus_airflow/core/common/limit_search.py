"""Which power limit the profiler measures next: a search, not a sweep.

Energy, time and the Zeus cost per step are close to unimodal over the power limit (they
fall, then rise, or only fall), so a discrete golden-section search finds the best limit
with fewer measured slices than candidates. The maximum limit is always measured first: it
is the Default configuration's limit, and what a run "would have cost at max power" is
priced from it. The minimum comes second, so that a dip at the floor of a noisy curve is
not missed.

The next limit is a pure function of (candidates, measurements so far, objective): the
search is replayed from its start on every call, so a profile interrupted anywhere (and
stored) resumes in the next run exactly where it stood. Points already measured are reused
as probes, so profiles stored by older versions (measured highest first, fully or partly)
continue without measuring again what they hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement

Key = tuple[float, ...]
"""What the search minimises for one measured limit; compared lexicographically."""

GOLDEN_FRACTION = 0.381966
"""1 - 1/phi: where a golden-section probe sits inside a bracket."""


@dataclass(frozen=True)
class LimitObjective:
    """What the search minimises, from the selector (config.SELECTORS) and its inputs.

    ``max_power_w``: MAXPOWER of the Zeus cost (W). For ``min-energy-within-slowdown`` the
    search minimises energy among limits within ``max_slowdown`` of the fastest measured
    one; slower limits rank below every allowed one and worse the lower they are, so the
    key stays unimodal (time per step only falls as the limit rises)."""

    selector: str
    eta: float
    max_power_w: float
    max_slowdown: float = 1.1

    @classmethod
    def of(cls, config: ProfilerConfig, eta: float, max_power_w: float) -> LimitObjective:
        return cls(config.selector, eta, max_power_w, config.max_slowdown)

    def key_function(
        self, measured: Mapping[int, LimitMeasurement]
    ) -> Callable[[LimitMeasurement], Key]:
        """The key of one measurement; ties favour the higher limit, as choose_power_limit."""
        if self.selector == "zeus":
            return lambda m: (m.cost_per_step(self.eta, self.max_power_w), -m.power_limit_w)
        if self.selector == "min-energy":
            return lambda m: (m.energy_per_step_j, -m.power_limit_w)
        if self.selector == "min-time":
            return lambda m: (m.time_per_step_s, -m.power_limit_w)
        allowed_s = min(m.time_per_step_s for m in measured.values()) * self.max_slowdown
        return lambda m: (
            (0.0, m.energy_per_step_j, -m.power_limit_w)
            if m.time_per_step_s <= allowed_s
            else (1.0, -m.power_limit_w, 0.0)
        )


def next_limit_w(
    candidates_w: Sequence[int], measured: Mapping[int, LimitMeasurement], objective: LimitObjective
) -> int | None:
    """The candidate (W) to measure next, or None once the search has converged.

    Every candidate measured always means converged, whatever the objective."""
    limits = sorted(set(candidates_w))
    if not limits:
        return None
    if limits[-1] not in measured:
        return limits[-1]
    if limits[0] not in measured:
        # Both ends before the search: measured curves are noisy near their floor (A40
        # movielens-1m: the cheapest limit is the lowest, past a bump the search alone
        # settles before), and the optimum is the best limit measured anywhere.
        return limits[0]
    key = objective.key_function(measured)
    value = {i: key(measured[w]) for i, w in enumerate(limits) if w in measured}
    lo, hi = 0, len(limits) - 1
    while hi - lo > 2:
        low_probe, high_probe = _probes(lo, hi, value)
        for probe in (high_probe, low_probe):  # the higher first: it is the faster slice
            if probe not in value:
                return limits[probe]
        if value[low_probe] < value[high_probe]:
            hi = high_probe  # unimodal: nothing above high_probe beats low_probe
        else:
            lo = low_probe
    left = [limits[i] for i in range(hi, lo - 1, -1) if i not in value]
    return left[0] if left else None


def _probes(lo: int, hi: int, value: Mapping[int, Key]) -> tuple[int, int]:
    """Two interior indices of the bracket [lo, hi] to compare, reusing measured ones: the
    best measured interior point and its nearest measured neighbour, or a new golden-section
    point in the larger side of the best, or two new golden-section points."""
    inside = sorted(i for i in value if lo < i < hi)
    if not inside:
        step = max(1, min(round((hi - lo) * GOLDEN_FRACTION), (hi - lo - 1) // 2))
        return lo + step, hi - step
    best = min(inside, key=lambda i: value[i])
    others = [i for i in inside if i != best]
    if others:
        other = min(others, key=lambda i: (abs(i - best), -i))
    elif best - lo > hi - best:
        other = best - max(1, round((best - lo) * GOLDEN_FRACTION))
    else:
        other = best + max(1, round((hi - best) * GOLDEN_FRACTION))
    return min(best, other), max(best, other)

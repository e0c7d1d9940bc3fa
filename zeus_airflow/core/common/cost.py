"""The Zeus cost metric and the power-limit selectors (paper Eq. 2, 3 and 7).

Units: energy in J, time in s, power in W. A cost is in "J-equivalents":
``eta * energy_j + (1 - eta) * max_power_w * time_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zeus_airflow.core.common.config import SELECTORS


def zeus_cost(energy_j: float, time_s: float, eta: float, max_power_w: float) -> float:
    """Cost of a run (paper Eq. 2): energy and time weighted by eta, time priced at MAXPOWER."""
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


@dataclass(frozen=True)
class LimitMeasurement:
    """What the profiler saw at one power limit: average power and speed."""

    power_limit_w: int
    avg_power_w: float
    steps_per_s: float

    @property
    def energy_per_step_j(self) -> float:
        return self.avg_power_w / self.steps_per_s

    @property
    def time_per_step_s(self) -> float:
        return 1.0 / self.steps_per_s

    def cost_per_step(self, eta: float, max_power_w: float) -> float:
        """Paper Eq. 7 per step: (eta * P + (1 - eta) * MAXPOWER) / throughput."""
        return zeus_cost(self.energy_per_step_j, self.time_per_step_s, eta, max_power_w)


def choose_power_limit(
    measurements: Mapping[int, LimitMeasurement],
    selector: str,
    eta: float,
    max_power_w: float,
    max_slowdown: float = 1.1,
) -> int:
    """The best measured power limit (W) under one of the selectors of ``config.SELECTORS``.

    Ties go to the higher limit: it is faster and leaves more headroom.
    """
    if not measurements:
        raise ValueError("measurements is empty: profile at least one power limit first")
    by_limit = sorted(measurements.values(), key=lambda m: -m.power_limit_w)
    if selector == "zeus":
        best = min(by_limit, key=lambda m: m.cost_per_step(eta, max_power_w))
    elif selector == "min-energy":
        best = min(by_limit, key=lambda m: m.energy_per_step_j)
    elif selector == "min-time":
        best = min(by_limit, key=lambda m: m.time_per_step_s)
    elif selector == "min-energy-within-slowdown":
        fastest = min(m.time_per_step_s for m in by_limit)
        allowed = [m for m in by_limit if m.time_per_step_s <= fastest * max_slowdown]
        best = min(allowed, key=lambda m: m.energy_per_step_j)
    else:
        raise ValueError(
            f"selector={selector!r} is invalid: expected one of {', '.join(SELECTORS)}"
        )
    return best.power_limit_w

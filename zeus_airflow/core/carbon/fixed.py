"""A constant grid: one intensity (and optionally a price) for every zone and instant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from zeus_airflow.core.carbon.signal import GridPoint, Provenance


@dataclass(frozen=True)
class FixedSource:
    """``intensity_g_per_kwh`` gCO2e/kWh and ``price_per_mwh`` everywhere, always. A fixed
    grid gives the planner nothing to choose between: every start is as good as now."""

    intensity_g_per_kwh: float
    price_per_mwh: float | None = None
    provenance: Provenance = "fixed"
    note: str = ""

    def points(self, zone: str, start: datetime, end: datetime) -> list[GridPoint]:
        return [
            GridPoint(
                start, end, self.intensity_g_per_kwh, self.provenance, self.price_per_mwh, self.note
            )
        ]

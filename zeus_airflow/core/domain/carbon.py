"""What a try or a run records about carbon: its emissions and, with a carbon-aware start,
the plan (``core/carbon/`` computes them, the store keeps them, the reports show them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.common.units import show_emissions, show_time
from zeus_airflow.core.domain.figures import RUN_FIGURES


@dataclass(frozen=True)
class RunCarbon:
    """gCO2e, cost (the price's currency) and gCO2e/kWh of one try or run, with the
    provenance of the intensity; the start plan's figures when the start was chosen. Its
    fields are its declared figures (``domain.figures.RUN_FIGURES``), under their names."""

    carbon_zone: str
    emissions_g: float | None
    energy_cost: float | None
    carbon_intensity_g_per_kwh: float | None
    carbon_provenance: str | None
    """live, forecast, file, fixed or fallback (the least direct figure used)."""
    carbon_note: str = ""
    """Why a figure fell back ("": none did)."""
    start_delay_s: float | None = None
    """Seconds the start was shifted by; None when no carbon-aware start was asked."""
    expected_emissions_g: float | None = None
    """What the plan expected at the chosen start (None without an expected energy)."""
    unshifted_intensity_g_per_kwh: float | None = None
    """Forecast gCO2e/kWh over the run's expected span had it started when planned."""
    start_reason: str | None = None

    def figures(self) -> dict[str, Any]:
        """Its figures by their declared names, in their order (``domain.figures.RUN_FIGURES``):
        what the store's ``zeus_run_carbon`` row and the carbon XComs take. No note is None."""
        own = {name: getattr(self, name) for name in RUN_FIGURES}
        return own | {"carbon_note": self.carbon_note or None}

    def describe(self) -> str:
        """E.g. ``38.1 gCO2e (forecast, DE) · started 2.5 h later``: the run summary's."""
        text = f"{show_emissions(self.emissions_g)} ({self.carbon_provenance}, {self.carbon_zone})"
        if self.start_delay_s:
            text += f" · started {show_time(self.start_delay_s)} later"
        return text

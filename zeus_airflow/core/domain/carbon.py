"""What a try or a run records about carbon: its emissions and, with a carbon-aware start,
the plan (``core/carbon/`` computes them, the store keeps them, the reports show them)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from zeus_airflow.core.common.units import show_emissions, show_time
from zeus_airflow.core.domain.figures import RUN_FIGURES

_FIGURE_NAMES = {
    "zone": "carbon_zone",
    "intensity_g_per_kwh": "carbon_intensity_g_per_kwh",
    "provenance": "carbon_provenance",
    "note": "carbon_note",
}
"""The declared name of each field that the record names for itself (the others: the same)."""


@dataclass(frozen=True)
class RunCarbon:
    """gCO2e, cost (the price's currency) and gCO2e/kWh of one try or run, with the
    provenance of the intensity; the start plan's figures when the start was chosen."""

    zone: str
    emissions_g: float | None
    energy_cost: float | None
    intensity_g_per_kwh: float | None
    provenance: str | None
    """live, forecast, file, fixed or fallback (the least direct figure used)."""
    note: str = ""
    """Why a figure fell back."""
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
        own = {_FIGURE_NAMES.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}
        own["carbon_note"] = self.note or None
        return {name: own[name] for name in RUN_FIGURES}

    def describe(self) -> str:
        """E.g. ``38.1 gCO2e (forecast, DE) · started 2.5 h later``: the run summary's."""
        text = f"{show_emissions(self.emissions_g)} ({self.provenance}, {self.zone})"
        if self.start_delay_s:
            text += f" · started {show_time(self.start_delay_s)} later"
        return text

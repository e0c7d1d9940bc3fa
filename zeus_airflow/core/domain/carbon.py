"""What a try or a run records about carbon: its emissions and, with a carbon-aware start,
the plan (``core/carbon/`` computes them, the store keeps them, the reports show them)."""

from __future__ import annotations

from dataclasses import dataclass


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

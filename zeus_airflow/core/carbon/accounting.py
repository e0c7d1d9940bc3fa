"""A run's emissions and energy cost from its measured energy and the grid over its span,
and its record (``RunCarbon``): a try's from its span (:func:`footprint`), a run's from its
tries' (:func:`run_footprint`).

Power is taken as constant over the span, so each interval of the grid weighs by the time it
overlaps the run: ``emissions_g = energy_kwh * mean intensity``. A span the source cannot
cover (an outage, a gap in a trace) is filled with the fallback intensity, and the figure's
provenance says ``fallback`` with the reason; without a fallback it raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from zeus_airflow.core.carbon.planner import StartPlan
from zeus_airflow.core.carbon.signal import (
    GridPoint,
    GridSource,
    Provenance,
    SourceError,
    clip,
    weighted_mean,
    worst_provenance,
)
from zeus_airflow.core.common.units import J_PER_KWH
from zeus_airflow.core.domain import RunCarbon, TrainingFigures, energy_with_setup_j

INSTANT = timedelta(milliseconds=1)
"""A span shorter than this (an empty one) is priced over this much before its end: never
reaching into the future, where only a forecast would know, nor back before the run began
by more than a moment. A replayed run's short but real span is priced as it is: the second
before its end once straddled the start of the clean window a deferred run had woken at."""


@dataclass(frozen=True)
class Fallback:
    """What to use when the source cannot answer: gCO2e/kWh, and a price per MWh or None."""

    intensity_g_per_kwh: float
    price_per_mwh: float | None = None

    def point(self, start: datetime, end: datetime, reason: str) -> GridPoint:
        return GridPoint(
            start, end, self.intensity_g_per_kwh, "fallback", self.price_per_mwh, reason
        )


@dataclass(frozen=True)
class Emissions:
    """gCO2e and cost of ``energy_j`` drawn evenly over ``[start, end)`` in ``zone``."""

    zone: str
    energy_j: float
    start: datetime
    end: datetime
    emissions_g: float
    intensity_g_per_kwh: float
    """Time-weighted mean over the span."""
    energy_cost: float | None
    """In the price's currency; None unless the whole span has a price."""
    provenance: Provenance
    """The least direct figure used (``fallback`` if any part fell back)."""
    note: str = ""
    """Why a fallback was used."""


def grid_over(
    source: GridSource, zone: str, start: datetime, end: datetime, fallback: Fallback | None
) -> list[GridPoint]:
    """The source's points over the span, gaps filled with the fallback."""
    try:
        found = clip(source.points(zone, start, end), start, end)
        reason = "the source has no figure for this part of the span"
    except SourceError as err:
        if fallback is None:
            raise
        found, reason = [], str(err)
    filled: list[GridPoint] = []
    cursor = start
    for p in found:
        if p.start > cursor:
            filled.append(_gap(fallback, cursor, p.start, zone, reason))
        filled.append(p)
        cursor = max(cursor, p.end)
    if cursor < end:
        filled.append(_gap(fallback, cursor, end, zone, reason))
    return filled


def _gap(
    fallback: Fallback | None, start: datetime, end: datetime, zone: str, reason: str
) -> GridPoint:
    if fallback is None:
        raise SourceError(
            f"no carbon intensity for zone {zone!r} from {start.isoformat()} to "
            f"{end.isoformat()} ({reason}) and no fallback configured"
        )
    return fallback.point(start, end, reason)


def span_emissions(
    zone: str, energy_j: float, start: datetime, end: datetime, points: Sequence[GridPoint]
) -> Emissions:
    """Emissions of ``energy_j`` over a span the points cover (see :func:`grid_over`)."""
    if end - start < INSTANT:
        start = end - INSTANT
    weights = [(p, p.overlap_s(start, end)) for p in points]
    weights = [(p, w) for p, w in weights if w > 0]
    total_s = sum(w for _, w in weights)
    if total_s <= 0:
        raise SourceError(f"no carbon intensity covers {start.isoformat()}..{end.isoformat()}")
    intensity = weighted_mean([(p.intensity_g_per_kwh, w) for p, w in weights])
    kwh = energy_j / J_PER_KWH
    priced = all(p.price_per_mwh is not None for p, _ in weights)
    cost = (
        kwh / 1000.0 * weighted_mean([(p.price_per_mwh or 0.0, w) for p, w in weights])
        if priced
        else None
    )
    provenance = worst_provenance([p.provenance for p, _ in weights]) or "fallback"
    notes = sorted({p.note for p, _ in weights if p.note})
    return Emissions(
        zone, energy_j, start, end, kwh * intensity, intensity, cost, provenance, "; ".join(notes)
    )


def run_emissions(
    source: GridSource,
    zone: str,
    energy_j: float,
    start: datetime,
    end: datetime,
    fallback: Fallback | None,
) -> Emissions:
    """Emissions of a run: the source's grid over its span, gaps and failures falling back."""
    if end - start < INSTANT:
        start = end - INSTANT
    return span_emissions(zone, energy_j, start, end, grid_over(source, zone, start, end, fallback))


def footprint(
    zone: str, emissions: Emissions | None, plan: StartPlan | None, note: str = ""
) -> RunCarbon:
    """The record of a try or run: its emissions (None when they could not be had, ``note``
    saying why) and its start plan (None without a carbon-aware start)."""
    return RunCarbon(
        zone,
        emissions.emissions_g if emissions else None,
        emissions.energy_cost if emissions else None,
        emissions.intensity_g_per_kwh if emissions else None,
        emissions.provenance if emissions else None,
        (emissions.note if emissions else "") or note,
        plan.delay_s if plan else None,
        plan.expected_emissions_g if plan else None,
        plan.now_intensity_g_per_kwh if plan else None,
        plan.reason if plan else None,
    )


def run_footprint(
    zone: str,
    records: Sequence[RunCarbon],
    energy_j: float,
    plan: StartPlan | None,
    notes: Sequence[str],
) -> RunCarbon:
    """The record of a run from its tries' (``records``, in order, of ``energy_j`` together):
    their emissions and cost summed (None when one has none, ``notes`` saying why), the mean
    intensity of that energy and the least direct provenance."""
    if not records or any(r.emissions_g is None for r in records):
        return footprint(zone, None, plan, "; ".join(dict.fromkeys(notes)))
    grams = sum(r.emissions_g or 0.0 for r in records)
    kwh = energy_j / J_PER_KWH
    costs = [r.energy_cost for r in records]
    note = "; ".join(dict.fromkeys(r.carbon_note for r in records if r.carbon_note))
    return RunCarbon(
        zone,
        grams,
        None if None in costs else sum(c or 0.0 for c in costs),
        grams / kwh if kwh > 0 else records[-1].carbon_intensity_g_per_kwh,
        worst_provenance([r.carbon_provenance for r in records if r.carbon_provenance]),
        note,
        *(None, None, None, None)
        if plan is None
        else (plan.delay_s, plan.expected_emissions_g, plan.now_intensity_g_per_kwh, plan.reason),
    )


@dataclass(frozen=True)
class ShiftSaving:
    """What a carbon-aware start saved by shifting in time, against starting at once: gCO2e
    the run would have emitted at the intensity forecast for its planned slot (its measured
    energy, training and setup) and gCO2e saved (that minus what it emitted; negative: the
    shift cost more). Separate from what its configuration saved against Default."""

    unshifted_emissions_g: float
    saved_g: float

    @property
    def saved_fraction(self) -> float | None:
        """The share of the unshifted emissions saved; None when those are 0."""
        return self.saved_g / self.unshifted_emissions_g if self.unshifted_emissions_g else None


def shift_saving(run: TrainingFigures) -> ShiftSaving | None:
    """The one formula for time-shift savings, from a run's stored figures: None without a
    carbon-aware start or its emissions; nothing saved when it started at once (a plan that
    did not wait); otherwise its energy at ``unshifted_intensity_g_per_kwh`` minus
    ``emissions_g`` (None when the planned slot had no forecast)."""
    if run.start_delay_s is None or run.emissions_g is None:
        return None
    if run.start_delay_s <= 0:
        return ShiftSaving(run.emissions_g, 0.0)
    if run.unshifted_intensity_g_per_kwh is None:
        return None
    unshifted = energy_with_setup_j(run) / J_PER_KWH * run.unshifted_intensity_g_per_kwh
    return ShiftSaving(unshifted, unshifted - run.emissions_g)


def shift_savings(runs: Sequence[TrainingFigures]) -> ShiftSaving | None:
    """:func:`shift_saving` summed over the runs that have one; None when none has."""
    known = [s for s in map(shift_saving, runs) if s is not None]
    if not known:
        return None
    return ShiftSaving(sum(s.unshifted_emissions_g for s in known), sum(s.saved_g for s in known))

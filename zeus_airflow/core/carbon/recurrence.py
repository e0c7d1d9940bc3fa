"""A recurrence's carbon figures: each try's over its own span, and the run's, summed; and
what the store keeps of them (:func:`stored`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from zeus_airflow.core.carbon.accounting import Fallback, footprint, run_emissions, run_footprint
from zeus_airflow.core.carbon.fixed import FixedSource
from zeus_airflow.core.carbon.planner import StartPlan
from zeus_airflow.core.carbon.signal import GridSource, SourceError
from zeus_airflow.core.domain import RunCarbon

log = logging.getLogger("zeus_airflow")


@dataclass(frozen=True)
class TrySpan:
    """One finished try: its measured energy (training and setup, J) and when it ran."""

    trial_id: int
    energy_j: float
    start: datetime
    end: datetime


def account(
    source: GridSource | SourceError,
    zone: str,
    tries: Sequence[TrySpan],
    fallback: Fallback | None,
    plan: StartPlan | None,
) -> tuple[RunCarbon, dict[int, RunCarbon]]:
    """The run's record and each try's. ``source`` is the error when the source could not
    even be built (a missing Connection): the fallback stands for it, saying why."""
    if isinstance(source, SourceError):
        if fallback is None:
            return footprint(zone, None, plan, str(source)), {}
        source = FixedSource(
            fallback.intensity_g_per_kwh, fallback.price_per_mwh, "fallback", str(source)
        )
    per_try: dict[int, RunCarbon] = {}
    notes: list[str] = []
    for t in tries:
        try:
            emissions = run_emissions(source, zone, t.energy_j, t.start, t.end, fallback)
        except SourceError as err:
            log.warning("no carbon figures for trial %d: %s", t.trial_id, err)
            notes.append(str(err))
            per_try[t.trial_id] = footprint(zone, None, plan, str(err))
            continue
        per_try[t.trial_id] = footprint(zone, emissions, plan)
    records = [per_try[t.trial_id] for t in tries if t.trial_id in per_try]
    energy_j = sum(t.energy_j for t in tries)
    return run_footprint(zone, records, energy_j, plan, notes), per_try


def stored(
    run: RunCarbon, per_try: dict[int, RunCarbon], tries: Sequence[TrySpan]
) -> RunCarbon | None:
    """What the store keeps of a run (``tables.run_carbon``), as its runs table shows it:
    its emissions and cost (every try's, summed) and its last try's intensity, provenance
    and note; None when no try has figures."""
    records = [per_try[t.trial_id] for t in tries if t.trial_id in per_try]
    if not records:
        return None
    last = records[-1]
    return replace(
        run,
        carbon_intensity_g_per_kwh=last.carbon_intensity_g_per_kwh,
        carbon_provenance=last.carbon_provenance,
        carbon_note=last.carbon_note,
    )

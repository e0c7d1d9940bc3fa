"""A recurrence's carbon figures: each try's over its own span, and the run's, summed; and
what the store keeps of them (:func:`stored`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from zeus_airflow.core.carbon.accounting import Fallback, footprint, run_emissions
from zeus_airflow.core.carbon.fixed import FixedSource
from zeus_airflow.core.carbon.planner import StartPlan
from zeus_airflow.core.carbon.signal import GridSource, SourceError, worst_provenance
from zeus_airflow.core.domain import RunCarbon
from zeus_airflow.core.units import J_PER_KWH

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
    return _summed(zone, tries, per_try, plan, notes), per_try


def _summed(
    zone: str,
    tries: Sequence[TrySpan],
    per_try: dict[int, RunCarbon],
    plan: StartPlan | None,
    notes: list[str],
) -> RunCarbon:
    records = [per_try[t.trial_id] for t in tries if t.trial_id in per_try]
    if not records or any(r.emissions_g is None for r in records):
        return footprint(zone, None, plan, "; ".join(dict.fromkeys(notes)))
    grams = sum(r.emissions_g or 0.0 for r in records)
    kwh = sum(t.energy_j for t in tries) / J_PER_KWH
    costs = [r.energy_cost for r in records]
    note = "; ".join(dict.fromkeys(r.note for r in records if r.note))
    return RunCarbon(
        zone,
        grams,
        None if None in costs else sum(c or 0.0 for c in costs),
        grams / kwh if kwh > 0 else records[-1].intensity_g_per_kwh,
        worst_provenance([r.provenance for r in records if r.provenance]),
        note,
        *(None, None, None, None)
        if plan is None
        else (plan.delay_s, plan.expected_emissions_g, plan.now_intensity_g_per_kwh, plan.reason),
    )


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
        intensity_g_per_kwh=last.intensity_g_per_kwh,
        provenance=last.provenance,
        note=last.note,
    )

"""A job version's runs: its trials grouped by Airflow task instance.

A run's fields are the trial's (:class:`~zeus_airflow.core.domain.TrialRecord`), read by
name: its figures sum its finished tries, the rest are its last try's. Rows are grouped as
the database returns them (a long job has thousands), not built into records first.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from zeus_airflow.core.reports.records import RunRecord
from zeus_airflow.core.store.clock import as_utc as utc
from zeus_airflow.core.store.reads import Reader

SUMMED = (
    "energy_j",
    "time_s",
    "cost",
    "epochs",
    "setup_energy_j",
    "setup_time_s",
    "emissions_g",
    "energy_cost",
    "cpu_energy_j",
    "dram_energy_j",
    "default_cost",
)
"""A run's figures: the sum over its finished tries."""
SUMMED_WHERE_KNOWN = ("would_save_energy_j", "would_save_time_s")
"""Observe mode's estimates: the sum over the tries that made one (None when none did)."""
_OWN = ("index", "batch_sizes", "started_at", "finished_at", "reached_target", "recorded_late_at")
"""Fields a run computes itself (first start, last finish, ...); all others are its last
try's."""
_LAST = tuple(
    f.name for f in fields(RunRecord) if f.name not in (*SUMMED, *SUMMED_WHERE_KNOWN, *_OWN)
)
_COLUMNS = (
    "batch_size",
    "started_at",
    "finished_at",
    "reached_target",
    "recorded_late_at",
    *_LAST,
    *SUMMED,
    *SUMMED_WHERE_KNOWN,
)


def runs(reader: Reader, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    grouped: dict[tuple[str, str, str, int], list[Any]] = {}
    for t in reader.shown_tries(job_pk, _COLUMNS):
        tries = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if tries and tries[-1].try_number < t.try_number:
            tries.clear()  # an Airflow retry after an error: the earlier try is history
        tries.append(t)
    return tuple(_run(i, tries) for i, tries in enumerate(grouped.values(), start=1))


def _run(index: int, tries: list[Any]) -> RunRecord:
    last = tries[-1]
    done = [t for t in tries if t.energy_j is not None]
    finished = [t.finished_at for t in tries if t.finished_at is not None]
    late = [t.recorded_late_at for t in tries if t.recorded_late_at is not None]
    return RunRecord(
        index=index,
        batch_sizes=tuple(t.batch_size for t in tries),
        started_at=utc(tries[0].started_at),
        finished_at=utc(max(finished)) if finished else None,
        recorded_late_at=utc(max(late)) if late else None,
        # Unknown while the last try trains (earlier tries missing it say nothing yet) and
        # when it raised (its figures are kept, without a verdict).
        reached_target=None
        if not done or last.reached_target is None
        else bool(last.reached_target),
        **{name: getattr(last, name) for name in _LAST},
        **{name: _sum([getattr(t, name) for t in done]) for name in SUMMED},
        **{
            name: _sum([v for t in done if (v := getattr(t, name)) is not None])
            for name in SUMMED_WHERE_KNOWN
        },
    )


def _sum(values: list[Any]) -> Any:
    """The sum; None when there is nothing to add up or a figure is missing."""
    return None if not values or None in values else sum(values)

"""A job version's runs: its trials grouped by Airflow task instance.

A run's fields are the trial's (:class:`~zeus_airflow.core.domain.TrialRecord`), read by
name: its figures sum its finished tries, the rest are its last try's; its carbon figures
are its own (``tables.run_carbon``). Rows are grouped as the database returns them (a long
job has thousands), not built into records first.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, Row, select

from zeus_airflow.core.reports.records import RunRecord
from zeus_airflow.core.store.admin import as_utc as utc
from zeus_airflow.core.store.history import RUN_STATUSES, group_runs
from zeus_airflow.core.store.tables import RUN_KEY, run_carbon, trials

SHOWN_STATUSES = RUN_STATUSES
"""Tries shown as part of a run (``core/store/history.py``)."""
SHOWN = trials.c.status.in_(SHOWN_STATUSES)

SUMMED = (
    "energy_j",
    "time_s",
    "cost",
    "epochs",
    "setup_energy_j",
    "setup_time_s",
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
CARBON = tuple(
    c.name
    for c in run_carbon.c
    if c.name not in ("id", *RUN_KEY) and c.name in {f.name for f in fields(RunRecord)}
)
"""The run's own carbon figures, read from its row of ``tables.run_carbon``."""
_LAST = tuple(
    f.name
    for f in fields(RunRecord)
    if f.name not in (*SUMMED, *SUMMED_WHERE_KNOWN, *_OWN, *CARBON)
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
_TRY_COLUMNS = select(*(trials.c[name] for name in dict.fromkeys(_COLUMNS)))
_RUN_KEY = ("dag_id", "task_id", "run_id", "map_index", "try_number")
_CARBON_COLUMNS = select(*(run_carbon.c[name] for name in (*_RUN_KEY, *CARBON)))


def runs(conn: Connection, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    rows = conn.execute(
        _TRY_COLUMNS.where(trials.c.job_pk == job_pk, SHOWN).order_by(trials.c.decision_seq)
    )
    carbon = {
        tuple(r[: len(_RUN_KEY)]): r
        for r in conn.execute(_CARBON_COLUMNS.where(run_carbon.c.job_pk == job_pk))
    }
    return tuple(_run(i, tries, carbon) for i, tries in enumerate(group_runs(rows), start=1))


def _run(index: int, tries: list[Row[Any]], carbon: dict[tuple[Any, ...], Row[Any]]) -> RunRecord:
    last = tries[-1]
    figures = carbon.get(tuple(getattr(last, k) for k in _RUN_KEY))
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
        **_carbon(figures),
        **{name: _sum([getattr(t, name) for t in done]) for name in SUMMED},
        **{
            name: _sum([v for t in done if (v := getattr(t, name)) is not None])
            for name in SUMMED_WHERE_KNOWN
        },
    )


def _sum(values: list[Any]) -> Any:
    """The sum; None when there is nothing to add up or a figure is missing."""
    return None if not values or None in values else sum(values)


def _carbon(figures: Row[Any] | None) -> dict[str, Any]:
    """A run's carbon fields from its row (None each without one)."""
    return {name: getattr(figures, name, None) for name in CARBON}

"""A job version's runs: its trials grouped by Airflow task instance."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, select

from zeus_airflow.core.devices.base import Measurement
from zeus_airflow.core.reports.records import RunRecord
from zeus_airflow.core.store.admin import as_utc as utc
from zeus_airflow.core.store.tables import LIVE_STATUSES, VOID_STATUSES, trials

SHOWN_STATUSES = (*LIVE_STATUSES, *VOID_STATUSES)
"""Tries shown as part of a run: the live ones, and those whose train function raised or
broke its contract."""
SHOWN = trials.c.status.in_(SHOWN_STATUSES)


class _Try(NamedTuple):
    """One try as a run shows it (a plain tuple: a long job has thousands to group)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    status: str
    phase: str
    batch_size: int
    power_limit_w: int | None
    energy_j: float | None
    time_s: float | None
    cost: float | None
    epochs: int | None
    reached_target: bool | None
    measurement: Measurement
    gpu_model: str
    started_at: datetime
    finished_at: datetime | None
    stop_reason: str | None
    setup_energy_j: float | None
    setup_time_s: float | None


_TRY_COLUMNS = select(*(trials.c[name] for name in _Try._fields))


def runs(conn: Connection, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    rows = conn.execute(_TRY_COLUMNS.where(trials.c.job_pk == job_pk, SHOWN)
                        .order_by(trials.c.decision_seq))
    grouped: dict[tuple[str, str, str, int], list[_Try]] = {}
    for row in rows:
        t = _Try._make(row)
        tries = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if tries and tries[-1].try_number < t.try_number:
            tries.clear()  # an Airflow retry after an error: the earlier try is history
        tries.append(t)
    return tuple(_run(i, tries) for i, tries in enumerate(grouped.values(), start=1))


def _run(index: int, tries: list[_Try]) -> RunRecord:
    last = tries[-1]
    done = [t for t in tries if t.energy_j is not None]
    finished = [t.finished_at for t in tries if t.finished_at is not None]
    return RunRecord(
        index, last.dag_id, last.task_id, last.run_id, last.map_index, last.try_number,
        batch_sizes=tuple(t.batch_size for t in tries), status=last.status, phase=last.phase,
        power_limit_w=last.power_limit_w,
        energy_j=_sum([t.energy_j for t in done]), time_s=_sum([t.time_s for t in done]),
        cost=_sum([t.cost for t in done]), epochs=_sum([t.epochs for t in done]),
        reached_target=None if not done else bool(last.reached_target),
        measurement=last.measurement, gpu_model=last.gpu_model,
        started_at=utc(tries[0].started_at),
        finished_at=utc(max(finished)) if finished else None, stop_reason=last.stop_reason,
        setup_energy_j=_sum([t.setup_energy_j for t in done]),
        setup_time_s=_sum([t.setup_time_s for t in done]))



def _sum(values: list[Any]) -> Any:
    """The sum; None when there is nothing to add up or a figure is missing."""
    return None if not values or None in values else sum(values)

"""A job's past as the run time reads it, outside a decision: what planning a start needs
(the job's state as its next decision would read it, and its finished runs) and which of a
mapped task's instances fed a job. The store reads; planning (``core/carbon/expected.py``)
and the operator decide.

A run is the tries of one Airflow task instance (:func:`group_runs`, which the reports' runs
table shares): an Airflow retry (a higher try number) starts the run over, the earlier tries
become history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, func, select

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.devices.base import Measurement
from zeus_airflow.core.domain import LIVE_STATUSES, VOID_STATUSES, DeviceInfo, JobRef, JobState
from zeus_airflow.core.domain.trials import FINISHED_STATUSES
from zeus_airflow.core.store.snapshot import read_state
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs, trials

RUN_STATUSES = (*LIVE_STATUSES, *VOID_STATUSES)
"""Tries that are part of a run: the live ones, and those whose train function raised or
broke its contract."""

LATEST_SETUP = (
    select(trials.c.gpu_model, trials.c.gpu_count, trials.c.measurement)
    .order_by(trials.c.decision_seq.desc())
    .limit(1)
)
"""The GPU setup of a job's latest try (``.where(trials.c.job_pk == ...)``)."""


def latest_device(conn: Connection, job_pk: int) -> DeviceInfo:
    """The GPU setup the job's next decision most likely happens on: its latest try's (the
    candidate limits matter to the grid baseline only: none are read)."""
    latest = conn.execute(LATEST_SETUP.where(trials.c.job_pk == job_pk)).first()
    if latest is None:
        return DeviceInfo("", 1, "measured", ())
    return DeviceInfo(latest.gpu_model, latest.gpu_count, latest.measurement, ())


def group_runs(tries: Iterable[Any]) -> list[list[Row[Any]]]:
    """Tries in decision order (with their key and ``try_number``) grouped into runs, in the
    order of their first try."""
    grouped: dict[tuple[str, str, str, int], list[Row[Any]]] = {}
    for t in tries:
        run = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if run and run[-1].try_number < t.try_number:
            run.clear()  # an Airflow retry after an error: the earlier try is history
        run.append(t)
    return list(grouped.values())


@dataclass(frozen=True)
class PastRun:
    """A finished run (its last try succeeded or failed), its figures summed over its
    finished tries: seconds and joules, of training and of setup before it."""

    batch_size: int
    """Its first try's."""
    time_s: float
    energy_j: float
    setup_time_s: float | None
    setup_energy_j: float | None
    measurement: Measurement
    """Its last try's."""


@dataclass(frozen=True)
class JobPast:
    """The job's active version (else its newest) as planning reads it."""

    state: JobState
    """What a decision would read now, on the GPU setup of the job's latest try."""
    finished: tuple[PastRun, ...]
    """Its finished runs, in decision order (of their first try)."""


_CURRENT = select(jobs).order_by(jobs.c.active.desc(), jobs.c.version.desc()).limit(1)
_TRIES = select(
    trials.c.dag_id,
    trials.c.task_id,
    trials.c.run_id,
    trials.c.map_index,
    trials.c.try_number,
    trials.c.batch_size,
    trials.c.status,
    trials.c.measurement,
    trials.c.energy_j,
    trials.c.time_s,
    trials.c.setup_energy_j,
    trials.c.setup_time_s,
).where(trials.c.status.in_(RUN_STATUSES))


def job_past(store: SQLStore, job_id: str) -> JobPast | None:
    """The job's past, read at once; None when the store has no such job."""
    with store.reading() as conn:
        version = conn.execute(_CURRENT.where(jobs.c.job_id == job_id)).first()
        if version is None:
            return None
        job = JobRef(version.id, job_id, version.version, JobConfig.from_json(version.config_json))
        state = read_state(conn, job, latest_device(conn, job.id), frozenset())
        tries = conn.execute(
            _TRIES.where(trials.c.job_pk == job.id).order_by(trials.c.decision_seq)
        )
        runs = [_finished(run) for run in group_runs(tries)]
    return JobPast(state, tuple(r for r in runs if r is not None))


def _finished(tries: list[Row[Any]]) -> PastRun | None:
    done = [t for t in tries if t.energy_j is not None]
    time_s = _sum([t.time_s for t in done])
    if not done or time_s is None or tries[-1].status not in FINISHED_STATUSES:
        return None
    return PastRun(
        tries[0].batch_size,
        time_s,
        sum(t.energy_j for t in done),
        _sum([t.setup_time_s for t in done]),
        _sum([t.setup_energy_j for t in done]),
        tries[-1].measurement,
    )


def _sum(values: list[Any]) -> Any:
    """The sum; None when a figure is missing."""
    return None if None in values else sum(values)


def job_instances(store: SQLStore, job_id: str, dag_id: str, task_id: str) -> list[int]:
    """The map indexes of the task that fed the job, over all its versions, in the order
    they first did."""
    query = (
        select(trials.c.map_index)
        .join(jobs, trials.c.job_pk == jobs.c.id)
        .where(jobs.c.job_id == job_id, trials.c.dag_id == dag_id, trials.c.task_id == task_id)
        .group_by(trials.c.map_index)
        .order_by(func.min(trials.c.id))
    )
    with store.reading() as conn:
        return list(conn.execute(query).scalars())


def instance_runs(store: SQLStore, job_id: str, dag_id: str, task_id: str, map_index: int) -> int:
    """How many DAG runs a task instance fed the job in."""
    query = (
        select(func.count(trials.c.run_id.distinct()))
        .join(jobs, trials.c.job_pk == jobs.c.id)
        .where(
            jobs.c.job_id == job_id,
            trials.c.dag_id == dag_id,
            trials.c.task_id == task_id,
            trials.c.map_index == map_index,
        )
    )
    with store.reading() as conn:
        return int(conn.execute(query).scalar() or 0)

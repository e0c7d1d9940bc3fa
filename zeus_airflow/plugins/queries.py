"""The UI's reads: the store's reports, cut down to what the user may see, plus what only
Airflow knows (the runs' logical dates).

The api-server opens the store once per process, where a task would (``ZeusStoreHook``: the
``zeus_default`` Connection, else ``$ZEUS_AIRFLOW_DB_URL``, else the embedded SQLite file
under ``$AIRFLOW_HOME``). The api-server is a core component, so reading Airflow's metadata
database here is allowed (Airflow 3 blocks the ORM in supervised task processes only).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from zeus_airflow.core import reports
from zeus_airflow.core.common.config import JOB_ID_MAX_LENGTH, is_blank
from zeus_airflow.core.common.naming import run_date
from zeus_airflow.core.reports import JobDetail, JobSummary, RunRecord
from zeus_airflow.core.reports.fleet import Fleet, FleetJob
from zeus_airflow.core.reports.fleet import fleet as fleet_rows
from zeus_airflow.core.store.base import Store
from zeus_airflow.core.store.reads import Reader
from zeus_airflow.plugins.access import DagAccess, job_in_dag

DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500


class JobNotFoundError(LookupError):
    """No such job, or none the user may see (the two look the same on purpose)."""


def _well_formed(**ids: str | None) -> None:
    """Ids from a URL that no job can have (empty, a NUL byte, longer than the store's
    column) are not found, as an unknown id is: never sent to the store, where PostgreSQL
    would refuse a NUL with an error (a 500)."""
    for name, value in ids.items():
        if value is not None and (is_blank(value) or len(value) > JOB_ID_MAX_LENGTH):
            raise JobNotFoundError(f"no job for {name}={value[:40]!r}: no job has such an id")


@functools.cache
def store() -> Store:
    """The store, opened on first use (a failure is not cached: the next request retries)."""
    from zeus_airflow.hooks.store import ZeusStoreHook

    return ZeusStoreHook().get_store()


def job_summaries(access: DagAccess, dag_id: str | None = None) -> list[JobSummary]:
    """The current version of every job the user may see (of ``dag_id`` only, when given)."""
    _well_formed(dag_id=dag_id)
    with store().reader() as reader:
        dags = reader.job_dags()
        ids = [j for j in access.visible(dags) if dag_id is None or job_in_dag(j, dags[j], dag_id)]
        history = reader.versions(ids)
        return reports.summaries(reader, [reports.current(history[j]) for j in ids], history)


def fleet(
    access: DagAccess,
    dag_id: str | None = None,
    keep: Callable[[FleetJob], bool] = lambda job: True,
    ids: Sequence[str] | None = None,
) -> tuple[Fleet, list[FleetJob]]:
    """The fleet page's rows: of the jobs the user may see (of ``dag_id`` only, or ``ids``
    in that order, when given), those ``keep`` keeps with their energy by day; and every
    row the user may see."""
    with store().reader() as reader:
        dags = reader.job_dags()
        chosen_ids = [
            j
            for j in (ids if ids is not None else sorted(dags))
            if j in dags
            and access.may_see_job(j, dags[j])
            and (dag_id is None or job_in_dag(j, dags[j], dag_id))
        ]
        history = reader.versions(chosen_ids)
        return fleet_rows(reader, [reports.current(history[j]) for j in chosen_ids], keep)


def job_reports(
    access: DagAccess, dag_id: str | None = None, since: datetime | None = None
) -> list[reports.JobReport]:
    """``zeus-airflow report``'s figures for every job the user may see (of ``dag_id``
    only, when given), by job id."""
    with store().reader() as reader:
        dags = reader.job_dags()
        ids = [j for j in access.visible(dags) if dag_id is None or job_in_dag(j, dags[j], dag_id)]
        return reports.report(reader, sorted(ids), since)


def job_detail(access: DagAccess, job_id: str, version: int | None = None) -> JobDetail:
    """One version of a job (the current one by default), in full."""
    _well_formed(job_id=job_id)
    with store().reader() as reader:
        return reports.detail(reader, _summary(reader, access, job_id, version))


def job_runs(
    access: DagAccess, job_id: str, version: int | None = None
) -> tuple[JobSummary, tuple[RunRecord, ...]]:
    """One version of a job with its runs, oldest first."""
    _well_formed(job_id=job_id)
    with store().reader() as reader:
        summary = _summary(reader, access, job_id, version)
        return summary, reports.runs(reader, summary.version.pk)


def _summary(reader: Reader, access: DagAccess, job_id: str, version: int | None) -> JobSummary:
    dags = reader.job_dags(job_id)
    if job_id not in dags or not access.may_see_job(job_id, dags[job_id]):
        raise JobNotFoundError(f"no job {job_id!r} that you may read")
    history = reader.versions([job_id])[job_id]
    chosen = (
        reports.current(history)
        if version is None
        else next((v for v in history if v.version == version), None)
    )
    if chosen is None:
        known = ", ".join(str(v.version) for v in history)
        raise JobNotFoundError(f"job {job_id!r} has no version {version}: it has {known}")
    return reports.summaries(reader, [chosen], {job_id: history})[0]


def instance_job(
    access: DagAccess,
    dag_id: str,
    task_id: str,
    map_index: int | None = None,
    run_id: str | None = None,
) -> str:
    """The job a task instance fed (in ``run_id`` when it ran there, else lately);
    ``map_index`` None: any instance of the task."""
    _well_formed(dag_id=dag_id, task_id=task_id, run_id=run_id)
    with store().reader() as reader:
        job_id = reader.instance_job(dag_id, task_id, map_index, run_id)
        if job_id is None:
            raise JobNotFoundError(f"task {task_id!r} of DAG {dag_id!r} has not run a Zeus job yet")
        if not access.may_see_job(job_id, reader.job_dags(job_id)[job_id]):
            raise JobNotFoundError(f"no job of task {task_id!r} that you may read")
        return job_id


def task_jobs(access: DagAccess, dag_id: str, task_id: str) -> list[JobSummary]:
    """The jobs the task's instances fed lately (one per mapped instance, by default), in
    map index order, those the user may see."""
    _well_formed(dag_id=dag_id, task_id=task_id)
    with store().reader() as reader:
        ids = list(dict.fromkeys(reader.task_jobs(dag_id, task_id).values()))
        dags = reader.job_dags()
        ids = [j for j in ids if access.may_see_job(j, dags[j])]
        if not ids:
            raise JobNotFoundError(
                f"task {task_id!r} of DAG {dag_id!r} has not run a Zeus "
                "job yet, or none that you may read"
            )
        history = reader.versions(ids)
        return reports.summaries(reader, [reports.current(history[j]) for j in ids], history)


@dataclass(frozen=True)
class RunRow:
    run: RunRecord
    logical_date: datetime | None
    """The DAG run's logical date (its run-after date when it has none); None outside
    Airflow or when the DAG run has been deleted."""

    @property
    def date(self) -> str | None:
        """The run's date as every surface names it (``naming.run_date``)."""
        return run_date(self.run.run_id, self.logical_date)


@dataclass(frozen=True)
class RunPage:
    """One page of a job version's runs, newest first."""

    total: int
    page: int
    per_page: int
    rows: tuple[RunRow, ...]

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def run_page(
    runs: tuple[RunRecord, ...],
    page: int = 1,
    per_page: int = DEFAULT_PER_PAGE,
    run_id: str | None = None,
    map_index: int | None = None,
) -> RunPage:
    """Page ``page`` (1-based) of the runs, newest first; with ``run_id`` (and
    ``map_index``), the page that holds that run instead."""
    newest = runs[::-1]
    if run_id is not None:
        at = next((i for i, r in enumerate(newest) if is_run(r, run_id, map_index)), None)
        page = 1 if at is None else at // per_page + 1
    page = min(max(page, 1), max(1, -(-len(newest) // per_page)))
    chosen = newest[(page - 1) * per_page : page * per_page]
    dates = logical_dates(chosen)
    return RunPage(
        len(newest),
        page,
        per_page,
        tuple(RunRow(r, dates.get((r.dag_id, r.run_id))) for r in chosen),
    )


def is_run(run: RunRecord, run_id: str | None, map_index: int | None) -> bool:
    """Whether ``run`` is the one a task instance's tab points at (``map_index`` None: any
    instance; a job shared by mapped instances has several runs per DAG run)."""
    return run.run_id == run_id and (map_index is None or run.map_index == map_index)


def logical_dates(runs: tuple[RunRecord, ...]) -> dict[tuple[str, str], datetime]:
    """Logical dates of the runs' DAG runs, from Airflow's metadata database."""
    from zeus_airflow.airflow_db import logical_dates as of_dag_runs

    return of_dag_runs((r.dag_id, r.run_id) for r in runs if r.dag_id)

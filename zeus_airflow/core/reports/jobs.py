"""Jobs: their versions, the DAGs they ran in, and each version at a glance or in full."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Integer, Select, case, func, select

from zeus_airflow.core.devices.base import Measurement
from zeus_airflow.core.reports.arms import arms, decision_state, profile_points
from zeus_airflow.core.reports.default import default_estimates
from zeus_airflow.core.reports.records import JobDetail, JobSummary, JobTotals, Version
from zeus_airflow.core.reports.runs import SHOWN, runs
from zeus_airflow.core.store.admin import as_utc as utc
from zeus_airflow.core.store.tables import jobs, trials

_RUN_KEY = (trials.c.dag_id, trials.c.task_id, trials.c.run_id, trials.c.map_index)


def job_dags(conn: Connection, job_id: str | None = None) -> dict[str, frozenset[str]]:
    """Every job id (or just ``job_id``) with the DAG ids its trials ran in, over all its
    versions ("" never counts)."""
    ids = select(jobs.c.job_id).distinct()
    pairs = (
        select(jobs.c.job_id, trials.c.dag_id)
        .distinct()
        .join(trials, trials.c.job_pk == jobs.c.id)
        .where(trials.c.dag_id != "")
    )
    if job_id is not None:
        ids, pairs = ids.where(jobs.c.job_id == job_id), pairs.where(jobs.c.job_id == job_id)
    found: dict[str, set[str]] = {j: set() for j in conn.execute(ids).scalars()}
    for job, dag_id in conn.execute(pairs):
        found[job].add(dag_id)
    return {job: frozenset(dags) for job, dags in found.items()}


def instance_job(
    conn: Connection,
    dag_id: str,
    task_id: str,
    map_index: int | None = None,
    run_id: str | None = None,
) -> str | None:
    """The job a task instance fed: the one of its trials in ``run_id`` when it ran there,
    else the one of its latest trial (a job id can be renamed between runs, and each mapped
    instance has a job of its own). ``map_index`` None: any instance of the task."""
    query = (
        select(jobs.c.job_id)
        .join(trials, trials.c.job_pk == jobs.c.id)
        .where(trials.c.dag_id == dag_id, trials.c.task_id == task_id)
        .order_by(trials.c.started_at.desc(), trials.c.id.desc())
        .limit(1)
    )
    if map_index is not None:
        query = query.where(trials.c.map_index == map_index)
    found = (
        None if run_id is None else conn.execute(query.where(trials.c.run_id == run_id)).scalar()
    )
    return found if found is not None else conn.execute(query).scalar()


def task_jobs(conn: Connection, dag_id: str, task_id: str) -> dict[int, str]:
    """Each map index the task ran (-1 alone when it is not mapped), in order, with the job
    its latest trial fed."""
    rows = conn.execute(
        select(trials.c.map_index, jobs.c.job_id)
        .join(jobs, trials.c.job_pk == jobs.c.id)
        .where(trials.c.dag_id == dag_id, trials.c.task_id == task_id)
        .order_by(trials.c.started_at, trials.c.id)
    )
    latest = {index: job_id for index, job_id in rows}  # the latest trial overwrites
    return dict(sorted(latest.items()))


def versions(conn: Connection, job_ids: Iterable[str]) -> dict[str, list[Version]]:
    """Each job's versions, oldest first."""
    rows = conn.execute(
        select(jobs).where(jobs.c.job_id.in_(list(job_ids))).order_by(jobs.c.job_id, jobs.c.version)
    )
    found: dict[str, list[Version]] = {}
    for r in rows:
        found.setdefault(r.job_id, []).append(
            Version(r.id, r.job_id, r.version, bool(r.active), utc(r.created_at), r.config_json)
        )
    return found


def current(history: Sequence[Version]) -> Version:
    """The version decisions use now: the active one (the newest if none is)."""
    return next((v for v in history if v.active), history[-1])


def totals(
    conn: Connection, chosen: Sequence[Version], since: datetime | None = None
) -> dict[int, JobTotals]:
    """Each chosen version's totals, by its key, in a few reads for them all; with
    ``since``, of the tries started at or after it only (the Default estimate still learns
    from every run)."""
    pks = [v.pk for v in chosen]
    shown = (SHOWN,) if since is None else (SHOWN, trials.c.started_at >= since)
    # Per job and place (DAG, task, measurement): the sums, added up per job below.
    sums: dict[int, list[float]] = {}
    places: dict[int, set[tuple[str, str, Measurement]]] = {}
    for r in conn.execute(
        select(
            trials.c.job_pk,
            trials.c.dag_id,
            trials.c.task_id,
            trials.c.measurement,
            func.coalesce(func.sum(trials.c.energy_j), 0.0),
            func.coalesce(func.sum(trials.c.time_s), 0.0),
            func.coalesce(func.sum(trials.c.cost), 0.0),
        )
        .where(trials.c.job_pk.in_(pks), *shown)
        .group_by(trials.c.job_pk, trials.c.dag_id, trials.c.task_id, trials.c.measurement)
    ):
        pk, dag_id, task_id, measurement, *figures = r
        places.setdefault(pk, set()).add((dag_id, task_id, measurement))
        total = sums.setdefault(pk, [0.0, 0.0, 0.0])
        for i, value in enumerate(figures):
            total[i] += float(value)
    per_run = run_figures(pks, shown).subquery()
    counts = {
        r.job_pk: r
        for r in conn.execute(
            select(
                per_run.c.job_pk,
                func.count().label("runs"),
                func.coalesce(func.sum(per_run.c.done), 0).label("done"),
            ).group_by(per_run.c.job_pk)
        )
    }
    defaults = default_estimates(conn, chosen)
    result = {}
    for v in chosen:
        seen, count = places.get(v.pk, set()), counts.get(v.pk)
        energy_j, time_s, cost = sums.get(v.pk, (0.0, 0.0, 0.0))
        result[v.pk] = JobTotals(
            version=v,
            tasks=tuple(sorted({(d, t) for d, t, _ in seen})),
            runs=count.runs if count else 0,
            finished_runs=int(count.done) if count else 0,
            energy_j=energy_j,
            time_s=time_s,
            cost=cost,
            measurements=tuple(sorted({m for *_, m in seen})),
            default=defaults[v.pk],
        )
    return result


def run_figures(pks: list[int], shown: tuple[ColumnElement[bool], ...]) -> Select[Any]:
    """One row per run: its job, first start, energy and whether it is finished. A run is
    finished once one of its tries has figures and none is still training: the Default
    estimate counts one Default run per finished run."""
    return (
        select(
            trials.c.job_pk,
            func.min(trials.c.started_at).label("started_at"),
            func.coalesce(func.sum(trials.c.energy_j), 0.0).label("energy"),
            (
                func.max(trials.c.energy_j.is_not(None).cast(Integer))
                * func.min((trials.c.status != "running").cast(Integer))
            ).label("done"),
        )
        .where(trials.c.job_pk.in_(pks), *shown)
        .group_by(trials.c.job_pk, *_RUN_KEY)
    )


def summaries(
    conn: Connection,
    chosen: Sequence[Version],
    history: dict[str, list[Version]],
    since: datetime | None = None,
) -> list[JobSummary]:
    """One summary per chosen version, in the order given (``since``: as :func:`totals`)."""
    pks = [v.pk for v in chosen]
    observe = trials.c.would_save_energy_j.is_not(None)
    shown = (SHOWN,) if since is None else (SHOWN, trials.c.started_at >= since)
    observed = {
        r.job_pk: r
        for r in conn.execute(
            select(
                trials.c.job_pk,
                func.sum(trials.c.would_save_energy_j).label("would_save_energy"),
                func.sum(trials.c.would_save_time_s).label("would_save_time"),
                func.sum(case((observe, trials.c.energy_j))).label("observed_energy"),
            )
            .where(trials.c.job_pk.in_(pks), *shown)
            .group_by(trials.c.job_pk)
        )
    }
    summed = totals(conn, chosen, since)
    result = []
    for v in chosen:
        phase, best = decision_state(conn, v)
        seen = observed.get(v.pk)
        result.append(
            JobSummary(
                **{f.name: getattr(summed[v.pk], f.name) for f in fields(JobTotals)},
                versions=tuple(h.version for h in history[v.job_id]),
                phase=phase,
                best_batch_size=best,
                best_power_limit_w=_last_limit(conn, v.pk, best),
                would_save_energy_j=seen.would_save_energy if seen else None,
                would_save_time_s=seen.would_save_time if seen else None,
                observed_energy_j=seen.observed_energy if seen else None,
            )
        )
    return result


def _last_limit(conn: Connection, job_pk: int, batch_size: int | None) -> int | None:
    """The power limit the latest finished try of ``batch_size`` trained at."""
    if batch_size is None:
        return None
    return conn.execute(
        select(trials.c.power_limit_w)
        .where(
            trials.c.job_pk == job_pk,
            trials.c.batch_size == batch_size,
            trials.c.energy_j.is_not(None),
            trials.c.power_limit_w.is_not(None),
        )
        .order_by(trials.c.decision_seq.desc())
        .limit(1)
    ).scalar()


def detail(conn: Connection, summary: JobSummary) -> JobDetail:
    v = summary.version
    return JobDetail(summary, runs(conn, v.pk), arms(conn, v), profile_points(conn, v.pk))

"""Jobs as people look them up: their versions, the DAGs and task instances that fed them,
and what a report needs to see a version as the policy does."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select

from zeus_airflow.core.domain import DeviceInfo, JobRef, JobState, Version
from zeus_airflow.core.store.clock import as_utc
from zeus_airflow.core.store.reads.base import Reads
from zeus_airflow.core.store.state import read_state
from zeus_airflow.core.store.tables import jobs, trials

_LATEST = (trials.c.decision_seq.desc(),)
"""A job's latest trial first."""


class JobReads(Reads):
    def job_dags(self, job_id: str | None = None) -> dict[str, frozenset[str]]:
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
        found: dict[str, set[str]] = {j: set() for j in self.conn.execute(ids).scalars()}
        for job, dag_id in self.conn.execute(pairs):
            found[job].add(dag_id)
        return {job: frozenset(dags) for job, dags in found.items()}

    def instance_job(
        self,
        dag_id: str,
        task_id: str,
        map_index: int | None = None,
        run_id: str | None = None,
    ) -> str | None:
        """The job a task instance fed: the one of its trials in ``run_id`` when it ran
        there, else the one of its latest trial (a job id can be renamed between runs, and
        each mapped instance has a job of its own). ``map_index`` None: any instance of the
        task."""
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
            None
            if run_id is None
            else self.conn.execute(query.where(trials.c.run_id == run_id)).scalar()
        )
        return found if found is not None else self.conn.execute(query).scalar()

    def task_jobs(self, dag_id: str, task_id: str) -> dict[int, str]:
        """Each map index the task ran (-1 alone when it is not mapped), in order, with the
        job its latest trial fed."""
        rows = self.conn.execute(
            select(trials.c.map_index, jobs.c.job_id)
            .join(jobs, trials.c.job_pk == jobs.c.id)
            .where(trials.c.dag_id == dag_id, trials.c.task_id == task_id)
            .order_by(trials.c.started_at, trials.c.id)
        )
        latest = {index: job_id for index, job_id in rows}  # the latest trial overwrites
        return dict(sorted(latest.items()))

    def job_instances(self, job_id: str, dag_id: str, task_id: str) -> list[int]:
        """The map indexes of the task that fed the job, over all its versions, in the order
        they first did."""
        first = func.min(trials.c.id)
        return list(
            self.conn.execute(
                select(trials.c.map_index)
                .join(jobs, trials.c.job_pk == jobs.c.id)
                .where(
                    jobs.c.job_id == job_id, trials.c.dag_id == dag_id, trials.c.task_id == task_id
                )
                .group_by(trials.c.map_index)
                .order_by(first)
            ).scalars()
        )

    def job_instance_runs(self, job_id: str, dag_id: str, task_id: str, map_index: int) -> int:
        """How many DAG runs a task instance fed the job in."""
        return int(
            self.conn.execute(
                select(func.count(trials.c.run_id.distinct()))
                .join(jobs, trials.c.job_pk == jobs.c.id)
                .where(
                    jobs.c.job_id == job_id,
                    trials.c.dag_id == dag_id,
                    trials.c.task_id == task_id,
                    trials.c.map_index == map_index,
                )
            ).scalar()
            or 0
        )

    def versions(self, job_ids: Iterable[str]) -> dict[str, list[Version]]:
        """Each job's versions, oldest first."""
        rows = self.conn.execute(
            select(jobs)
            .where(jobs.c.job_id.in_(list(job_ids)))
            .order_by(jobs.c.job_id, jobs.c.version)
        )
        found: dict[str, list[Version]] = {}
        for r in rows:
            found.setdefault(r.job_id, []).append(
                Version(
                    r.id, r.job_id, r.version, bool(r.active), as_utc(r.created_at), r.config_json
                )
            )
        return found

    def latest_device(self, job_pk: int) -> DeviceInfo | None:
        """The GPU setup the version's latest try ran on (without candidate limits, which
        only the grid baseline needs), its limits fixed where that try could not change
        them; None before any try."""
        latest = self.conn.execute(
            select(
                trials.c.gpu_model, trials.c.gpu_count, trials.c.measurement, trials.c.power_control
            )
            .where(trials.c.job_pk == job_pk)
            .order_by(*_LATEST)
            .limit(1)
        ).first()
        if latest is None:
            return None
        fixed = latest.power_control == "none"
        return DeviceInfo(latest.gpu_model, latest.gpu_count, latest.measurement, (), fixed)

    def job_state(self, version: Version | JobRef, device: DeviceInfo) -> JobState:
        """What a decision for this version on ``device`` would read (``read_state``)."""
        ref = version if isinstance(version, JobRef) else version.ref
        return read_state(self.conn, ref, device, frozenset())

    def last_phase(self, job_pk: int) -> str | None:
        """The phase of the version's latest decision; None before any."""
        return self.conn.execute(
            select(trials.c.phase).where(trials.c.job_pk == job_pk).order_by(*_LATEST).limit(1)
        ).scalar()

    def last_limit(self, job_pk: int, batch_size: int | None) -> int | None:
        """The power limit the latest finished try of ``batch_size`` trained at."""
        if batch_size is None:
            return None
        return self.conn.execute(
            select(trials.c.power_limit_w)
            .where(
                trials.c.job_pk == job_pk,
                trials.c.batch_size == batch_size,
                trials.c.energy_j.is_not(None),
                trials.c.power_limit_w.is_not(None),
            )
            .order_by(*_LATEST)
            .limit(1)
        ).scalar()

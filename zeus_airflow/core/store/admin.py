"""What the store holds, for people (the CLI and the UI), and starting a job over.

Reads only: the engine never uses this module. ``reset_job`` and ``drop_trials`` are the two
writes, and neither deletes anything: a job starts over as a new version, like after a
configuration change; a dropped trial keeps its row, its figures moved into its error text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, insert, select, update
from sqlalchemy.sql.elements import Label

from zeus_airflow.core.domain import FIGURES, RUN_FIGURES, TRY_FIGURES, TrialRecord
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.clock import as_utc
from zeus_airflow.core.store.sql import SQLStore, lock_job_versions
from zeus_airflow.core.store.state import known
from zeus_airflow.core.store.tables import RUN_KEY, jobs, run_carbon, trials


@dataclass(frozen=True)
class JobVersion:
    """One version of a job, with its trials counted. Energy in J, time in s."""

    job_id: str
    version: int
    active: bool
    created_at: datetime
    fingerprint: str
    config: dict[str, Any]
    """The version's JobConfig, as stored."""
    trials: int
    running: int
    succeeded: int
    failed: int
    counted: int
    """Trials whose cost feeds the posteriors."""
    energy_j: float
    time_s: float


def _count(condition: ColumnElement[bool], name: str) -> Label[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0).label(name)


_JOBS = (
    select(
        jobs.c.job_id,
        jobs.c.version,
        jobs.c.active,
        jobs.c.created_at,
        jobs.c.fingerprint,
        jobs.c.config_json,
        func.count(trials.c.id).label("trials"),
        *(
            _count(trials.c.status == status, status)
            for status in ("running", "succeeded", "failed")
        ),
        _count(trials.c.observed, "counted"),
        func.coalesce(func.sum(known("energy_j")), 0.0).label("energy_j"),
        func.coalesce(func.sum(known("time_s")), 0.0).label("time_s"),
    )
    .select_from(jobs.outerjoin(trials, trials.c.job_pk == jobs.c.id))
    .group_by(jobs.c.id)
    .order_by(jobs.c.job_id, jobs.c.version)
)
_TRIALS = (
    select(
        trials.c.id,
        jobs.c.job_id,
        jobs.c.version,
        *[c for c in trials.c if c.name not in ("id", "job_pk")],
    )
    .join(jobs, trials.c.job_pk == jobs.c.id)
    .order_by(trials.c.id)
)
_RUN_CARBON = select(jobs.c.job_id, jobs.c.version, run_carbon).join(
    jobs, run_carbon.c.job_pk == jobs.c.id
)
_KEY = ("job_id", "version", *RUN_KEY[1:])
"""A run's key as a trial's row and a run's carbon row both name it."""


def list_jobs(store: SQLStore) -> list[JobVersion]:
    """Every version of every job, oldest first within a job."""
    with store.reading() as conn:
        rows = conn.execute(_JOBS).mappings().all()
    return [
        JobVersion(
            **{
                **{k: v for k, v in row.items() if k != "config_json"},
                "active": bool(row["active"]),
                "created_at": as_utc(row["created_at"]),
                "config": json.loads(row["config_json"]),
            }
        )
        for row in rows
    ]


def list_trials(store: SQLStore, job_id: str | None = None) -> list[TrialRecord]:
    """Every trial (of every version of ``job_id`` when given), in the order they began.
    A run's carbon figures (``tables.run_carbon``) are shown on its last try."""
    query = _TRIALS if job_id is None else _TRIALS.where(jobs.c.job_id == job_id)
    runs = _RUN_CARBON if job_id is None else _RUN_CARBON.where(jobs.c.job_id == job_id)
    with store.reading() as conn:
        rows = conn.execute(query).mappings().all()
        carbon = {tuple(r[k] for k in _KEY): r for r in conn.execute(runs).mappings()}
    last: dict[tuple[Any, ...], Any] = {}
    for row in rows:
        key = tuple(row[k] for k in _KEY)
        if key not in last or row["decision_seq"] > last[key]["decision_seq"]:
            last[key] = row
    return [
        TrialRecord(
            **{
                **row,
                "started_at": as_utc(row["started_at"]),
                "heartbeat_at": as_utc(row["heartbeat_at"]),
                "finished_at": row["finished_at"] and as_utc(row["finished_at"]),
                "expires_at": row["expires_at"] and as_utc(row["expires_at"]),
                "recorded_late_at": row["recorded_late_at"] and as_utc(row["recorded_late_at"]),
                **_carbon_of(row, carbon, last),
            }
        )
        for row in rows
    ]


def _carbon_of(
    row: Any, carbon: dict[tuple[Any, ...], Any], last: dict[tuple[Any, ...], Any]
) -> dict[str, Any]:
    """A trial's carbon fields: its run's figures on the run's last try, None elsewhere."""
    key = tuple(row[k] for k in _KEY)
    figures = carbon.get(key) if last[key] is row else None
    return {name: None if figures is None else figures[name] for name in RUN_FIGURES}


def reset_job(store: SQLStore, job_id: str) -> JobVersion:
    """Start ``job_id`` over: a new, empty version with the same configuration and seed.

    Earlier versions stay visible (``zeus-airflow runs``) but no longer count; trials still
    running finish into the version they began in.
    """
    with store.transaction() as conn:
        lock_job_versions(conn, job_id)
        current = conn.execute(select(jobs).where(jobs.c.job_id == job_id, jobs.c.active)).first()
        if current is None:
            known = conn.execute(select(jobs.c.job_id).distinct()).scalars().all()
            raise StoreError(
                f"job {job_id!r} is not in the store at {store.where}; known "
                f"jobs: {', '.join(sorted(known)) or 'none'}"
            )
        conn.execute(update(jobs).where(jobs.c.id == current.id).values(active=False))
        version = (
            conn.execute(
                select(func.max(jobs.c.version)).where(jobs.c.job_id == job_id)
            ).scalar_one()
            + 1
        )
        created = datetime.now(UTC)
        conn.execute(
            insert(jobs).values(
                job_id=job_id,
                version=version,
                fingerprint=current.fingerprint,
                config_json=current.config_json,
                seed=current.seed,
                decisions=0,
                active=True,
                created_at=created,
            )
        )
    return JobVersion(
        job_id,
        version,
        True,
        created,
        current.fingerprint,
        json.loads(current.config_json),
        0,
        0,
        0,
        0,
        0,
        0.0,
        0.0,
    )


DROPPED_FIGURES = tuple(n for n in TRY_FIGURES if FIGURES[n].sql in ("float", "int"))
"""What a dropped trial no longer holds: every number of it, which every read would count."""


def drop_trials(store: SQLStore, job_id: str, trial_ids: list[int]) -> list[int]:
    """Take trials of ``job_id`` (any version) out of every figure: status ``invalid``, not
    observed, their numbers NULL (read as missing everywhere) and kept in their ``error``
    text. The repair for a row no worker wrote (a forged one, a bad restore) that broke a
    job's books (``core/train/books_notice.py``). Returns the ids dropped; raises
    StoreError naming the ids that are not the job's."""
    with store.transaction() as conn:
        rows = conn.execute(
            select(trials.c.id, trials.c.error, *(trials.c[n] for n in DROPPED_FIGURES))
            .join(jobs, jobs.c.id == trials.c.job_pk)
            .where(jobs.c.job_id == job_id, trials.c.id.in_(trial_ids))
        ).all()
        missing = sorted(set(trial_ids) - {r.id for r in rows})
        if missing:
            raise StoreError(
                f"trial(s) {', '.join(map(str, missing))} are not trials of job {job_id!r} "
                f"in the store at {store.where}; `zeus-airflow runs --job {job_id} --wide` "
                "lists its trials"
            )
        when = datetime.now(UTC).isoformat(timespec="seconds")
        for r in rows:
            kept = {n: getattr(r, n) for n in DROPPED_FIGURES if getattr(r, n) is not None}
            note = f"dropped by zeus-airflow drop-trials at {when}; its figures were {kept!r}"
            conn.execute(
                update(trials)
                .where(trials.c.id == r.id)
                .values(
                    status="invalid",
                    observed=False,
                    error=f"{r.error}; {note}" if r.error else note,
                    **dict.fromkeys(DROPPED_FIGURES),
                )
            )
    return sorted(r.id for r in rows)

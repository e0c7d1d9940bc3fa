"""The store on SQLAlchemy 2 (SQLite or PostgreSQL).

Decisions are atomic: the job's row is locked (``SELECT ... FOR UPDATE`` on PostgreSQL, an
immediate transaction on SQLite) while the policy reads the snapshot and the new trial is
inserted, so overlapping runs of one job see each other's in-flight trials.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    case,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.cost import LimitMeasurement
from zeus_airflow.core.policy import (
    EXPLORATION_PHASES,
    ExplorationStep,
    JobSnapshot,
    Policy,
)
from zeus_airflow.core.posterior import ArmStats
from zeus_airflow.core.profiler import PowerProfile
from zeus_airflow.core.run import RunOutcome
from zeus_airflow.core.store.base import (
    DeviceInfo,
    JobRef,
    RecurrenceKey,
    TrialStart,
)
from zeus_airflow.core.store.tables import jobs, metadata, power_profiles, trials

log = logging.getLogger(__name__)

# Statements are built once: building SQLAlchemy expressions costs more than running them on
# SQLite, and the simulator makes tens of thousands of decisions.
_job = bindparam("job_key")
_EXPLORATION = (
    select(trials.c.batch_size, trials.c.status, trials.c.cost, trials.c.power_limit_w)
    .where(trials.c.job_pk == _job, trials.c.phase.in_(EXPLORATION_PHASES),
           trials.c.status.in_(("succeeded", "failed")))
    .order_by(trials.c.decision_seq)
)
_IN_FLIGHT = select(trials.c.batch_size).where(
    trials.c.job_pk == _job, trials.c.status == "running",
    trials.c.phase.in_(EXPLORATION_PHASES))
_OBSERVED = and_(trials.c.job_pk == _job, trials.c.observed)
_ARM_TOTALS = select(
    trials.c.batch_size, func.count(), func.avg(trials.c.cost),
    func.sum(trials.c.cost * trials.c.cost),
    func.min(case((trials.c.reached_target, trials.c.cost))),
).where(_OBSERVED).group_by(trials.c.batch_size)
_recent = select(
    trials.c.batch_size, trials.c.cost, trials.c.reached_target,
    func.row_number().over(partition_by=trials.c.batch_size,
                           order_by=trials.c.id.desc()).label("age"),
).where(_OBSERVED).subquery()
_ARM_WINDOWS = select(_recent.c.batch_size, _recent.c.cost, _recent.c.reached_target).where(
    _recent.c.age <= bindparam("window"))
_EXPIRE = update(trials).where(
    trials.c.job_pk == _job, trials.c.status == "running",
    trials.c.heartbeat_at < bindparam("stale_before")).values(status="expired")
_INSERT_TRIAL = insert(trials)
_COUNT_DECISION = update(jobs).where(jobs.c.id == _job).values(decisions=bindparam("seq"))
_LOCK_JOB = select(jobs.c.seed, jobs.c.decisions).where(jobs.c.id == _job)
_FINISH = update(trials).where(trials.c.id == bindparam("trial_key")).values(
    status=case((trials.c.status == "superseded", "superseded"),
                else_=bindparam("new_status")),
    observed=and_(trials.c.status != "superseded", bindparam("counts")),
)
_PROFILE = select(power_profiles).where(
    power_profiles.c.job_pk == _job, power_profiles.c.batch_size == bindparam("batch_size"),
    power_profiles.c.gpu_model == bindparam("gpu_model"),
    power_profiles.c.gpu_count == bindparam("gpu_count"))

DEFAULT_LEASE_S = 600.0
"""A running trial whose last heartbeat is older than this has lost its worker."""


def make_engine(url: str | URL) -> Engine:
    """An engine configured for the store's transactions on SQLite or PostgreSQL."""
    url = make_url(url)
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, future=True)
    in_memory = url.database in (None, "", ":memory:")
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 60},
        poolclass=StaticPool if in_memory else None,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy issue BEGIN itself, so that it can be BEGIN IMMEDIATE below.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Take the write lock up front: a read-decide-write transaction must not interleave.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class SQLStore:
    """The :class:`~zeus_airflow.core.store.base.Store` on a SQL database."""

    def __init__(self, url: str | URL | None = None, *, engine: Engine | None = None,
                 lease_s: float = DEFAULT_LEASE_S, create_schema: bool = True) -> None:
        if engine is None:
            if url is None:
                raise ValueError("SQLStore needs a url or an engine")
            engine = make_engine(url)
        self.engine = engine
        self.lease = timedelta(seconds=lease_s)
        self._locks_rows = engine.dialect.name != "sqlite"
        if create_schema:
            metadata.create_all(engine)

    @classmethod
    def in_memory(cls) -> SQLStore:
        return cls("sqlite://")

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    # --- jobs --------------------------------------------------------------------------------
    def register_job(self, config: JobConfig, seed: int | None = None) -> JobRef:
        fingerprint = config.fingerprint()
        with self.transaction() as conn:
            query = (select(jobs).where(jobs.c.job_id == config.job_id, jobs.c.active)
                     .order_by(jobs.c.version.desc()).limit(1))
            if self._locks_rows:
                query = query.with_for_update()
            current = conn.execute(query).first()
            if current is not None and current.fingerprint == fingerprint:
                if current.config_json != config.to_json():
                    # Only settings that do not change what a cost means (max_tries, step
                    # counts) differ: keep the history, take the new settings.
                    conn.execute(update(jobs).where(jobs.c.id == current.id)
                                 .values(config_json=config.to_json()))
                return JobRef(current.id, config.job_id, current.version, config)
            version = 1
            if current is not None:
                version = current.version + 1
                conn.execute(update(jobs).where(jobs.c.job_id == config.job_id)
                             .values(active=False))
                log.warning("job %s: configuration changed, starting version %d (the history "
                            "of version %d stays visible but no longer counts)",
                            config.job_id, version, current.version)
            pk = conn.execute(insert(jobs).values(
                job_id=config.job_id, version=version, fingerprint=fingerprint,
                config_json=config.to_json(),
                seed=seed if seed is not None else secrets.randbelow(2**31),
                decisions=0, active=True, created_at=_now(),
            )).inserted_primary_key[0]
            return JobRef(pk, config.job_id, version, config)

    # --- trials ------------------------------------------------------------------------------
    def begin_trial(self, job: JobRef, key: RecurrenceKey, attempt: int, policy: Policy,
                    device: DeviceInfo, excluded: frozenset[int]) -> TrialStart:
        now = _now()
        with self.transaction() as conn:
            job_row = self._lock_job(conn, job.id)
            self._expire_stale(conn, job.id, now)
            self._supersede_earlier_tries(conn, job.id, key, attempt)
            snapshot = self._snapshot(conn, job, device, excluded)
            seq = job_row.decisions + 1
            decision = policy.decide(snapshot, np.random.default_rng([job_row.seed, seq]))
            trial_id = conn.execute(_INSERT_TRIAL, dict(
                job_pk=job.id, decision_seq=seq, dag_id=key.dag_id, task_id=key.task_id,
                run_id=key.run_id, map_index=key.map_index, try_number=key.try_number,
                attempt=attempt, status="running", phase=decision.phase,
                batch_size=decision.batch_size, power_limit_w=decision.power_limit_w,
                observed=False, measurement=device.kind, gpu_model=device.model,
                gpu_count=device.count, started_at=now, heartbeat_at=now,
            )).inserted_primary_key[0]
            conn.execute(_COUNT_DECISION, dict(job_key=job.id, seq=seq))
        return TrialStart(trial_id, decision)

    def heartbeat(self, trial_id: int) -> None:
        with self.transaction() as conn:
            conn.execute(update(trials).where(trials.c.id == trial_id,
                                              trials.c.status == "running")
                         .values(heartbeat_at=_now()))

    def finish_trial(self, trial_id: int, outcome: RunOutcome, observed: bool) -> None:
        # A superseded trial keeps its figures but never counts; an expired one whose worker
        # was merely slow is taken back: its measurement is real.
        with self.transaction() as conn:
            conn.execute(_FINISH, dict(
                trial_key=trial_id, counts=observed,
                new_status="succeeded" if outcome.reached_target else "failed",
                power_limit_w=outcome.power_limit_w, energy_j=outcome.energy_j,
                time_s=outcome.time_s, cost=outcome.cost, epochs=outcome.epochs,
                reached_target=outcome.reached_target, stop_reason=outcome.stop_reason,
                finished_at=_now()))

    def fail_trial(self, trial_id: int, error: str) -> None:
        with self.transaction() as conn:
            conn.execute(update(trials).where(trials.c.id == trial_id,
                                              trials.c.status == "running")
                         .values(status="error", error=error[-4000:], finished_at=_now()))

    # --- power profiles ----------------------------------------------------------------------
    def load_profile(self, job: JobRef, batch_size: int, device: DeviceInfo) -> PowerProfile:
        with self.engine.connect() as conn:
            rows = conn.execute(_PROFILE, dict(job_key=job.id, batch_size=batch_size,
                                               gpu_model=device.model,
                                               gpu_count=device.count)).all()
        measured = {r.power_limit_w: LimitMeasurement(r.power_limit_w, r.avg_power_w,
                                                      r.steps_per_s) for r in rows}
        return PowerProfile(batch_size, device.model, device.count, device.power_limits_w,
                            {w: m for w, m in measured.items() if w in device.power_limits_w})

    def save_profile(self, job: JobRef, profile: PowerProfile) -> None:
        if not profile.measurements:
            return
        where = and_(power_profiles.c.job_pk == job.id,
                     power_profiles.c.batch_size == profile.batch_size,
                     power_profiles.c.gpu_model == profile.gpu_model,
                     power_profiles.c.gpu_count == profile.gpu_count)
        with self.transaction() as conn:
            conn.execute(delete(power_profiles).where(where))
            conn.execute(insert(power_profiles), [
                dict(job_pk=job.id, batch_size=profile.batch_size, gpu_model=profile.gpu_model,
                     gpu_count=profile.gpu_count, power_limit_w=m.power_limit_w,
                     avg_power_w=m.avg_power_w, steps_per_s=m.steps_per_s)
                for m in profile.measurements.values()])

    # --- internals ---------------------------------------------------------------------------
    def _lock_job(self, conn: Connection, job_pk: int) -> Any:
        query = _LOCK_JOB.with_for_update() if self._locks_rows else _LOCK_JOB
        row = conn.execute(query, dict(job_key=job_pk)).first()
        if row is None:
            raise KeyError(f"job {job_pk} is not in the store")
        return row

    def _expire_stale(self, conn: Connection, job_pk: int, now: datetime) -> None:
        conn.execute(_EXPIRE, dict(job_key=job_pk, stale_before=now - self.lease))

    def _supersede_earlier_tries(self, conn: Connection, job_pk: int, key: RecurrenceKey,
                                 attempt: int) -> None:
        """An Airflow retry (or a re-run of the same try) replaces what the task instance
        recorded before: its earlier trials stay visible but stop counting."""
        same_ti = and_(trials.c.job_pk == job_pk, trials.c.dag_id == key.dag_id,
                       trials.c.task_id == key.task_id, trials.c.run_id == key.run_id,
                       trials.c.map_index == key.map_index)
        if attempt == 1:
            conn.execute(update(trials).where(same_ti, trials.c.try_number < key.try_number)
                         .values(status="superseded", observed=False))
        conn.execute(delete(trials).where(same_ti, trials.c.try_number == key.try_number,
                                          trials.c.attempt >= attempt))

    def _snapshot(self, conn: Connection, job: JobRef, device: DeviceInfo,
                  excluded: frozenset[int]) -> JobSnapshot:
        config = job.config
        params = dict(job_key=job.id)
        exploration = tuple(
            ExplorationStep(r.batch_size, r.status == "succeeded", r.cost, r.power_limit_w)
            for r in conn.execute(_EXPLORATION, params))
        in_flight = tuple(conn.execute(_IN_FLIGHT, params).scalars())
        observations, min_success = self._observations(conn, job.id, config.window_size)
        return JobSnapshot(config=config, exploration=exploration, in_flight=in_flight,
                           observations=observations, min_success_cost=min_success,
                           excluded=excluded, power_limits_w=device.power_limits_w)

    def _observations(self, conn: Connection, job_pk: int, window: int | None
                      ) -> tuple[dict[int, ArmStats], float | None]:
        """Each arm's statistics over its window: O(window x arms) rows, or, with no window,
        one aggregate row per arm."""
        if window is None:
            totals = conn.execute(_ARM_TOTALS, dict(job_key=job_pk)).all()
            stats = {b: ArmStats(n, mean, max(sum_sq - n * mean * mean, 0.0))
                     for b, n, mean, sum_sq, _ in totals}
            minima = [m for *_, m in totals if m is not None]
            return stats, (min(minima) if minima else None)
        rows = conn.execute(_ARM_WINDOWS, dict(job_key=job_pk, window=window)).all()
        costs: dict[int, list[float]] = {}
        for b, cost, _ in rows:
            costs.setdefault(b, []).append(cost)
        successes = [cost for _, cost, reached in rows if reached]
        return ({b: ArmStats.of(c) for b, c in costs.items()},
                min(successes) if successes else None)


def _now() -> datetime:
    return datetime.now(UTC)


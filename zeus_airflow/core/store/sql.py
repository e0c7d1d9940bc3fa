"""The store on SQLAlchemy 2 (SQLite or PostgreSQL).

A decision is one unit of work: it locks the job's row (on PostgreSQL by claiming the job's
next decision number, an ``UPDATE``; on SQLite ``BEGIN IMMEDIATE`` takes the database's write
lock), reads the job's state, hands it to the caller's ``decide`` and inserts the trial it
returns, in one transaction: decisions of one job never interleave, and each sees the trials
the others have in flight. The store decides nothing itself: the statuses it writes and the
moves between them are the domain's (``core/domain/trials.py``).

Recording a result needs no job lock: it changes one trial row, and the decision reads a
trial's state (in flight, or a finished pruning step) in a single statement, so a result
recorded meanwhile is seen whole or not at all.

Transactions are retried after transient failures (see ``retry``); what still fails raises
:class:`StoreError`, and a finished trial that cannot be recorded raises
:class:`UnrecordedResultError` carrying the measured result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Integer,
    String,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL, CursorResult
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.sql.elements import BindParameter

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.full_disk import full_disk
from zeus_airflow.core.domain import (
    EXPLORATION_PHASES,
    FIGURES,
    TRY_FIGURES,
    Decide,
    DeviceInfo,
    JobRef,
    PendingResult,
    PowerProfile,
    RecurrenceKey,
    RunCarbon,
    RunOutcome,
    SliceInProgress,
    TrialStatus,
    claim_problem,
)
from zeus_airflow.core.domain import trials as status
from zeus_airflow.core.domain.finite import finite_or_none
from zeus_airflow.core.store import schema
from zeus_airflow.core.store.base import (
    LateRecord,
    Lease,
    LeaseRequest,
    StoreError,
    TrialStart,
    UnrecordedResultError,
)
from zeus_airflow.core.store.clock import as_utc, db_now
from zeus_airflow.core.store.connect import (
    DEFAULT_TIMEOUT_S,
    DURABLE,
    READ_ONLY,
    display_url,
    make_engine,
)
from zeus_airflow.core.store.reads import Reader, SQLReader
from zeus_airflow.core.store.retry import (
    Diagnose,
    RetryPolicy,
    is_transient,
    refusal,
    sqlite_fault,
    with_retries,
)
from zeus_airflow.core.store.state import books_suspects, read_state
from zeus_airflow.core.store.tables import gpu_leases, jobs, power_profiles, run_carbon, trials

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 600.0
"""How long a running trial that sends no heartbeats (``heartbeat_s=None``: the simulator)
may go unheard before it counts as lost. Trials with heartbeats get ``lease_for(interval)``."""
MISSED_HEARTBEATS = 3
"""A trial with heartbeats expires after this many intervals without one: a killed worker
stalls its job for a few minutes at most, and one slow beat does not expire a live trial."""


def lease_for(heartbeat_s: float | None) -> float:
    """Seconds a running trial may go unheard before it expires."""
    return DEFAULT_LEASE_S if heartbeat_s is None else MISSED_HEARTBEATS * heartbeat_s


_job: BindParameter[int] = bindparam("job_key", type_=Integer)
_ACTIVE_JOB = select(jobs).where(jobs.c.job_id == bindparam("job_id"), jobs.c.active)
_LAST_VERSION = select(func.max(jobs.c.version)).where(jobs.c.job_id == bindparam("job_id"))
_REGISTRATION_LOCK = text(
    "SELECT pg_advisory_xact_lock(CAST(:namespace AS integer), CAST(:key AS integer))"
)
_REGISTRATION_NAMESPACE = 0x7A65  # "ze": keeps our advisory keys apart from other users'
# Claiming the job's next decision number is what locks the job's row for the decision.
_CLAIM_DECISION = (
    update(jobs)
    .where(jobs.c.id == _job)
    .values(decisions=jobs.c.decisions + 1)
    .returning(jobs.c.seed, jobs.c.decisions)
)
_LOCK_JOB = select(jobs.c.id).where(jobs.c.id == _job).with_for_update()


def _moving(
    event: Mapping[TrialStatus, TrialStatus],
) -> tuple[ColumnElement[bool], ColumnElement[str]]:
    """A status event (``core/domain/trials.py``) as SQL: which rows it may move, and the
    status each moves to. Built from the event, so the store makes no other move."""
    into: dict[TrialStatus, list[TrialStatus]] = {}
    for old, new in event.items():
        into.setdefault(new, []).append(old)
    movable = trials.c.status.in_(list(event))
    if len(into) == 1:
        return movable, literal(next(iter(into)), String)
    return movable, case(*((trials.c.status.in_(olds), new) for new, olds in into.items()))


_EXPIRES, _EXPIRED = _moving(status.EXPIRE)
_EXPIRE = (
    update(trials)
    .where(
        trials.c.job_pk == _job,
        _EXPIRES,
        or_(
            trials.c.expires_at < bindparam("now"),
            and_(trials.c.expires_at.is_(None), trials.c.heartbeat_at < bindparam("stale_before")),
        ),
    )
    .values(status=_EXPIRED)
)
_same_ti = and_(
    trials.c.job_pk == _job,
    trials.c.dag_id == bindparam("ti_dag"),
    trials.c.task_id == bindparam("ti_task"),
    trials.c.run_id == bindparam("ti_run"),
    trials.c.map_index == bindparam("ti_map_index"),
)
_SUPERSEDES, _SUPERSEDED = _moving(status.SUPERSEDE)
_SUPERSEDE = (
    update(trials)
    .where(
        _same_ti,
        _SUPERSEDES,
        or_(
            trials.c.try_number < bindparam("ti_try"),
            and_(
                trials.c.try_number == bindparam("ti_try"),
                trials.c.attempt >= bindparam("ti_attempt"),
            ),
        ),
    )
    .values(status=_SUPERSEDED, observed=False)
)
_INSERT_TRIAL = insert(trials)
# The domain's rule (status.takes_result) as SQL.
_takes_result = or_(
    trials.c.status.in_(status.RESULT_TAKEN_FROM),
    and_(
        trials.c.status.in_(status.LATE_RESULT_TAKEN_FROM),
        trials.c.phase.not_in(EXPLORATION_PHASES),
    ),
)
_FINISH = (
    update(trials)
    .where(trials.c.id == bindparam("trial_key"))
    .values(
        status=case((_takes_result, bindparam("new_status")), else_=trials.c.status),
        observed=and_(_takes_result, bindparam("counts")),
    )
    .returning(trials.c.status)
)


def _ending(event: Mapping[TrialStatus, TrialStatus]) -> Any:
    """The statement that ends a trial whose train function raised, by ``event``."""
    moves, new = _moving(event)
    return (
        update(trials)
        .where(trials.c.id == bindparam("trial_key"))
        .values(
            status=case((moves, new), else_=trials.c.status),
            error=bindparam("message"),
            finished_at=bindparam("now"),
        )
    )


_FAIL = _ending(status.FAIL)
_SKIP = _ending(status.SKIP)
# An invalid try keeps its measurement (nothing is lost) but never counts.
_INVALIDATES, _INVALID = _moving(status.INVALIDATE)
_INVALIDATE = (
    update(trials)
    .where(trials.c.id == bindparam("trial_key"), _INVALIDATES)
    .values(status=_INVALID, observed=False)
    .returning(trials.c.status)
)
# A late result (the outbox) is taken once, by the trial it was measured for and only while
# that trial has no result: draining an outbox twice records nothing the second time.
_STILL_UNRECORDED = and_(
    _same_ti,
    trials.c.attempt == bindparam("ti_attempt"),
    trials.c.finished_at.is_(None),
    trials.c.recorded_late_at.is_(None),
)
_FINISH_LATE = _FINISH.where(_STILL_UNRECORDED).values(recorded_late_at=bindparam("late_at"))
_INVALIDATE_LATE = _INVALIDATE.where(_STILL_UNRECORDED).values(
    recorded_late_at=bindparam("late_at")
)
# A trial with no result yet that may take one (by ix_zeus_trials_status: the few trials of
# the job's versions that are running or expired).
_AWAITING = (
    select(trials.c.id)
    .join(jobs, trials.c.job_pk == jobs.c.id)
    .where(
        jobs.c.job_id == bindparam("job_id"),
        trials.c.status.in_((*status.RESULT_TAKEN_FROM, *status.LATE_RESULT_TAKEN_FROM)),
        trials.c.finished_at.is_(None),
        trials.c.recorded_late_at.is_(None),
        trials.c.dag_id == bindparam("ti_dag"),
        trials.c.task_id == bindparam("ti_task"),
        trials.c.map_index == bindparam("ti_map_index"),
    )
    .limit(1)
)
# What an outbox entry is checked against: the trial it claims to be the result of.
_CLAIMED = select(
    trials.c.status,
    trials.c.job_pk,
    trials.c.dag_id,
    trials.c.task_id,
    trials.c.run_id,
    trials.c.map_index,
    trials.c.attempt,
    trials.c.batch_size,
    trials.c.gpu_count,
).where(trials.c.id == bindparam("trial_key"))
_HEARTBEAT = (
    update(trials)
    .where(trials.c.id == bindparam("trial_key"), trials.c.status == status.STARTED)
    .values(heartbeat_at=bindparam("now"), expires_at=bindparam("expires_at"))
)
_PROFILE = select(power_profiles).where(
    power_profiles.c.job_pk == _job,
    power_profiles.c.batch_size == bindparam("batch_size"),
    power_profiles.c.gpu_model == bindparam("gpu_model"),
    power_profiles.c.gpu_count == bindparam("gpu_count"),
)


class SQLStore:
    """The :class:`~zeus_airflow.core.store.base.Store` on a SQL database.

    Opening a store checks its schema revision and refuses one that is not the code's
    (``zeus-airflow db upgrade`` fixes it); ``create_schema=True`` runs that upgrade first.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: Engine | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        retry: RetryPolicy | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        create_schema: bool = False,
    ) -> None:
        if engine is None:
            if url is None:
                raise ValueError("SQLStore needs a url or an engine")
            engine = make_engine(url, timeout_s=timeout_s)
        if lease_s <= 0:
            raise ValueError(f"lease_s={lease_s} is invalid: expected a number of seconds > 0")
        self.engine = engine
        self.where = display_url(engine.url)
        self.lease = timedelta(seconds=lease_s)
        self.retry = retry or RetryPolicy()
        self._locks_rows = engine.dialect.name != "sqlite"
        self._diagnose = sqlite_fault(engine.url)
        if create_schema:
            self._call("creating or upgrading the schema", lambda: schema.upgrade(engine))
        self._call("opening the store", self._check_schema)

    @classmethod
    def in_memory(cls) -> SQLStore:
        return cls("sqlite://", create_schema=True)

    @contextmanager
    def transaction(self, durable: bool = True) -> Iterator[Connection]:
        """A write transaction (on SQLite it holds the database's write lock). Not
        ``durable``: its commit does not wait for the disk (see ``connect.DURABLE``)."""
        with self.engine.connect() as conn:
            conn.execution_options(**{DURABLE: durable})
            with conn.begin():
                yield conn

    @contextmanager
    def single_statement(self) -> Iterator[Connection]:
        """For a write that is one statement: on PostgreSQL it commits on its own
        (autocommit: one round trip instead of three), on SQLite it is a transaction."""
        if not self._locks_rows:
            with self.transaction() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """Reads that never wait for SQLite's write lock. On PostgreSQL each statement runs
        on its own (autocommit): no BEGIN and COMMIT round trips around a lone SELECT."""
        with self.engine.connect() as conn:
            conn.execution_options(**{READ_ONLY: True})
            if self._locks_rows:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            with conn.begin():
                yield conn

    @contextmanager
    def reader(self) -> Iterator[Reader]:
        """The store's read-model (``reads``) on one reading connection. A database that
        fails meanwhile (down, unreachable) raises StoreError, with the driver's first line
        and never the statement; reads are not retried: the caller reads again later."""
        try:
            with self.reading() as conn:
                yield SQLReader(conn)
        except (OperationalError, InterfaceError) as err:
            cause = err.orig or err
            first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
            raise StoreError(
                f"the zeus-airflow store cannot be read ({type(cause).__name__}: {first}) "
                f"at {self.where}; the next read tries again"
            ) from err

    # --- jobs --------------------------------------------------------------------------------
    def register_job(
        self, config: JobConfig, seed: int | None = None, task: str | None = None
    ) -> JobRef:
        what = f"registering job {config.job_id!r}"

        def unchanged() -> JobRef | None:  # every recurrence but a job's first: no lock
            with self.reading() as conn:
                current = conn.execute(_ACTIVE_JOB, dict(job_id=config.job_id)).first()
            if current is None or current.config_json != config.to_json():
                return None
            return JobRef(current.id, config.job_id, current.version, config)

        known = self._call(what, unchanged)
        return known or self._write(what, lambda conn: self._register(conn, config, seed, task))

    def _register(
        self, conn: Connection, config: JobConfig, seed: int | None, task: str | None
    ) -> JobRef:
        lock_job_versions(conn, config.job_id)
        fingerprint = config.fingerprint()
        current = conn.execute(_ACTIVE_JOB, dict(job_id=config.job_id)).first()
        if current is not None and current.fingerprint == fingerprint:
            if current.config_json != config.to_json():
                # Only settings that do not change what a cost means (max_tries, step
                # counts) differ: keep the history, take the new settings.
                conn.execute(
                    update(jobs).where(jobs.c.id == current.id).values(config_json=config.to_json())
                )
            return JobRef(current.id, config.job_id, current.version, config)
        if current is not None:
            conn.execute(update(jobs).where(jobs.c.id == current.id).values(active=False))
        version = (conn.execute(_LAST_VERSION, dict(job_id=config.job_id)).scalar() or 0) + 1
        if current is not None:
            log.warning(
                "job %s: configuration changed, starting version %d (the history of "
                "version %d stays visible but no longer counts)%s",
                config.job_id,
                version,
                current.version,
                shared_by_another(conn, current, config, task),
            )
        pk = _inserted_id(
            conn.execute(
                insert(jobs).values(
                    job_id=config.job_id,
                    version=version,
                    fingerprint=fingerprint,
                    config_json=config.to_json(),
                    seed=seed if seed is not None else secrets.randbelow(2**31),
                    decisions=0,
                    active=True,
                    created_at=_now(),
                )
            )
        )
        return JobRef(pk, config.job_id, version, config)

    # --- trials ------------------------------------------------------------------------------
    def begin_trial(
        self,
        job: JobRef,
        key: RecurrenceKey,
        attempt: int,
        decide: Decide,
        device: DeviceInfo,
        excluded: frozenset[int],
        heartbeat_s: float | None = None,
        *,
        missed: frozenset[int] = frozenset(),
    ) -> TrialStart:
        def begin(conn: Connection) -> TrialStart:
            now = db_now(conn)
            claimed = conn.execute(_CLAIM_DECISION, dict(job_key=job.id)).first()
            if claimed is None:
                raise StoreError(f"job {job.id} is not in the zeus-airflow store at {self.where}")
            seed, seq = claimed
            conn.execute(_EXPIRE, dict(job_key=job.id, now=now, stale_before=now - self.lease))
            conn.execute(
                _SUPERSEDE,
                dict(
                    job_key=job.id,
                    ti_dag=key.dag_id,
                    ti_task=key.task_id,
                    ti_run=key.run_id,
                    ti_map_index=key.map_index,
                    ti_try=key.try_number,
                    ti_attempt=attempt,
                ),
            )
            state = read_state(conn, job, device, excluded, missed=missed, key=key)
            decision = decide(state, _rng(seed, seq))
            trial_id = _inserted_id(
                conn.execute(
                    _INSERT_TRIAL,
                    dict(
                        job_pk=job.id,
                        decision_seq=seq,
                        **recurrence_columns(key),
                        attempt=attempt,
                        status=status.STARTED,
                        phase=decision.phase,
                        batch_size=decision.batch_size,
                        power_limit_w=decision.power_limit_w,
                        observed=False,
                        measurement=device.measurement,
                        gpu_model=device.model,
                        gpu_count=device.count,
                        started_at=now,
                        heartbeat_at=now,
                        expires_at=now + self._lease(heartbeat_s),
                    ),
                )
            )
            return TrialStart(trial_id, decision)

        # Not durable: a decision undone by a database crash is made again, and its worker's
        # result then fails loudly to record (the trial is gone); the lock is held shorter.
        return self._write(f"deciding a batch size for job {job.job_id!r}", begin, durable=False)

    def heartbeat(self, trial_id: int, heartbeat_s: float | None = None) -> None:
        """One try only: the next beat comes soon, and the lease spans several beats."""

        def beat() -> None:
            with self.single_statement() as conn:
                now = db_now(conn)
                conn.execute(
                    _HEARTBEAT,
                    dict(trial_key=trial_id, now=now, expires_at=now + self._lease(heartbeat_s)),
                )

        self._call(f"heartbeat of trial {trial_id}", beat, retry=RetryPolicy(attempts=1))

    def finish_trial(self, trial_id: int, outcome: RunOutcome, observed: bool) -> None:
        def record(conn: Connection) -> str | None:
            return conn.execute(
                _FINISH,
                dict(
                    trial_key=trial_id,
                    counts=observed,
                    new_status=status.finished_status(outcome.reached_target),
                    finished_at=db_now(conn),
                    **_measured(outcome),
                ),
            ).scalar()

        try:
            now = self._write(f"recording trial {trial_id}", record, single_statement=True)
        except StoreError as err:
            raise UnrecordedResultError(trial_id, outcome, str(err)) from err
        if now is None:
            raise UnrecordedResultError(trial_id, outcome, "the trial is no longer there")
        if now not in status.FINISHED_STATUSES:
            log.warning(
                "trial %d finished after it was %s: its result is kept for history "
                "but does not count",
                trial_id,
                now,
            )

    def invalidate_trial(self, trial_id: int, outcome: RunOutcome, reason: str) -> None:
        """The train function returned without keeping its contract: keep what was measured,
        mark the trial ``invalid`` (never counted). Raises UnrecordedResultError when it
        cannot be written."""

        def record(conn: Connection) -> str | None:
            return conn.execute(
                _INVALIDATE,
                dict(
                    trial_key=trial_id,
                    error=reason[-4000:],
                    finished_at=db_now(conn),
                    **_measured(outcome),
                ),
            ).scalar()

        try:
            self._write(f"recording invalid trial {trial_id}", record, single_statement=True)
        except StoreError as err:
            raise UnrecordedResultError(trial_id, outcome, str(err)) from err

    def record_job_phase(self, trial_id: int, job_phase: str) -> None:
        """Not durable (``connect.DURABLE``): a figure for people that the next try records
        again, whose commit need not wait for the disk (an fsync a run: bench/RESULTS.md,
        issue 47). PostgreSQL: one statement on its own, as before."""
        self._write(
            f"recording the job's phase after trial {trial_id}",
            lambda conn: conn.execute(
                update(trials).where(trials.c.id == trial_id).values(job_phase=job_phase)
            ),
            durable=False,
            single_statement=self._locks_rows,
        )

    def fail_trial(
        self,
        trial_id: int,
        error: str,
        measured: RunOutcome | None = None,
        *,
        skipped: bool = False,
    ) -> None:
        """Best effort: the train function's own exception is what the caller must see. A
        trial left ``running`` expires after the lease and never counts. ``measured``: the
        figures up to the exception, kept without a verdict (no target, no stop reason).
        ``skipped``: the exception skips the task (status ``skipped``, not ``error``)."""
        ending = _SKIP if skipped else _FAIL
        # Built per call, unlike the other statements: a raising train function is rare.
        statement = (
            ending
            if measured is None
            else ending.values({**_measured(measured), "reached_target": None, "stop_reason": None})
        )

        def record(conn: Connection) -> None:
            conn.execute(
                statement, dict(trial_key=trial_id, message=error[-4000:], now=db_now(conn))
            )

        try:
            self._write(f"recording the failure of trial {trial_id}", record, single_statement=True)
        except StoreError as err:
            log.warning("%s (the trial will expire after the lease)", err)

    def record_late(self, pending: PendingResult) -> LateRecord:
        """Record a result from the outbox (``core/domain/outbox.py``), marked with when it
        arrived, unless its trial has a result already or is gone. Raises StoreError when it
        cannot be written."""
        outcome, key = pending.outcome, pending.key

        def record(conn: Connection) -> LateRecord:
            trial = conn.execute(_CLAIMED, dict(trial_key=pending.trial_id)).mappings().first()
            if trial is None:
                return LateRecord(False, None)
            mismatch = claim_problem(pending, dict(trial))
            if mismatch is not None:
                return LateRecord(False, trial["status"], mismatch)
            params = dict(
                trial_key=pending.trial_id,
                job_key=pending.job_pk,
                ti_dag=key.dag_id,
                ti_task=key.task_id,
                ti_run=key.run_id,
                ti_map_index=key.map_index,
                ti_try=key.try_number,
                ti_attempt=pending.attempt,
                finished_at=pending.finished_at,
                late_at=db_now(conn),
                **_measured(outcome),
            )
            if pending.invalid_reason is not None:
                now = conn.execute(
                    _INVALIDATE_LATE, dict(params, error=pending.invalid_reason[-4000:])
                ).scalar()
            else:
                now = conn.execute(
                    _FINISH_LATE,
                    dict(
                        params,
                        counts=pending.observed,
                        new_status=status.finished_status(outcome.reached_target),
                    ),
                ).scalar()
            if now is not None:
                return LateRecord(True, now)
            return LateRecord(
                False,
                conn.execute(
                    select(trials.c.status).where(
                        trials.c.id == pending.trial_id, trials.c.job_pk == pending.job_pk
                    )
                ).scalar(),
            )

        return self._write(f"recording the late result of trial {pending.trial_id}", record)

    def awaits_late_results(self, job_id: str, key: RecurrenceKey) -> bool:
        """Whether a trial of this task instance's task (any run, any version of the job)
        still waits for its result: only then can an earlier run's outbox hold one, so a
        run need not look (an XCom looked up before any run pushed one is logged by Airflow
        as an error)."""

        def read() -> bool:
            with self.reading() as conn:
                return (
                    conn.execute(
                        _AWAITING,
                        dict(
                            job_id=job_id,
                            ti_dag=key.dag_id,
                            ti_task=key.task_id,
                            ti_map_index=key.map_index,
                        ),
                    ).first()
                    is not None
                )

        return self._call(f"looking for results job {job_id!r} awaits", read)

    def books_suspects(self, job: JobRef, device: DeviceInfo, most: int = 3) -> list[int]:
        """Ids of the trials that weigh most in the job's exploration budget on ``device``
        (``state.books_suspects``): where to look when its books cannot be right."""

        def read() -> list[int]:
            with self.reading() as conn:
                return books_suspects(conn, job.id, device, job.config.default_batch_size, most)

        return self._call(f"reading job {job.config.job_id!r}'s costliest trials", read)

    # --- carbon ------------------------------------------------------------------------------
    def trial_spans(self, trial_ids: Sequence[int]) -> dict[int, tuple[datetime, datetime]]:
        """When each finished trial ran (UTC), by id; unfinished ones are left out."""

        def read() -> list[Any]:
            with self.reading() as conn:
                return list(
                    conn.execute(
                        select(trials.c.id, trials.c.started_at, trials.c.finished_at).where(
                            trials.c.id.in_(list(trial_ids))
                        )
                    )
                )

        rows = self._call("reading trial spans", read) if trial_ids else []
        return {
            r.id: (as_utc(r.started_at), as_utc(r.finished_at))
            for r in rows
            if r.finished_at is not None
        }

    def record_carbon(self, job_pk: int, key: RecurrenceKey, figures: RunCarbon) -> None:
        """A run's carbon figures and its start plan (``tables.run_carbon``); recording a
        run's again replaces them."""
        where = dict(job_pk=job_pk, **recurrence_columns(key))

        def record(conn: Connection) -> None:
            conn.execute(
                delete(run_carbon).where(*(run_carbon.c[k] == v for k, v in where.items()))
            )
            conn.execute(insert(run_carbon).values(**where, **carbon_columns(figures)))

        self._write(f"recording the carbon figures of run {key.run_id!r}", record)

    # --- power profiles ----------------------------------------------------------------------
    def load_profile(self, job: JobRef, batch_size: int, device: DeviceInfo) -> PowerProfile:
        def read() -> list[Any]:
            with self.reading() as conn:
                return list(
                    conn.execute(
                        _PROFILE,
                        dict(
                            job_key=job.id,
                            batch_size=batch_size,
                            gpu_model=device.model,
                            gpu_count=device.count,
                        ),
                    )
                )

        rows = self._call(f"loading the power profile of batch size {batch_size}", read)
        measured = {
            r.power_limit_w: LimitMeasurement(r.power_limit_w, r.avg_power_w, r.steps_per_s)
            for r in rows
            if r.measured_steps is None
        }
        profile = PowerProfile(
            batch_size,
            device.model,
            device.count,
            device.power_limits_w,
            {w: m for w, m in measured.items() if w in device.power_limits_w},
        )
        profile.partial = next(
            (_slice_in_progress(r) for r in rows if r.measured_steps is not None), None
        )
        return profile

    def save_profile(self, job: JobRef, profile: PowerProfile) -> None:
        """Merge the profile's measurements into the stored ones: a limit measured again
        replaces its old figures, limits measured only by another worker stay.

        Best effort: a profile that cannot be saved is logged with its figures and measured
        again by a later run, and the trial's result is still recorded after it."""
        if not profile.measurements and profile.partial is None:
            return
        p = power_profiles.c
        this = and_(
            p.job_pk == job.id,
            p.batch_size == profile.batch_size,
            p.gpu_model == profile.gpu_model,
            p.gpu_count == profile.gpu_count,
        )
        key = dict(
            job_pk=job.id,
            batch_size=profile.batch_size,
            gpu_model=profile.gpu_model,
            gpu_count=profile.gpu_count,
        )

        def save(conn: Connection) -> None:
            self._lock_job(conn, job.id)
            # A profile keeps one slice in progress: this run's replaces any other.
            conn.execute(
                delete(power_profiles).where(
                    this,
                    or_(
                        p.power_limit_w.in_(list(profile.measurements)),
                        p.measured_steps.is_not(None),
                    ),
                )
            )
            rows = _measured_rows(key, profile)
            if profile.partial is not None and not _measured_already(conn, this, profile):
                rows.append(dict(key, **_partial_row(profile.partial)))
            if rows:
                conn.execute(insert(power_profiles), rows)

        try:
            self._write(f"saving the power profile of batch size {profile.batch_size}", save)
        except StoreError as err:
            log.warning(
                "%s; not saved: %s",
                err,
                sorted(
                    (m.power_limit_w, m.avg_power_w, m.steps_per_s)
                    for m in profile.measurements.values()
                ),
            )

    # --- power-limit leases (core/train/gpu_lease.py) ---------------------------------------
    def leases_on_host(self, host: str) -> list[Lease]:
        """Every lease taken on ``host``, by GPU index."""

        def read() -> list[Any]:
            with self.reading() as conn:
                return list(
                    conn.execute(
                        select(gpu_leases)
                        .where(gpu_leases.c.host == host)
                        .order_by(gpu_leases.c.gpu_index)
                    )
                )

        return [_lease(row) for row in self._call(f"reading the GPU leases of {host}", read)]

    def acquire_leases(self, requests: list[LeaseRequest]) -> list[int] | None:
        """Lease every GPU at once (their ids, in order); None when one is leased already."""
        now = _now()

        def take(conn: Connection) -> list[int]:
            return [
                _inserted_id(
                    conn.execute(insert(gpu_leases).values(**vars(request), acquired_at=now))
                )
                for request in requests
            ]

        try:
            return self._write("leasing GPUs' power limits", take)
        except StoreError as err:
            if isinstance(err.__cause__, IntegrityError):  # a lease of one of them exists
                return None
            raise

    def release_leases(self, lease_ids: list[int]) -> None:
        def release(conn: Connection) -> None:
            conn.execute(delete(gpu_leases).where(gpu_leases.c.id.in_(lease_ids)))

        self._write("releasing GPU leases", release)

    # --- internals ---------------------------------------------------------------------------
    def _check_schema(self) -> None:
        with self.reading() as conn:
            schema.check(conn, self.where)

    def _write(
        self,
        what: str,
        work: Callable[[Connection], T],
        durable: bool = True,
        single_statement: bool = False,
    ) -> T:
        def transaction() -> T:
            with self.single_statement() if single_statement else self.transaction(durable) as conn:
                return work(conn)

        return self._call(what, transaction)

    def _call(self, what: str, work: Callable[[], T], retry: RetryPolicy | None = None) -> T:
        return guarded(self.where, what, work, retry or self.retry, self._diagnose)

    def _lease(self, heartbeat_s: float | None) -> timedelta:
        return self.lease if heartbeat_s is None else timedelta(seconds=lease_for(heartbeat_s))

    def _lock_job(self, conn: Connection, job_pk: int) -> None:
        """PostgreSQL: lock the job's row. SQLite: the transaction holds the write lock."""
        if self._locks_rows:
            conn.execute(_LOCK_JOB, dict(job_key=job_pk))


def _measured(outcome: RunOutcome) -> dict[str, Any]:
    """A finished try's columns: its figures (``core/domain/figures.py``), as the outcome has
    them, a NaN or an infinity as NULL (``core/domain/finite.py``: PostgreSQL would keep it)."""
    return {name: finite_or_none(getattr(outcome, name)) for name in TRY_FIGURES}


def _slice_in_progress(row: Any) -> SliceInProgress:
    """A stored slice in progress (its row's averages are over the part measured)."""
    return SliceInProgress(
        row.power_limit_w, row.measured_steps, row.measured_s, row.avg_power_w * row.measured_s
    )


def _measured_rows(key: dict[str, Any], profile: PowerProfile) -> list[dict[str, Any]]:
    """The profile's measured limits as rows of ``zeus_power_profiles`` (``key``: the job,
    batch size and GPU setup they belong to)."""
    return [
        dict(
            key,
            power_limit_w=m.power_limit_w,
            avg_power_w=m.avg_power_w,
            steps_per_s=m.steps_per_s,
            measured_steps=None,
            measured_s=None,
        )
        for m in profile.measurements.values()
    ]


def _partial_row(partial: SliceInProgress) -> dict[str, Any]:
    """The columns of a slice in progress: averages over its measured part (W, steps/s)."""
    return dict(
        power_limit_w=partial.power_limit_w,
        avg_power_w=partial.energy_j / partial.time_s,
        steps_per_s=partial.steps / partial.time_s,
        measured_steps=partial.steps,
        measured_s=partial.time_s,
    )


def _measured_already(conn: Connection, this: ColumnElement[bool], profile: PowerProfile) -> bool:
    """Whether another worker completed the slice in progress's limit meanwhile."""
    assert profile.partial is not None
    p = power_profiles.c
    return (
        conn.execute(
            select(p.id).where(this, p.power_limit_w == profile.partial.power_limit_w)
        ).first()
        is not None
    )


def _lease(row: Any) -> Lease:
    acquired = row.acquired_at
    if acquired.tzinfo is None:  # SQLite keeps no zone; the store writes UTC
        acquired = acquired.replace(tzinfo=UTC)
    return Lease(
        row.id, row.host, row.gpu_uuid, row.gpu_index, row.original_limit_w, row.pid, acquired
    )


def _inserted_id(result: CursorResult[Any]) -> int:
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


_LAST_TASK = (
    select(trials.c.dag_id, trials.c.task_id)
    .where(trials.c.job_pk == bindparam("job_key"))
    .order_by(trials.c.id.desc())
    .limit(1)
)


def shared_by_another(conn: Connection, current: Any, config: JobConfig, task: str | None) -> str:
    """The end of the "configuration changed" warning when the version it replaces was last
    run by another task than ``task``: two tasks that share one ``job_id`` with different
    settings, each run of either starting a new version, so the job never learns (issue
    48). "" when the same task changed its own settings, or nothing tells."""
    last = conn.execute(_LAST_TASK, dict(job_key=current.id)).first()
    other = None if last is None else f"{last.dag_id}.{last.task_id}"
    if task is None or other is None or other == task:
        return ""
    old, new = json.loads(current.config_json), json.loads(config.to_json())
    differ = ", ".join(
        f"{k}: {old.get(k)!r} vs {new.get(k)!r}"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    )
    return (
        f". Tasks {other} and {task} share job_id {config.job_id!r} with different settings "
        f"({differ}): each run of either starts a new version, so the job never learns. Give "
        "each task its own job_id (the default, <dag_id>.<task_id>), or the same settings "
        '(docs/store.md, "Changing a job\'s configuration")'
    )


def guarded(
    where: str,
    what: str,
    work: Callable[[], T],
    policy: RetryPolicy,
    diagnose: Diagnose | None = None,
) -> T:
    """Run ``work`` with retries; a database error that remains becomes a StoreError that
    names the store (``where``, without password) and what was being done. One ``diagnose``
    finds permanent (a read-only or full disk) is not retried, and says how to fix it."""
    try:
        return with_retries(policy, what, work, diagnose)
    except DBAPIError as err:
        full = full_disk(err)
        if full is not None:
            raise _disk_full(where, what, full) from err
        fault = diagnose(err) if diagnose else None
        if fault is not None:
            raise StoreError(
                f"{what}: the zeus-airflow store at {where} cannot be written: {fault} "
                f"(not retried; SQLite said: {str(err.orig).strip()})"
            ) from err
        refused = refusal(err)
        if refused is not None:  # the server's reason first: it is what to fix
            reason, fix = refused
            raise StoreError(
                f"{reason}: {fix} ({what}: the zeus-airflow store at {where} "
                "refused the connection; not retried)"
            ) from err
        missing = schema.missing_table(err)
        if missing is not None:
            raise StoreError(f"{what}: {schema.incomplete(where, [missing])}") from err
        reason = str(err.orig).strip() if err.orig else str(err)
        if is_transient(err):
            raise StoreError(
                f"{what}: the zeus-airflow store at {where} is unreachable or busy "
                f"(gave up after {policy.attempts} tries): {reason}"
            ) from err
        raise StoreError(f"{what}: the zeus-airflow store at {where} failed: {reason}") from err
    except StoreError:
        raise
    except Exception as err:
        # A driver's own error that SQLAlchemy left unwrapped (2.0 does so for one raised
        # in a cursor hook): a full disk is named all the same.
        full = full_disk(err)
        if full is None:
            raise
        raise _disk_full(where, what, full) from err


def _disk_full(where: str, what: str, said: str) -> StoreError:
    return StoreError(
        f"{what}: the zeus-airflow store at {where} cannot be written: its disk is full: free "
        f"some space on the database's disk, or move the store (not retried; the database "
        f"said: {said})"
    )


def lock_job_versions(conn: Connection, job_id: str) -> None:
    """Serialise changes to a job id's versions (on SQLite the write lock already does).

    A new job has no row to lock yet, so PostgreSQL takes an advisory lock on the id."""
    if conn.dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:4], "big", signed=True)
        conn.execute(_REGISTRATION_LOCK, dict(namespace=_REGISTRATION_NAMESPACE, key=key))


def _now() -> datetime:
    """This worker's clock: for what only this host compares (a job's creation, a GPU
    lease's age against its holder's start). A trial's times are the database's."""
    return datetime.now(UTC)


def carbon_columns(f: RunCarbon) -> dict[str, Any]:
    """A run's carbon figures as ``tables.run_carbon`` names them (its declared figures), a
    text cut to its last 4,000 characters."""
    return {
        name: value[-4000:] if value and FIGURES[name].sql == "text" else finite_or_none(value)
        for name, value in f.figures().items()
    }


def recurrence_columns(key: RecurrenceKey) -> dict[str, Any]:
    """A recurrence's key as the tables name it (``tables.RUN_KEY``, but the job version)."""
    return dict(
        dag_id=key.dag_id,
        task_id=key.task_id,
        run_id=key.run_id,
        map_index=key.map_index,
        try_number=key.try_number,
    )


def _rng(seed: int, seq: int) -> Any:
    """The decision's random generator, from the job's seed and the decision's sequence
    number. numpy is imported here: reading the store (``zeus-airflow runs``, the UI) needs
    none of it (bench/RESULTS.md, "CLI latency")."""
    import numpy as np

    return np.random.default_rng([seed, seq])

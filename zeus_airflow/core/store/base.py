"""The store interface the engine keeps its state behind, and the records only it exchanges
(the shared ones live in ``core/domain``).

The SQL implementation lives in ``sql.py`` (SQLite or PostgreSQL); the engine, the GPU leases
and the reports only see this interface, so a test can hand them any store and the policy
never sees a database. The store is the only code that writes SQL: what people read (the
reports, the UI, the CLI) it hands out through :meth:`Store.reader`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple, Protocol

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.domain import (
    Decide,
    Decision,
    DeviceInfo,
    JobRef,
    PendingResult,
    PowerProfile,
    RecurrenceKey,
    RunOutcome,
)

if TYPE_CHECKING:
    from zeus_airflow.core.store.reads import Reader


class StoreError(RuntimeError):
    """The store cannot be used (unreachable, schema behind the code...)."""


class UnrecordedResultError(StoreError):
    """A finished trial's result could not be written. The message carries every measured
    figure, and ``outcome`` the result itself, so that the caller can log and publish it."""

    def __init__(self, trial_id: int, outcome: RunOutcome, reason: str) -> None:
        self.trial_id = trial_id
        self.outcome = outcome
        super().__init__(
            f"could not record trial {trial_id} in the zeus-airflow store: {reason}. The "
            f"measured result is NOT in the store: batch_size={outcome.batch_size} "
            f"power_limit_w={outcome.power_limit_w} energy_j={outcome.energy_j:.6g} "
            f"time_s={outcome.time_s:.6g} cost={outcome.cost:.6g} epochs={outcome.epochs} "
            f"reached_target={outcome.reached_target} stop_reason={outcome.stop_reason}"
        )


@dataclass(frozen=True)
class Lease:
    """A power-limit lease: GPU ``gpu_uuid`` on ``host`` had ``original_limit_w`` (W) when
    process ``pid`` took it (see ``core/train/gpu_lease.py``)."""

    id: int
    host: str
    gpu_uuid: str
    gpu_index: int
    original_limit_w: int
    pid: int
    acquired_at: datetime


@dataclass(frozen=True)
class LeaseRequest:
    """One GPU to lease: the row :meth:`SQLStore.acquire_leases` inserts."""

    host: str
    gpu_uuid: str
    gpu_index: int
    original_limit_w: int
    pid: int


class LateRecord(NamedTuple):
    """What recording a result from the outbox did."""

    recorded: bool
    """False: the trial had a result already (drained before), is gone, or is not the one
    the result claims (``refused``)."""
    status: str | None
    """The trial's status now; None: the trial is no longer in the store."""
    refused: str | None = None
    """Why the result is not its trial's (``domain.outbox.claim_problem``); None: it is."""


@dataclass(frozen=True)
class TrialStart:
    trial_id: int
    decision: Decision


class Store(Protocol):
    where: str
    """Where the store is, for messages (never with a password)."""

    def register_job(self, config: JobConfig, seed: int | None = None) -> JobRef:
        """The job's current version; a new version when the configuration changed."""
        ...

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
        """One unit of work: lock the job, read its state for ``device``, let ``decide``
        (the engine's) turn it into a decision, and register the trial as running, all in
        one transaction. The trial expires after a few missed heartbeats (``heartbeat_s``
        apart; None: a long flat lease). ``excluded``: sizes that failed in this recurrence;
        ``missed``: those of them that missed the target within max epochs.

        ``decide`` gets ``numpy.random.default_rng([job seed, decision number])``, so a seeded
        job decides the same way whichever worker decides. It may be called more than once:
        a transaction that fails transiently is retried whole, decision included (which is
        why the unit of work takes a function rather than being a ``with`` block)."""
        ...

    def heartbeat(self, trial_id: int, heartbeat_s: float | None = None) -> None:
        """The trial's worker is alive; the next beat is due within ``heartbeat_s``."""
        ...

    def finish_trial(self, trial_id: int, outcome: RunOutcome, observed: bool) -> None:
        """Record a finished trial. Idempotent: recording the same trial again replaces.
        Raises UnrecordedResultError, carrying the outcome, when it cannot."""
        ...

    def invalidate_trial(self, trial_id: int, outcome: RunOutcome, reason: str) -> None:
        """The train function returned without keeping its contract: keep the measurement,
        never count it. Raises UnrecordedResultError when it cannot."""
        ...

    def fail_trial(
        self,
        trial_id: int,
        error: str,
        measured: RunOutcome | None = None,
        *,
        skipped: bool = False,
    ) -> None:
        """The train function raised: keep the trial for history, with what it measured up
        to the exception (``measured``; energy spent is never lost), and never count it. Best
        effort: never raises, so that the train function's exception is the one seen.
        ``skipped``: the exception skips the task (``skipped``, not ``error``)."""
        ...

    def record_late(self, pending: PendingResult) -> LateRecord:
        """Record a result the store could not take when its try finished (the outbox), once:
        only while its trial has no result, and only if it is that trial's (same job
        version, task instance, attempt and batch size; else ``refused`` says how it
        differs). Raises StoreError when it cannot be written."""
        ...

    def awaits_late_results(self, job_id: str, key: RecurrenceKey) -> bool:
        """Whether a trial of ``key``'s task (any run and job version) still waits for a
        result: only then may an earlier run's outbox hold one."""
        ...

    def load_profile(self, job: JobRef, batch_size: int, device: DeviceInfo) -> PowerProfile:
        """The (possibly partial or empty) power profile for this batch size and GPU."""
        ...

    def save_profile(self, job: JobRef, profile: PowerProfile) -> None:
        """Best effort: never raises (an unsaved profile is measured again later), so that
        the trial's result is recorded after it."""
        ...

    # --- power-limit leases (core/train/gpu_lease.py) ---------------------------------------------
    def leases_on_host(self, host: str) -> list[Lease]:
        """Every lease taken on ``host``, by GPU index."""
        ...

    def acquire_leases(self, requests: list[LeaseRequest]) -> list[int] | None:
        """Lease every GPU at once (their ids, in order); None when one is leased already."""
        ...

    def release_leases(self, lease_ids: list[int]) -> None: ...

    # --- reads for people (core/reports, the UI, the CLI) -------------------------------------
    def reader(self) -> AbstractContextManager[Reader]:
        """The store's read-model on one read-only connection: every read a report makes.
        A database that fails while read raises StoreError."""
        ...

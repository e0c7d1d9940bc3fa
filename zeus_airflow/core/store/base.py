"""The store interface the engine keeps its state behind, and the records only it exchanges
(the shared ones live in ``core/domain``).

The SQL implementation lives in ``sql.py`` (SQLite or PostgreSQL); the engine, the GPU leases
and the reports only see this interface, so a test can hand them any store and the policy
never sees a database. The store is the only code that writes SQL: what people read (the
reports, the UI, the CLI) it hands out through :meth:`Store.reader`.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    RunCarbon,
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
    """One GPU to lease: the row :meth:`Store.acquire_leases` inserts."""

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
    """Everything the engine, the operator, the carbon code, the GPU leases and the reports
    may ask of the store: nothing else of it is theirs (``sql.py`` implements it; the
    contract tests in ``tests/core/store/test_store_contract.py`` hold every implementation to it).

    Every method that touches the database raises :class:`StoreError` when the database
    cannot be reached or written once retries are spent, unless its docstring says it never
    raises. Times are aware UTC datetimes, energies J, durations s, power limits W.
    """

    where: str
    """Where the store is, for messages (never with a password)."""

    # --- jobs and trials (core/train/engine.py) ----------------------------------------------
    def register_job(
        self, config: JobConfig, seed: int | None = None, task: str | None = None
    ) -> JobRef:
        """The job's current version; a new version when the configuration changed.

        Args:
            config: the job as the DAG declares it. The same settings return the current
                version; settings that change what a cost means (``config.fingerprint()``)
                start version + 1, and the old one stays for history but no longer counts;
                others (``max_tries``...) are taken into the current version.
            seed: seeds the job's decisions (a random one when None); used by a new version
                only.
            task: ``<dag_id>.<task_id>`` of the task registering it: a change of settings
                names it beside the task that ran the previous version, when another (two
                tasks sharing one ``job_id`` with different settings).

        Returns:
            The active version (``JobRef.version`` >= 1, ``JobRef.config`` is ``config``).

        Raises:
            StoreError: the database cannot be read or written.
        """
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
        one transaction. Trials of the job whose lease ran out expire first, and earlier
        trials of the same task instance (an earlier try or attempt) are superseded.

        ``decide`` gets ``numpy.random.default_rng([job seed, decision number])``, so a seeded
        job decides the same way whichever worker decides. It may be called more than once:
        a transaction that fails transiently is retried whole, decision included (which is
        why the unit of work takes a function rather than being a ``with`` block).

        Args:
            job: the job version (from :meth:`register_job`).
            key: the task instance and try the trial is for.
            attempt: the attempt within the Airflow try (1 first: a size that failed is
                retried at another within the same try).
            decide: turns the job's state and a random generator into a decision.
            device: the GPUs the trial trains on (its state is read for their model).
            excluded: batch sizes that failed in this recurrence.
            heartbeat_s: seconds between the worker's heartbeats; the trial expires after a
                few missed ones. None: a long flat lease (the simulator).
            missed: those of ``excluded`` that missed the target within max epochs.

        Returns:
            The new trial's id and the decision it runs.

        Raises:
            StoreError: ``job`` is not in the store, or the database cannot be written.
                Whatever ``decide`` raises propagates as it is, and no trial is registered.
        """
        ...

    def heartbeat(self, trial_id: int, heartbeat_s: float | None = None) -> None:
        """The trial's worker is alive: push the trial's expiry out. A trial no longer
        running (finished, expired, gone) is left as it is. Tried once: the next beat
        comes soon.

        Args:
            trial_id: the trial (``TrialStart.trial_id``).
            heartbeat_s: seconds until the next beat is due (None: the store's flat lease).

        Raises:
            StoreError: the database cannot be written.
        """
        ...

    def finish_trial(self, trial_id: int, outcome: RunOutcome, observed: bool) -> None:
        """Record a finished trial's result (``succeeded`` or ``failed``, by whether it
        reached the target). Idempotent: recording the same trial again replaces. A trial
        that may no longer take a result (``domain.trials.takes_result``: superseded, void,
        or an exploration step that expired) keeps its status, and its figures are kept for
        history without counting.

        Args:
            trial_id: the trial (``TrialStart.trial_id``).
            outcome: what the try measured (J, s, W).
            observed: whether the result counts for its batch size.

        Raises:
            UnrecordedResultError: the trial is no longer in the store, or the database cannot
                be written; it carries ``outcome``, so that the caller can keep it.
        """
        ...

    def invalidate_trial(self, trial_id: int, outcome: RunOutcome, reason: str) -> None:
        """The train function returned without keeping its contract: keep the measurement
        and mark the trial ``invalid``, never counted.

        Args:
            trial_id: the trial (``TrialStart.trial_id``).
            outcome: what the try measured (J, s, W).
            reason: why it is invalid (its last 4,000 characters are kept).

        Raises:
            UnrecordedResultError: the database cannot be written; it carries ``outcome``.
        """
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
        to the exception (energy spent is never lost), and never count it. Best effort: never
        raises, so that the train function's exception is the one seen (a trial left running
        expires after its lease).

        Args:
            trial_id: the trial (``TrialStart.trial_id``).
            error: the exception as text (its last 4,000 characters are kept).
            measured: the figures up to the exception, kept without a verdict (no target
                reached, no stop reason); None: nothing measured.
            skipped: the exception skips the task (status ``skipped``, not ``error``).
        """
        ...

    def record_job_phase(self, trial_id: int, job_phase: str) -> None:
        """Record where the job stood once the trial's result was recorded, as its policy
        reckons it: the one phase every surface shows (``tables.trials.job_phase``).

        Args:
            trial_id: the trial (``TrialStart.trial_id``).
            job_phase: ``pruning``, ``sampling`` or ``infeasible``.

        Raises:
            StoreError: the database cannot be written (an unknown trial writes nothing).
        """
        ...

    def record_late(self, pending: PendingResult) -> LateRecord:
        """Record a result the store could not take when its try finished (the outbox), once:
        only while its trial has no result, and only if it is that trial's (same job
        version, task instance, attempt and batch size), marked with when it arrived.

        Args:
            pending: the result and what identifies its trial.

        Returns:
            Whether it was recorded, the trial's status now (None: the trial is gone), and
            why it was refused when it is not the trial's.

        Raises:
            StoreError: the database cannot be read or written.
        """
        ...

    def awaits_late_results(self, job_id: str, key: RecurrenceKey) -> bool:
        """Whether a trial of ``key``'s task (any run and job version) still waits for a
        result: only then may an earlier run's outbox hold one.

        Args:
            job_id: the job (any of its versions).
            key: the task instance; its run and try number are not compared.

        Returns:
            True when a running or expired trial of that task has no result yet.

        Raises:
            StoreError: the database cannot be read.
        """
        ...

    # --- power profiles (core/train/profiler.py) ---------------------------------------------
    def load_profile(self, job: JobRef, batch_size: int, device: DeviceInfo) -> PowerProfile:
        """The power profile measured so far for this batch size and GPUs.

        Args:
            job: the job version.
            batch_size: the batch size profiled.
            device: the GPUs (a profile is kept per model and count); only measurements at
                its candidate limits are returned.

        Returns:
            A possibly partial or empty profile, with the slice in progress if one was saved.

        Raises:
            StoreError: the database cannot be read.
        """
        ...

    def save_profile(self, job: JobRef, profile: PowerProfile) -> None:
        """Merge the profile's measurements into the stored ones: a limit measured again
        replaces its figures, limits measured only by another worker stay, and the profile's
        slice in progress replaces any other. Best effort: never raises (an unsaved profile
        is logged and measured again later), so that the trial's result is recorded after it.

        Args:
            job: the job version.
            profile: the measurements (W, steps/s) and slice in progress to keep.
        """
        ...

    # --- carbon (core/carbon/service.py) -----------------------------------------------------
    def books_suspects(self, job: JobRef, device: DeviceInfo, most: int = 3) -> list[int]:
        """Ids of the trials that weigh most in the job's exploration budget on ``device``:
        its ``most`` costliest tries, and the default size's runs of the highest and lowest
        Default cost (where a forged or restored row that broke the books is).

        Raises:
            StoreError: the database cannot be read.
        """
        ...

    def trial_spans(self, trial_ids: Sequence[int]) -> dict[int, tuple[datetime, datetime]]:
        """When each finished trial ran, by the database's clock.

        Args:
            trial_ids: the trials (no database access when empty).

        Returns:
            ``{trial id: (started_at, finished_at)}`` in aware UTC, for the finished ones;
            unfinished and unknown trials are left out.

        Raises:
            StoreError: the database cannot be read.
        """
        ...

    def record_carbon(self, job_pk: int, key: RecurrenceKey, figures: RunCarbon) -> None:
        """Record a run's carbon figures and its start plan; recording the same run (job
        version and ``key``, try number included) again replaces them.

        Args:
            job_pk: the job version's row (``JobRef.id``).
            key: the task instance and try the run was.
            figures: gCO2e, energy cost, gCO2e/kWh and the start plan (s); a NaN or an
                infinity is kept as no figure, a text as its last 4,000 characters.

        Raises:
            StoreError: the database cannot be written (``job_pk`` unknown included).
        """
        ...

    # --- power-limit leases (core/train/gpu_lease.py) ----------------------------------------
    def leases_on_host(self, host: str) -> list[Lease]:
        """Every lease taken on ``host``.

        Args:
            host: the host's name, as the leases were taken.

        Returns:
            The leases, by GPU index.

        Raises:
            StoreError: the database cannot be read.
        """
        ...

    def acquire_leases(self, requests: list[LeaseRequest]) -> list[int] | None:
        """Lease every GPU at once, or none.

        Args:
            requests: one per GPU, with the limit (W) to restore and the holder's pid.

        Returns:
            The leases' ids, in the order of ``requests``; None when one of the GPUs is
            leased already (nothing is taken then).

        Raises:
            StoreError: the database cannot be written.
        """
        ...

    def release_leases(self, lease_ids: list[int]) -> None:
        """Give leases back; ids no longer leased are ignored.

        Args:
            lease_ids: from :meth:`acquire_leases` or :meth:`leases_on_host`.

        Raises:
            StoreError: the database cannot be written.
        """
        ...

    # --- reads for people (core/reports, the UI, the CLI) -------------------------------------
    def reader(self) -> AbstractContextManager[Reader]:
        """The store's read-model on one read-only connection: every read a report, the UI,
        the carbon planner or the operator's warnings make.

        Returns:
            A context manager that yields the :class:`~zeus_airflow.core.store.reads.Reader`;
            reads are not retried (the caller reads again later).

        Raises:
            StoreError: the database fails while it is open (down, unreachable), with the
                driver's first line and never the statement.
        """
        ...

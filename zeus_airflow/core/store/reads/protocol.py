"""The store's read side as a contract: every read a report, the UI, the CLI, the carbon
planner or the operator's warnings make, on one connection the store opened for reading.

:meth:`Store.reader <zeus_airflow.core.store.base.Store.reader>` hands out a ``Reader``; the
SQLAlchemy one (``SQLReader``, the parts in this package) implements it, and
``tests/core/store/test_reader_contract.py`` holds every implementation to it on SQLite and
PostgreSQL, as ``test_store_contract.py`` does for ``Store``. Reports compute on what it returns
and write no SQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from zeus_airflow.core.domain import (
    DeviceInfo,
    JobRef,
    JobState,
    RecurrenceKey,
    TrainingFigures,
    Version,
)
from zeus_airflow.core.store.reads.fleet import LatestTry, RunEnergy
from zeus_airflow.core.store.reads.history import JobPast
from zeus_airflow.core.store.reads.trials import Alike, PlaceSums, RunCount


@runtime_checkable
class Reader(Protocol):
    """Reads only, on one connection: a page's reads see one state of the store. Rows are
    the store's (``tables.py``), by name (``row._mapping``) where a method returns rows."""

    def alike_runs(self, pks: list[int]) -> list[Alike]:
        """Each version's runs alike (:class:`Alike`), a row per batch size, limit and
        GPU setup that ran to its end: the Default estimate and the runs' own spread, in
        one read however many versions (a row per limit trained at, not per run)."""
        ...

    def energy_by_run(self, default_energy_j: Mapping[int, float]) -> list[RunEnergy]:
        """Energy by DAG run, of the versions given (by key, with Default's energy per run,
        J), beside Default's for their finished runs: one row per DAG run, which the fleet
        chart places at its logical date."""
        ...

    def instance_job(
        self,
        dag_id: str,
        task_id: str,
        map_index: int | None = None,
        run_id: str | None = None,
    ) -> str | None:
        """The job a task instance fed: the one of its trials in ``run_id`` when it ran
        there, else the one of its latest trial (a job id can be renamed between runs,
        and each mapped instance has a job of its own). ``map_index`` None: any instance
        of the task."""
        ...

    def job_dags(self, job_id: str | None = None) -> dict[str, frozenset[str]]:
        """Every job id (or just ``job_id``) with the DAG ids its trials ran in, over
        all its versions ("" never counts)."""
        ...

    def job_instance_runs(self, job_id: str, dag_id: str, task_id: str, map_index: int) -> int:
        """How many DAG runs a task instance fed the job in."""
        ...

    def job_instances(self, job_id: str, dag_id: str, task_id: str) -> list[int]:
        """The map indexes of the task that fed the job, over all its versions, in the
        order they first did."""
        ...

    def job_past(self, job_id: str) -> JobPast | None:
        """The job's past; None when the store has no such job."""
        ...

    def job_state(self, version: Version | JobRef, device: DeviceInfo) -> JobState:
        """What a decision for this version on ``device`` would read (``read_state``)."""
        ...

    def last_limit(self, job_pk: int, batch_size: int | None) -> int | None:
        """The power limit the latest finished try of ``batch_size`` trained at."""
        ...

    def last_phase(self, job_pk: int) -> str | None:
        """The phase of the version's latest decision; None before any."""
        ...

    def latest_device(self, job_pk: int) -> DeviceInfo | None:
        """The GPU setup the version's latest try ran on (without candidate limits,
        which only the grid baseline needs); None before any try."""
        ...

    def latest_tries(self, pks: list[int]) -> dict[int, LatestTry]:
        """Each version's latest shown try. A job's trials are inserted in decision
        order (the decision and the insert share a transaction under the job's lock), so
        the latest has the highest id: a key lookup, where the highest decision_seq
        would be a scan."""
        ...

    def observe_sums(
        self, pks: list[int], since: datetime | None = None
    ) -> dict[int, TrainingFigures]:
        """Each version's tries that trained in observe mode (and made an estimate),
        their figures that add up summed (``core/domain/figures.py``); started at or
        after ``since``. Versions without such a try are left out."""
        ...

    def place_sums(self, pks: list[int], since: datetime | None = None) -> list[PlaceSums]:
        """Energy, time and cost of each version's shown tries (started at or after
        ``since``), per place they ran in."""
        ...

    def profile_points(self, job_pk: int, batch_size: int | None = None) -> list[tuple[Any, ...]]:
        """Measured profile points (``_POINT``'s columns), by batch size, GPU setup and
        limit (highest first); slices in progress are no points yet."""
        ...

    def profile_points_of(self, sizes: Mapping[int, int]) -> list[tuple[Any, ...]]:
        """The measured profile points of each version's batch size (version key ->
        size), their version key first, in one read."""
        ...

    def run_carbon(self, job_pk: int) -> dict[tuple[Any, ...], Any]:
        """The version's runs' carbon figures (``tables.run_carbon``), by the run's key
        (``dag_id``, ``task_id``, ``run_id``, ``map_index``, ``try_number``)."""
        ...

    def run_counts(self, pks: list[int], since: datetime | None = None) -> dict[int, RunCount]:
        """Each version's runs (started at or after ``since``), and how many finished."""
        ...

    def run_tries(self, job_pk: int, key: RecurrenceKey, columns: tuple[str, ...]) -> list[Any]:
        """One run's shown tries (the task instance's, of Airflow try
        ``key.try_number``) in decision order, with ``columns``."""
        ...

    def shown_tries(self, job_pk: int, columns: tuple[str, ...]) -> Iterable[Any]:
        """The version's shown tries in decision order, with ``columns`` (rows read by
        column name), as the database returns them: a long job has thousands."""
        ...

    def task_jobs(self, dag_id: str, task_id: str) -> dict[int, str]:
        """Each map index the task ran (-1 alone when it is not mapped), in order, with
        the job its latest trial fed."""
        ...

    def versions(self, job_ids: Iterable[str]) -> dict[str, list[Version]]:
        """Each job's versions, oldest first."""
        ...

    def with_emissions(self, pks: list[int]) -> list[int]:
        """The versions with a shown run that has carbon figures (``tables.run_carbon``;
        ``domain.ACCOUNTED``)."""
        ...

"""A job version's runs: its trials grouped by Airflow task instance (``domain.group_runs``).

A run's fields are the trial's (:class:`~zeus_airflow.core.domain.TrialRecord`), read by
name: its try figures come from its tries' by the declaration's rule (``domain.run_of``), its
carbon figures are its own (``tables.run_carbon``), the rest are its last try's. Rows are
grouped as the database returns them (a long job has thousands), not built into records
first.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from zeus_airflow.core.domain import (
    FIGURES,
    RUN_FIGURES,
    TRY_FIGURES,
    RecurrenceKey,
    group_runs,
    run_of,
)
from zeus_airflow.core.reports.records import RunRecord, Version
from zeus_airflow.core.store.clock import as_utc as utc
from zeus_airflow.core.store.reads import Reader

_OWN = ("index", "batch_sizes", "capped_sizes", "started_at", "finished_at", "recorded_late_at")
"""Fields a run computes itself (first start, last finish, ...); its figures come from its
tries' by the declaration's rule (``domain.run_of``), all other fields are its last try's."""
_LAST = tuple(f.name for f in fields(RunRecord) if f.name not in (*FIGURES, *_OWN))
_COLUMNS = tuple(
    dict.fromkeys(
        (
            "batch_size",
            "stop_reason",
            "started_at",
            "finished_at",
            "recorded_late_at",
            *_LAST,
            *TRY_FIGURES,
        )
    )
)
_KEY = ("dag_id", "task_id", "run_id", "map_index", "try_number")
"""A run's key in ``tables.run_carbon`` (of its job version)."""


def runs(reader: Reader, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    carbon = reader.run_carbon(job_pk)
    grouped = group_runs(reader.shown_tries(job_pk, _COLUMNS))
    return tuple(_run(i, tries, carbon) for i, tries in enumerate(grouped, start=1))


def run_of_task(
    reader: Reader, job_id: str, key: RecurrenceKey
) -> tuple[RunRecord, Version] | None:
    """The run ``key`` of the job's current version, with the version; None when the store
    has no try of it (``index`` is 0: not counted among the version's runs)."""
    versions = reader.versions([job_id]).get(job_id)
    if not versions:
        return None
    version = next((v for v in reversed(versions) if v.active), versions[-1])
    tries = reader.run_tries(version.pk, key, _COLUMNS)
    if not tries:
        return None
    return _run(0, tries, reader.run_carbon(version.pk)), version


def _run(index: int, tries: list[Any], carbon: dict[tuple[Any, ...], Any]) -> RunRecord:
    last = tries[-1]
    figures = carbon.get(tuple(getattr(last, k) for k in _KEY))
    finished = [t.finished_at for t in tries if t.finished_at is not None]
    late = [t.recorded_late_at for t in tries if t.recorded_late_at is not None]
    return RunRecord(
        index=index,
        batch_sizes=tuple(t.batch_size for t in tries),
        capped_sizes=tuple(t.batch_size for t in tries[:-1] if t.stop_reason == "budget_cap"),
        started_at=utc(tries[0].started_at),
        finished_at=utc(max(finished)) if finished else None,
        recorded_late_at=utc(max(late)) if late else None,
        **{name: getattr(last, name) for name in _LAST},
        **run_of(tries, TRY_FIGURES),
        **_carbon(figures),
    )


def _carbon(figures: Any) -> dict[str, Any]:
    """A run's carbon figures from its row of ``tables.run_carbon`` (None each without one)."""
    return {name: getattr(figures, name, None) for name in RUN_FIGURES}

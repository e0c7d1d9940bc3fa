"""A job version's runs: its trials grouped by Airflow task instance.

A run's fields are the trial's (:class:`~zeus_airflow.core.domain.TrialRecord`), read by
name: its figures come from its tries' by the declaration's rule (``domain.run_of``), the
rest are its last try's. Rows are grouped as the database returns them (a long job has
thousands), not built into records first.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from zeus_airflow.core.domain import FIGURES, run_of
from zeus_airflow.core.reports.records import RunRecord
from zeus_airflow.core.store.clock import as_utc as utc
from zeus_airflow.core.store.reads import Reader

_OWN = ("index", "batch_sizes", "started_at", "finished_at", "recorded_late_at")
"""Fields a run computes itself (first start, last finish, ...); its figures come from its
tries' by the declaration's rule (``domain.run_of``), all other fields are its last try's."""
_LAST = tuple(f.name for f in fields(RunRecord) if f.name not in (*FIGURES, *_OWN))
_COLUMNS = tuple(
    dict.fromkeys(("batch_size", "started_at", "finished_at", "recorded_late_at", *_LAST, *FIGURES))
)


def runs(reader: Reader, job_pk: int) -> tuple[RunRecord, ...]:
    """The version's runs in decision order (of their first try)."""
    grouped: dict[tuple[str, str, str, int], list[Any]] = {}
    for t in reader.shown_tries(job_pk, _COLUMNS):
        tries = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if tries and tries[-1].try_number < t.try_number:
            tries.clear()  # an Airflow retry after an error: the earlier try is history
        tries.append(t)
    return tuple(_run(i, tries) for i, tries in enumerate(grouped.values(), start=1))


def _run(index: int, tries: list[Any]) -> RunRecord:
    last = tries[-1]
    finished = [t.finished_at for t in tries if t.finished_at is not None]
    late = [t.recorded_late_at for t in tries if t.recorded_late_at is not None]
    return RunRecord(
        index=index,
        batch_sizes=tuple(t.batch_size for t in tries),
        started_at=utc(tries[0].started_at),
        finished_at=utc(max(finished)) if finished else None,
        recorded_late_at=utc(max(late)) if late else None,
        **{name: getattr(last, name) for name in _LAST},
        **run_of(tries),
    )

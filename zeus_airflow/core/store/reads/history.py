"""A job's past as the run time reads it, outside a decision: what planning a start needs
(the job's state as its next decision would read it, and its finished runs). The store
reads; planning (``core/carbon/expected.py``) and the operator decide.

A run is the tries of one Airflow task instance (:func:`group_runs`, which the reports' runs
table shares): an Airflow retry (a higher try number) starts the run over, the earlier tries
become history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain import DeviceInfo, JobState
from zeus_airflow.core.domain.trials import FINISHED_STATUSES
from zeus_airflow.core.store.reads.jobs import JobReads
from zeus_airflow.core.store.reads.trials import TrialReads

_NO_DEVICE = DeviceInfo("", 1, "measured", ())
"""The GPU setup of a version that has not run yet (the candidate limits matter to the grid
baseline only: none are read)."""
_TRY_COLUMNS = (
    "dag_id",
    "task_id",
    "run_id",
    "map_index",
    "try_number",
    "batch_size",
    "status",
    "measurement",
    "energy_j",
    "time_s",
    "setup_energy_j",
    "setup_time_s",
)


def group_runs(tries: Iterable[Any]) -> list[list[Any]]:
    """Tries in decision order (with their key and ``try_number``) grouped into runs, in the
    order of their first try."""
    grouped: dict[tuple[str, str, str, int], list[Any]] = {}
    for t in tries:
        run = grouped.setdefault((t.dag_id, t.task_id, t.run_id, t.map_index), [])
        if run and run[-1].try_number < t.try_number:
            run.clear()  # an Airflow retry after an error: the earlier try is history
        run.append(t)
    return list(grouped.values())


@dataclass(frozen=True)
class PastRun:
    """A finished run (its last try succeeded or failed), its figures summed over its
    finished tries: seconds and joules, of training and of setup before it."""

    batch_size: int
    """Its first try's."""
    time_s: float
    energy_j: float
    setup_time_s: float | None
    setup_energy_j: float | None
    measurement: MeasurementKind
    """Its last try's."""

    def time_with_setup_s(self) -> float:
        """Training and setup time (s), setup 0 when not measured: how long a run takes."""
        return self.time_s + (self.setup_time_s or 0.0)

    def energy_with_setup_j(self) -> float:
        """Training and setup energy (J), setup 0 when not measured: what the grid supplied."""
        return self.energy_j + (self.setup_energy_j or 0.0)


@dataclass(frozen=True)
class JobPast:
    """The job's active version (else its newest) as planning reads it."""

    state: JobState
    """What a decision would read now, on the GPU setup of the job's latest try."""
    finished: tuple[PastRun, ...]
    """Its finished runs, in decision order (of their first try)."""


class HistoryReads(JobReads, TrialReads):
    def job_past(self, job_id: str) -> JobPast | None:
        """The job's past; None when the store has no such job."""
        history = self.versions([job_id]).get(job_id)
        if not history:
            return None
        version = max(history, key=lambda v: (v.active, v.version))
        state = self.job_state(version, self.latest_device(version.pk) or _NO_DEVICE)
        runs = [_finished(run) for run in group_runs(self.shown_tries(version.pk, _TRY_COLUMNS))]
        return JobPast(state, tuple(r for r in runs if r is not None))


def _finished(tries: list[Any]) -> PastRun | None:
    done = [t for t in tries if t.energy_j is not None]
    time_s = _sum([t.time_s for t in done])
    if not done or time_s is None or tries[-1].status not in FINISHED_STATUSES:
        return None
    return PastRun(
        tries[0].batch_size,
        time_s,
        sum(t.energy_j for t in done),
        _sum([t.setup_time_s for t in done]),
        _sum([t.setup_energy_j for t in done]),
        tries[-1].measurement,
    )


def _sum(values: list[Any]) -> Any:
    """The sum; None when a figure is missing."""
    return None if None in values else sum(values)

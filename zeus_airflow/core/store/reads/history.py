"""A job's past as the run time reads it, outside a decision: what planning a start needs
(the job's state as its next decision would read it, and its finished runs). The store
reads; planning (``core/carbon/expected.py``) and the operator decide.

What a run is, and which runs planning learns from, is the domain's
(``domain.group_runs``, ``domain.finished_run``, shared with the reports' runs table).
"""

from __future__ import annotations

from dataclasses import dataclass

from zeus_airflow.core.domain import DeviceInfo, JobState, PastRun, finished_run, group_runs
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
        tries = self.shown_tries(version.pk, _TRY_COLUMNS)
        runs = [finished_run(run) for run in group_runs(tries)]
        return JobPast(state, tuple(r for r in runs if r is not None))

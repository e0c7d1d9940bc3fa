"""What the store says about a job, for people: runs, arms, power profiles, and the energy
saved against the Default configuration. Reads only, through the store's read-model
(``Store.reader()``: it lists jobs, their versions and the DAGs they ran in); no SQL
here. Airflow-free (the UI adds Airflow's dates, links and access rules on top).

A *run* is one recurrence: the tries (``attempt`` 1, 2, ...) of one Airflow task instance
``(dag_id, task_id, run_id, map_index)`` in one job version, from its latest Airflow try.
Tries a later Airflow try of the same task instance replaced are history, never shown.
"""

from zeus_airflow.core.reports.arms import arms, profile_points
from zeus_airflow.core.reports.default import default_emissions_g, default_estimate
from zeus_airflow.core.reports.jobs import current, detail, summaries
from zeus_airflow.core.reports.records import (
    Arm,
    DefaultEstimate,
    JobDetail,
    JobSummary,
    ProfilePoint,
    RunRecord,
    Version,
)
from zeus_airflow.core.reports.report import (
    SAVINGS,
    FleetTotals,
    JobReport,
    Saving,
    emitted,
    fleet_totals,
    report,
)
from zeus_airflow.core.reports.runs import run_of_task, runs

__all__ = [
    "SAVINGS",
    "Arm",
    "DefaultEstimate",
    "FleetTotals",
    "JobDetail",
    "JobReport",
    "JobSummary",
    "ProfilePoint",
    "RunRecord",
    "Saving",
    "Version",
    "arms",
    "current",
    "default_emissions_g",
    "default_estimate",
    "detail",
    "emitted",
    "fleet_totals",
    "profile_points",
    "report",
    "run_of_task",
    "runs",
    "summaries",
]

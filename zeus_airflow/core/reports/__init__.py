"""What the store says about a job, for people: runs, arms, power profiles, and the energy
saved against the Default configuration. Reads only; Airflow-free (the UI adds Airflow's
dates, links and access rules on top).

A *run* is one recurrence: the tries (``attempt`` 1, 2, ...) of one Airflow task instance
``(dag_id, task_id, run_id, map_index)`` in one job version, from its latest Airflow try.
Tries a later Airflow try of the same task instance replaced are history, never shown.
"""

from zeus_airflow.core.reports.arms import arms, profile_points
from zeus_airflow.core.reports.default import default_emissions_g, default_estimate
from zeus_airflow.core.reports.jobs import (
    current,
    detail,
    instance_job,
    job_dags,
    summaries,
    task_jobs,
    versions,
)
from zeus_airflow.core.reports.records import (
    Arm,
    DefaultEstimate,
    JobDetail,
    JobSummary,
    ProfilePoint,
    RunRecord,
    Version,
)
from zeus_airflow.core.reports.report import FleetTotals, JobReport, fleet_totals, report
from zeus_airflow.core.reports.runs import SHOWN_STATUSES, runs

__all__ = [
    "SHOWN_STATUSES",
    "Arm",
    "DefaultEstimate",
    "FleetTotals",
    "JobDetail",
    "JobReport",
    "JobSummary",
    "ProfilePoint",
    "RunRecord",
    "Version",
    "arms",
    "current",
    "default_emissions_g",
    "default_estimate",
    "detail",
    "fleet_totals",
    "instance_job",
    "job_dags",
    "profile_points",
    "report",
    "runs",
    "summaries",
    "task_jobs",
    "versions",
]

"""The JSON API's response models (documented at ``/zeus/docs``).

Runs, arms, power-profile points and the Default estimate go out as the reports' own records
(their attribute docstrings document them); what only the API adds lives here: the job
summary, flattened with links and kWh, and a run's Airflow context.

Units are in the field names: energy in J (and kWh), time in s, power in W, cost in the
paper's J-equivalents (``eta * energy_j + (1 - eta) * max_power_w * time_s``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from zeus_airflow.core import reports
from zeus_airflow.core.common.units import kwh
from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.plugins.queries import RunPage
from zeus_airflow.plugins.urls import Urls


class Task(BaseModel):
    dag_id: str = Field(description='"" for runs outside Airflow (CLI, simulator)')
    task_id: str


class JobOut(BaseModel):
    """A job version at a glance."""

    job_id: str
    version: int
    versions: list[int] = Field(description="every version of the job, oldest first")
    active: bool = Field(description="whether decisions use this version now")
    url: str = Field(description="the job's page")
    tasks: list[Task] = Field(description="the Airflow tasks that ran the job")
    runs: int = Field(description="runs (recurrences) so far")
    finished_runs: int
    phase: str = Field(
        description="pruning or sampling (infeasible: no batch size left in "
        "play; runs fall back to the best known size), as the policy recorded it after the "
        "latest try: the fleet page, the report and the job_phase XCom show the same"
    )
    best_batch_size: int | None = Field(
        description="lowest mean observed cost among the batch sizes still in play"
    )
    best_power_limit_w: int | None = Field(
        description="limit of the latest finished run of the best batch size"
    )
    energy_j: float = Field(description="energy of every try of every run")
    energy_kwh: float
    time_s: float
    measurements: list[MeasurementKind] = Field(
        description="where the figures come from: measured (a real GPU), replayed (paper "
        "traces) or simulated (a power model)"
    )
    batch_sizes: list[int]
    default_batch_size: int
    eta: float
    default_estimate: reports.DefaultEstimate | None = Field(
        description="one run of Default (b0 at the maximum limit); None until b0 has reached "
        "the target once"
    )
    default_energy_j: float | None = Field(
        description="the finished runs' energy, had they all run the Default way"
    )
    energy_saved_j: float | None = Field(description="default_energy_j - energy_j")
    energy_saved_kwh: float | None
    would_save_energy_j: float | None = Field(
        description="observe mode: energy training at the optimum would have saved, over the "
        "tries that reported it (negative: it would have cost more); None outside "
        "observe mode"
    )
    would_save_time_s: float | None = Field(description="observe mode: the same for time")


class JobList(BaseModel):
    jobs: list[JobOut]


class ReportOut(BaseModel):
    """``zeus-airflow report`` as JSON: each job the user may read against Default, and
    their totals."""

    since: datetime | None = Field(description="only the tries started at or after it")
    jobs: list[reports.JobReport]
    fleet: reports.FleetTotals = Field(description="the totals of the jobs listed")


class JobDetailOut(BaseModel):
    job: JobOut
    arms: list[reports.Arm]
    power_profile: list[reports.ProfilePoint]
    runs: list[reports.RunRecord] = Field(
        description="every run, oldest first (the charts' data; the runs endpoint adds "
        "Airflow's context)"
    )


class RunOut(BaseModel):
    """One run with its Airflow context."""

    run: reports.RunRecord
    logical_date: datetime | None = Field(
        description="the DAG run's logical date (its run-after date when it has none)"
    )
    dag_run_url: str | None = Field(description="the DAG run in Airflow's UI")
    energy_kwh: float | None


class RunPageOut(BaseModel):
    job_id: str
    version: int
    total: int
    page: int
    per_page: int
    pages: int
    runs: list[RunOut] = Field(description="newest first")


def job_out(s: reports.JobSummary, urls: Urls) -> JobOut:
    config, observed = s.version.config, s.observed
    return JobOut(
        job_id=s.job_id,
        version=s.version.version,
        versions=list(s.versions),
        active=s.version.active,
        url=urls.job(s.job_id),
        tasks=[Task(dag_id=dag, task_id=task) for dag, task in s.tasks],
        runs=s.runs,
        finished_runs=s.finished_runs,
        phase=s.phase,
        best_batch_size=s.best_batch_size,
        best_power_limit_w=s.best_power_limit_w,
        energy_j=s.energy_j,
        energy_kwh=kwh(s.energy_j) or 0.0,
        time_s=s.time_s,
        measurements=list(s.measurements),
        batch_sizes=list(config.batch_sizes),
        default_batch_size=config.default_batch_size,
        eta=config.eta,
        default_estimate=s.default,
        default_energy_j=s.default_energy_j,
        energy_saved_j=s.energy_saved_j,
        energy_saved_kwh=kwh(s.energy_saved_j),
        would_save_energy_j=None if observed is None else observed.would_save_energy_j,
        would_save_time_s=None if observed is None else observed.would_save_time_s,
    )


def job_detail_out(detail: reports.JobDetail, urls: Urls) -> JobDetailOut:
    return JobDetailOut(
        job=job_out(detail.summary, urls),
        arms=list(detail.arms),
        power_profile=list(detail.profile),
        runs=list(detail.runs),
    )


def run_page_out(summary: reports.JobSummary, page: RunPage, urls: Urls) -> RunPageOut:
    return RunPageOut(
        job_id=summary.job_id,
        version=summary.version.version,
        total=page.total,
        page=page.page,
        per_page=page.per_page,
        pages=page.pages,
        runs=[
            RunOut(
                run=row.run,
                logical_date=row.logical_date,
                dag_run_url=urls.dag_run(row.run.dag_id, row.run.run_id)
                if row.run.dag_id
                else None,
                energy_kwh=kwh(row.run.energy_j),
            )
            for row in page.rows
        ],
    )

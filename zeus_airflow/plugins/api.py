"""The JSON API: each page's data, behind the same login (documented at ``/zeus/docs``)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Query, Request

from zeus_airflow.core import reports
from zeus_airflow.plugins import queries
from zeus_airflow.plugins.auth import API_PREFIX, DagAccessDep
from zeus_airflow.plugins.schemas import (
    JobDetailOut,
    JobList,
    ReportOut,
    RunPageOut,
    job_detail_out,
    job_out,
    run_page_out,
)
from zeus_airflow.plugins.urls import Urls

ERRORS: dict[int | str, dict[str, str]] = {
    401: {"description": "not logged in (a Bearer token or Airflow's _token cookie is needed)"},
    403: {"description": "the login is invalid, or the user may not read the DAG"},
    404: {"description": "no such job, or none the user may read"},
    503: {"description": "the zeus-airflow store cannot be read"},
}
VERSION = Query(None, description="the job version; default: the current one")
SINCE = Query(
    None, description="only the tries started at or after it (ISO 8601; UTC unless it says)"
)

router = APIRouter(prefix=API_PREFIX.rstrip("/"), tags=["Zeus energy"], responses=ERRORS)


@router.get("/jobs", summary="Jobs the user may read")
def list_jobs(
    request: Request,
    access: DagAccessDep,
    dag_id: str | None = Query(None, description="only the jobs of this DAG"),
) -> JobList:
    """The current version of every job of a DAG the user may read, as on the jobs page."""
    urls = Urls.of(request)
    return JobList(jobs=[job_out(s, urls) for s in queries.job_summaries(access, dag_id)])


@router.get("/report", summary="What each job and the fleet saved against Default")
def report(
    access: DagAccessDep,
    dag_id: str | None = Query(None, description="only the jobs of this DAG"),
    since: datetime | None = SINCE,
) -> ReportOut:
    """``zeus-airflow report --format json`` for the jobs the user may read: energy, time,
    cost and emissions against Default's estimate, the phase and the next run, and the
    totals of the jobs listed."""
    found = queries.job_reports(access, dag_id, since)
    return ReportOut(since=since, jobs=found, fleet=reports.fleet_totals(found))


@router.get("/jobs/{job_id:path}/runs", summary="A job's runs, a page at a time")
def job_runs(
    request: Request,
    access: DagAccessDep,
    job_id: str,
    version: int | None = VERSION,
    page: int = Query(1, ge=1, description="1-based; page 1 holds the newest runs"),
    per_page: int = Query(queries.DEFAULT_PER_PAGE, ge=1, le=queries.MAX_PER_PAGE),
) -> RunPageOut:
    """The runs table of the job page, newest first, with logical dates and DAG run links."""
    summary, runs = queries.job_runs(access, job_id, version)
    return run_page_out(summary, queries.run_page(runs, page, per_page), Urls.of(request))


@router.get("/jobs/{job_id:path}", summary="One job: summary, arms, power profile, runs")
def job(
    request: Request, access: DagAccessDep, job_id: str, version: int | None = VERSION
) -> JobDetailOut:
    """What the job page's cards and charts show: the summary with the Default estimate, the
    arms' posteriors, the power profile and every run's chart figures."""
    return job_detail_out(queries.job_detail(access, job_id, version), Urls.of(request))

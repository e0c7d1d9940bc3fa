"""The HTML pages: the jobs, one job, and the ways in from Airflow's DAG and task pages."""

from __future__ import annotations

from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from zeus_airflow.plugins import queries, render
from zeus_airflow.plugins.access import DagAccess
from zeus_airflow.plugins.auth import DagAccessDep
from zeus_airflow.plugins.fleet_page import View, fleet_page, pages
from zeus_airflow.plugins.job_charts import job_charts
from zeus_airflow.plugins.urls import Urls

router = APIRouter(include_in_schema=False)
_READ_DAG = [Depends(requires_access_dag("GET"))]
"""Airflow's own check that the user may read the DAG named in the path (403 otherwise)."""


@router.get("/", response_class=HTMLResponse)
@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    access: DagAccessDep,
    dag: str = "",
    phase: str = "",
    fallback: bool = False,
    sort: str = "",
    desc: bool = False,
    page: int = Query(1, ge=1),
) -> HTMLResponse:
    """The fleet: every job the user may read, filtered by DAG, phase and falling back."""
    return _jobs(request, access, View(dag, phase, fallback, sort, desc, page), None)


@router.get("/dags/{dag_id}", dependencies=_READ_DAG, response_model=None)
def dag_page(
    request: Request, access: DagAccessDep, dag_id: str
) -> HTMLResponse | RedirectResponse:
    """The DAG's "Zeus energy" tab: its job's page, or the list when it has several."""
    summaries = queries.job_summaries(access, dag_id)
    if len(summaries) == 1:
        return RedirectResponse(Urls.of(request).job(summaries[0].job_id))
    return _jobs(request, access, _view(request), dag_id)


@router.get("/dags/{dag_id}/tasks/{task_id}", dependencies=_READ_DAG, response_model=None)
def task_page(
    request: Request,
    access: DagAccessDep,
    dag_id: str,
    task_id: str,
    run_id: str | None = None,
    map_index: str | None = None,
) -> HTMLResponse | RedirectResponse:
    """The task (instance)'s "Zeus energy" tab. A task instance's: the job that instance fed,
    at its run. A task's: its job's page, or the list of its jobs when it is mapped (each
    instance feeds a job of its own by default)."""
    index = _map_index(map_index)
    if run_id is None and index is None:
        summaries = queries.task_jobs(access, dag_id, task_id)
        if len(summaries) > 1:
            return _jobs(
                request, access, _view(request), dag_id, task_id, [s.job_id for s in summaries]
            )
        return RedirectResponse(Urls.of(request).job(summaries[0].job_id))
    job_id = queries.instance_job(access, dag_id, task_id, index, run_id)
    return RedirectResponse(Urls.of(request).job(job_id, run_id=run_id, map_index=index))


def _map_index(text: str | None) -> int | None:
    """The ``map_index`` query parameter: Airflow leaves ``{MAP_INDEX}`` unfilled on the page
    of an instance that is not mapped, so anything but a number means "not given"."""
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


@router.get("/jobs/{job_id:path}", response_class=HTMLResponse)
def job_page(
    request: Request,
    access: DagAccessDep,
    job_id: str,
    version: int | None = None,
    page: int = Query(1, ge=1),
    per_page: int = Query(queries.DEFAULT_PER_PAGE, ge=1, le=queries.MAX_PER_PAGE),
    run_id: str | None = None,
    map_index: int | None = None,
) -> HTMLResponse:
    detail = queries.job_detail(access, job_id, version)
    return render.page(
        request,
        "job.html",
        detail=detail,
        charts=job_charts(detail),
        page=queries.run_page(detail.runs, page, per_page, run_id, map_index),
        highlight=run_id,
        highlight_map_index=map_index,
        is_run=queries.is_run,
        version_param=version,
    )


def _view(request: Request) -> View:
    """The fleet view a DAG's or task's tab was asked for (its links carry the same query)."""
    q = request.query_params
    page = q.get("page", "1")
    return View(
        q.get("dag", ""),
        q.get("phase", ""),
        q.get("fallback", "") in ("1", "true"),
        q.get("sort", ""),
        q.get("desc", "") in ("1", "true"),
        int(page) if page.isdigit() and int(page) > 0 else 1,
    )


def _jobs(
    request: Request,
    access: DagAccess,
    view: View,
    dag_id: str | None,
    task_id: str | None = None,
    ids: list[str] | None = None,
) -> HTMLResponse:
    found, every = queries.fleet(access, dag_id, view.keeps, ids)
    page = fleet_page(found, every, view)
    measurements = sorted({m for j in every for m in j.totals.measurements})
    return render.page(
        request,
        "jobs.html",
        fleet=page,
        dag_id=dag_id,
        task_id=task_id,
        all_measurements=measurements,
        any_jobs=bool(every),
        pages=pages(page.rows),
    )

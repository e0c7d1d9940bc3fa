"""Names the Airflow layer gives out: a job's default id and its page in the Zeus UI.

On the ground floor, Airflow-free: the operator, the UI and the CLI (``zeus-airflow demo``)
give out the same names without the CLI importing the Airflow layer.
"""

from __future__ import annotations

from urllib.parse import quote

UI_PREFIX = "/zeus"
"""Where the Zeus UI plugin is mounted in Airflow's api-server."""

UNMAPPED = -1
"""Airflow's map index of a task instance that is not mapped."""


def default_job_id(dag_id: str, task_id: str, map_label: str | None = None) -> str:
    """A job is its DAG's task unless the author names it; each mapped instance of the task
    is a job of its own (``<dag_id>.<task_id>[<label>]``), because instances usually train on
    different data (regions, customers) and one bandit fed by all of them learns nothing
    true of any."""
    job_id = f"{dag_id}.{task_id}"
    return job_id if map_label is None else f"{job_id}[{map_label}]"


def map_label(map_index: int | None, rendered_map_index: str | None = None) -> str | None:
    """The label a task instance's default job id carries: None when the task is not mapped,
    else the rendered ``map_index_template`` (what Airflow's UI shows for the instance), else
    the map index. An empty rendering falls back to the index, as Airflow's UI does."""
    if map_index is None or map_index < 0:
        return None
    label = (rendered_map_index or "").strip()  # a template's trailing newline is no name
    return label or str(map_index)


def job_url(job_id: str) -> str:
    """Path of a job's page in the Zeus UI."""
    return f"{UI_PREFIX}/jobs/{quote(job_id, safe='')}"

"""Names the Airflow layer gives out: a job's default id and its page in the Zeus UI.

Airflow-free, so that the CLI and the UI can use them without importing Airflow.
"""

from __future__ import annotations

from urllib.parse import quote

UI_PREFIX = "/zeus"
"""Where the Zeus UI plugin is mounted in Airflow's api-server."""


def default_job_id(dag_id: str, task_id: str) -> str:
    """A job is its DAG's task unless the author names it."""
    return f"{dag_id}.{task_id}"


def job_url(job_id: str) -> str:
    """Path of a job's page in the Zeus UI."""
    return f"{UI_PREFIX}/jobs/{quote(job_id, safe='')}"

"""The task instance's "Zeus job" button: the job's page in the Zeus UI, mounted at ``/zeus``.

Airflow 3 calls ``get_link`` in the task process when the task finishes and stores the URL as
an XCom; the UI only reads it, so the link needs no plugin registration to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

UI_PREFIX = "/zeus"


def job_url(job_id: str) -> str:
    """Path of a job's page in the Zeus UI."""
    return f"{UI_PREFIX}/jobs/{quote(job_id, safe='')}"


def default_job_id(dag_id: str, task_id: str) -> str:
    """A job is its DAG's task unless the author names it."""
    return f"{dag_id}.{task_id}"


class ZeusJobLink(BaseOperatorLink):
    """Opens the page of the operator's job."""

    name = "Zeus job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        job_id = getattr(operator, "job_id", None) or default_job_id(ti_key.dag_id,
                                                                     ti_key.task_id)
        return job_url(job_id)

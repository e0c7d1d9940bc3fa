"""The task instance's "Zeus job" button: the job's page in the Zeus UI, mounted at ``/zeus``.

Airflow 3 calls ``get_link`` in the task process when the task finishes and stores the URL as
an XCom; the UI only reads it, so the link needs no plugin registration to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

from zeus_airflow.core.common.naming import UI_PREFIX, default_job_id, job_url

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

__all__ = ["UI_PREFIX", "ZeusJobLink", "default_job_id", "job_url"]


class ZeusJobLink(BaseOperatorLink):
    """Opens the page of the operator's job."""

    name = "Zeus job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        job_id = getattr(operator, "job_id", None) or default_job_id(ti_key.dag_id, ti_key.task_id)
        return job_url(job_id)

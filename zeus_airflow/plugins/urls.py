"""URLs the UI hands out: its own pages, and Airflow's pages of DAGs and DAG runs.

Paths are absolute but keep whatever prefix Airflow is served under, so they work inside the
iframe Airflow shows plugin pages in and when a page is opened on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode

from starlette.requests import HTTPConnection

from zeus_airflow.core.common.naming import UI_PREFIX, job_url


@dataclass(frozen=True)
class Urls:
    airflow_root: str
    """Where Airflow is served, "" at the host's root."""

    @classmethod
    def of(cls, request: HTTPConnection) -> Urls:
        """For a request to the Zeus app, which Airflow mounts at ``UI_PREFIX``."""
        return cls(str(request.scope.get("root_path", "")).removesuffix(UI_PREFIX))

    def zeus(self, path: str = "", **query: object) -> str:
        return self._with_query(f"{self.airflow_root}{UI_PREFIX}{path}", query)

    def job(self, job_id: str, **query: object) -> str:
        return self._with_query(self.airflow_root + job_url(job_id), query)

    def dag(self, dag_id: str) -> str:
        return f"{self.airflow_root}/dags/{quote(dag_id, safe='')}"

    def dag_run(self, dag_id: str, run_id: str) -> str:
        return f"{self.dag(dag_id)}/runs/{quote(run_id, safe='')}"

    @staticmethod
    def _with_query(path: str, query: dict[str, object]) -> str:
        given = {k: v for k, v in query.items() if v is not None}
        return f"{path}?{urlencode(given)}" if given else path

"""Which jobs a user may see: those of the DAGs the auth manager lets them read.

A job belongs to the DAGs its trials ran in (``zeus_trials.dag_id``, over every version of the
job): a user sees it only when they may read *every* one of them, so a job shared by two DAGs
never shows one DAG's runs to a reader of the other only. A job without trials yet belongs to
the DAG its id names (``<dag_id>.<task_id>``, the operator's default job id). Jobs of no DAG
(runs from the CLI or the simulator) and jobs of DAGs since deleted are shown to users who may
read all DAGs only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zeus_airflow.core.common.naming import default_job_id


@dataclass(frozen=True)
class DagAccess:
    """What the auth manager lets one user read."""

    all_dags: bool
    """The user may read DAGs in general, and every DAG there is."""
    dag_ids: frozenset[str]
    """DAGs the user may read."""

    def may_read_dag(self, dag_id: str) -> bool:
        return self.all_dags or dag_id in self.dag_ids

    def may_see_job(self, job_id: str, dags: frozenset[str]) -> bool:
        """``dags``: the DAG ids the job's trials ran in."""
        if self.all_dags:
            return True
        if dags:
            return dags <= self.dag_ids
        return any(job_in_dag(job_id, dags, dag_id) for dag_id in self.dag_ids)

    def visible(self, job_dags: Mapping[str, frozenset[str]]) -> list[str]:
        """The job ids of ``job_dags`` (job id -> its DAGs) this user may see, sorted."""
        return sorted(j for j, dags in job_dags.items() if self.may_see_job(j, dags))


def job_in_dag(job_id: str, dags: frozenset[str], dag_id: str) -> bool:
    """Whether the job belongs to ``dag_id``: it ran there, or, never run, its id says so."""
    return dag_id in dags if dags else job_id.startswith(default_job_id(dag_id, ""))

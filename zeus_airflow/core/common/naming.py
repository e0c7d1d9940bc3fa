"""Names the Airflow layer gives out: a job's default id, its page in the Zeus UI and a run's
date.

On the ground floor, Airflow-free: the operator, the UI and the CLI (``zeus-airflow demo``)
give out the same names without the CLI importing the Airflow layer.
"""

from __future__ import annotations

from datetime import UTC, datetime
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


RUN_TYPES = ("scheduled__", "manual__", "backfill__", "asset_triggered__")
"""The prefixes of the run ids Airflow generates (what started the DAG run)."""
RUN_ID_DATE_MARK = " (id)"
"""After a run's date read from its run id rather than Airflow's database."""


def run_id_date(run_id: str) -> datetime | None:
    """The date in a run id Airflow generated (``manual__2025-01-02T00:00:00+00:00``, with
    ``_<random>`` after it when the run has no logical date), in UTC; None for other ids.

    Airflow 3 writes the run's *run-after* date there (``DagRun.generate_run_id``), which is
    its logical date only where the timetable makes them one (a cron trigger, ``dag.test``
    with both given); a data-interval timetable's run is named after its interval's end."""
    for prefix in RUN_TYPES:
        if run_id.startswith(prefix):
            stamp = run_id.removeprefix(prefix).split("_", 1)[0]
            try:
                moment = datetime.fromisoformat(stamp)
            except ValueError:
                return None
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return None


def run_date(run_id: str, logical_date: datetime | None) -> str | None:
    """How every surface (``zeus-airflow runs``, the job page) names a run's date, in UTC to
    the minute: its DAG run's logical date, as Airflow's UI shows it, when Airflow's database
    gave it; else the run id's date marked ``(id)`` (it may be the run-after date, not the
    logical date: :func:`run_id_date`); None when neither is known."""
    if logical_date is not None:
        moment = logical_date if logical_date.tzinfo else logical_date.replace(tzinfo=UTC)
        return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M}"
    in_id = run_id_date(run_id)
    return None if in_id is None else f"{in_id:%Y-%m-%d %H:%M}{RUN_ID_DATE_MARK}"

"""Reads of Airflow's own metadata database, never of the zeus-airflow store: through
Airflow's ORM models and session, in the process that runs Airflow (the api-server for the
UI, ``dag.test()``'s process for the demo). Outside the store and the migrations, the one
module that builds SQL statements: these tables are Airflow's, which only its models know.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, tuple_


def dag_count() -> int:
    """How many DAGs Airflow knows."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return int(session.scalar(select(func.count()).select_from(DagModel)) or 0)


def logical_dates(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], datetime]:
    """Each DAG run's logical date (its run-after date when it has none), by (dag_id,
    run_id); a deleted DAG run is left out."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    wanted = sorted(set(keys))
    if not wanted:
        return {}
    query = select(DagRun.dag_id, DagRun.run_id, DagRun.logical_date, DagRun.run_after).where(
        tuple_(DagRun.dag_id, DagRun.run_id).in_(wanted)
    )
    with create_session() as session:
        return {(d, r): logical or after for d, r, logical, after in session.execute(query)}


def latest_logical_date(dag_id: str) -> datetime | None:
    """The logical date of the DAG's latest run; None before any."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.scalar(select(func.max(DagRun.logical_date)).where(DagRun.dag_id == dag_id))


def xcoms(dag_id: str, run_id: str, task_id: str, keys: Iterable[str]) -> dict[str, Any]:
    """The task's XComs of ``keys`` in the DAG run, deserialised, by key."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.key.in_(list(keys)),
            )
        ).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def rendered_fields(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """The task's rendered template fields in the DAG run (its Rendered Templates tab)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from airflow.utils.session import create_session

    with create_session() as session:
        fields = session.scalar(
            select(Rendered.rendered_fields).where(
                Rendered.dag_id == dag_id, Rendered.run_id == run_id, Rendered.task_id == task_id
            )
        )
    return dict(fields or {})

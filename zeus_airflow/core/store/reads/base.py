"""What the read-model's parts share: one read-only connection, and which tries are shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Integer, Select, func, select

from zeus_airflow.core.domain import SHOWN_STATUSES
from zeus_airflow.core.store.state import known, plausible
from zeus_airflow.core.store.tables import trials

SHOWN = trials.c.status.in_(SHOWN_STATUSES)
RUN_KEY = (trials.c.dag_id, trials.c.task_id, trials.c.run_id, trials.c.map_index)
"""A run: the tries of one Airflow task instance."""


def shown(since: datetime | None = None) -> tuple[ColumnElement[bool], ...]:
    """The shown tries; with ``since``, those started at or after it."""
    return (SHOWN,) if since is None else (SHOWN, trials.c.started_at >= since)


def run_figures(
    pks: list[int], where: tuple[ColumnElement[bool], ...], keyed: bool = False
) -> Select[Any]:
    """One row per run: its job, first start, energy and whether it is finished (1, else 0);
    ``keyed``: its DAG run's ``dag_id`` and ``run_id`` too.
    A run is finished once one of its tries has figures and none is still training: the
    Default estimate counts one Default run per finished run. A run whose only try is in
    flight has no figures yet: it is a run, with no energy, not finished."""
    return (
        select(
            trials.c.job_pk,
            func.min(trials.c.started_at).label("started_at"),
            func.coalesce(func.sum(known("energy_j")), 0.0).label("energy"),
            func.coalesce(
                func.max(plausible("energy_j").cast(Integer))
                * func.min((trials.c.status != "running").cast(Integer)),
                0,
            ).label("done"),
            *((trials.c.dag_id, trials.c.run_id) if keyed else ()),
        )
        .where(trials.c.job_pk.in_(pks), *where)
        .group_by(trials.c.job_pk, *RUN_KEY)
    )


class Reads:
    """A part of the store's read-model: reads on one connection the store opened for
    reading (:meth:`SQLStore.reader`), so that a page's reads see one state of the store."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

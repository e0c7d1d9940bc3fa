"""The store's clock and times: every time it writes is UTC, and the time a lease is judged
by is the database server's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Boolean, Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from zeus_airflow.core.domain.figures import WALL_CLOCK_SLACK_S

_DB_NOW = {
    # The time the statement runs, not the transaction's start: a decision retried after a
    # wait must not write a lease that began before the wait.
    "postgresql": "SELECT clock_timestamp()",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def db_now(conn: Connection) -> datetime:
    """The database server's clock (UTC): the one clock every worker shares, so that a
    lease written by one worker and expired by another is judged on one clock, whatever
    the skew between them (SQLite's is its host's, where every writer runs)."""
    value = conn.exec_driver_sql(_DB_NOW[conn.dialect.name]).scalar()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return as_utc(value).astimezone(UTC)


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; the store writes UTC only."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class _FitsWallClock(FunctionElement[bool]):
    """Whether a try's seconds fit its row's wall clock, in SQL (:func:`fits_wall_clock`)."""

    type = Boolean()
    name = "fits_wall_clock"
    inherit_cache = True  # its SQL is its clauses' and one constant: nothing else to key


_SPAN_S = {
    "sqlite": "((julianday({end}) - julianday({start})) * 86400.0)",
    "postgresql": "EXTRACT(EPOCH FROM ({end} - {start}))",
}
"""Seconds from one stored time to another, in each database's SQL."""


@compiles(_FitsWallClock)
def _fits_wall_clock(element: _FitsWallClock, compiler: SQLCompiler, **kw: Any) -> str:
    seconds, measurement, start, end = (compiler.process(c, **kw) for c in element.clauses)
    span = _SPAN_S[compiler.dialect.name].format(start=start, end=end)
    return (
        f"({measurement} != 'measured' OR {end} IS NULL "
        f"OR {seconds} <= {span} + {WALL_CLOCK_SLACK_S!r})"
    )


def fits_wall_clock(
    seconds: ColumnElement[Any],
    measurement: ColumnElement[Any],
    started: ColumnElement[Any],
    finished: ColumnElement[Any],
) -> ColumnElement[bool]:
    """``seconds`` are at most the span from ``started`` to ``finished`` plus
    ``figures.WALL_CLOCK_SLACK_S``, where ``measurement`` is ``measured`` and the row has
    finished; true elsewhere (virtual time, a try still running). One element, compiled to
    one piece of SQL per database: the reads that hold every figure to it compile it once a
    process, and each task is a new process (an expression tree of a dozen nodes cost a task
    about 6 ms)."""
    return _FitsWallClock(seconds, measurement, started, finished)

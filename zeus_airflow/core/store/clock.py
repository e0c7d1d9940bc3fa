"""The store's clock and times: every time it writes is UTC, and the time a lease is judged
by is the database server's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Float
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

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


class _ElapsedSeconds(FunctionElement[float]):
    """Seconds from one stored time to another, in SQL (:func:`elapsed_s`)."""

    type = Float()
    name = "elapsed_s"
    inherit_cache = True


@compiles(_ElapsedSeconds, "sqlite")
def _sqlite_elapsed(element: _ElapsedSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    start, end = (compiler.process(c, **kw) for c in element.clauses)
    return f"((julianday({end}) - julianday({start})) * 86400.0)"


@compiles(_ElapsedSeconds, "postgresql")
def _postgresql_elapsed(element: _ElapsedSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    start, end = (compiler.process(c, **kw) for c in element.clauses)
    return f"EXTRACT(EPOCH FROM ({end} - {start}))"


def elapsed_s(start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
    """Seconds from ``start`` to ``end`` (two stored times), on both databases; NULL when
    either is."""
    return _ElapsedSeconds(start, end)

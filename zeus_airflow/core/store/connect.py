"""SQLAlchemy engines for the store: URL normalisation and per-dialect transaction setup.

SQLite and PostgreSQL are supported. On SQLite every write transaction starts with
``BEGIN IMMEDIATE`` (the database's write lock, taken before the first read) so that a
read-decide-write transaction never interleaves with another writer; reads start a plain
deferred transaction, which WAL mode lets run beside a writer.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from zeus_airflow.core.store.base import StoreError

DEFAULT_TIMEOUT_S = 30.0
"""How long to wait for the database: SQLite's write lock, PostgreSQL's connection."""

READ_ONLY = "zeus_read_only"
"""Execution option marking a connection whose transactions only read."""
DURABLE = "zeus_durable"
"""Execution option; False lets a transaction commit without waiting for the disk
(PostgreSQL ``synchronous_commit = off``, SQLite ``synchronous = NORMAL`` in WAL mode). Only a
crash of the database server or the machine, not of a worker, can undo such a commit, and
then together with everything committed after it. The store uses it for decisions, never
for results."""

_POSTGRES_DRIVER = "postgresql+psycopg"
SUPPORTED_URLS = (
    "a SQLite URL (sqlite:////absolute/path/zeus_airflow.db) or a PostgreSQL "
    "URL (postgresql://user:password@host:5432/database)"
)
"""The store's backends, as every URL error states them."""
_SUPPORTED_DRIVERS = ("sqlite", "sqlite+pysqlite", _POSTGRES_DRIVER)
_PASSWORD = re.compile(r":[^:@/\s]*@")
"""The password in ``user:password@host``."""


def normalize_url(url: str | URL) -> URL:
    """The URL with PostgreSQL's driver made explicit (psycopg 3).

    ``postgres://`` (what Airflow and Heroku write, and SQLAlchemy 2 rejects), a bare
    ``postgresql://`` and ``postgresql+psycopg2://`` (psycopg2 is not a dependency) all become
    ``postgresql+psycopg://``. Raises StoreError, stating the supported forms, for text that is
    not a URL and for any other database or driver.
    """
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    try:
        parsed = make_url(url)
    except ArgumentError:
        # The text cannot be parsed, so its password cannot be hidden the usual way.
        shown = _PASSWORD.sub(":***@", str(url))
        raise StoreError(f"{shown!r} is not a database URL: expected {SUPPORTED_URLS}") from None
    if parsed.drivername in ("postgresql", "postgresql+psycopg2"):
        # psycopg2 (Airflow's usual driver) takes the same URLs; psycopg 3 is what we ship.
        parsed = parsed.set(drivername=_POSTGRES_DRIVER)
    _check_sqlite_path(parsed)
    if parsed.drivername not in _SUPPORTED_DRIVERS:
        # Refused here, not when SQLAlchemy fails to import the dialect's driver.
        raise StoreError(
            f"the store URL {display_url(parsed)} uses {parsed.drivername!r}: "
            "the zeus-airflow store supports SQLite and PostgreSQL only; "
            f"expected {SUPPORTED_URLS}"
        )
    return parsed


def _check_sqlite_path(url: URL) -> None:
    """A SQLite store's file is named by an absolute path: a relative one resolves against
    each process's current folder, so a worker, the scheduler and the CLI would each create
    a stray file of their own and never share the job's state."""
    database = url.database
    if url.get_backend_name() != "sqlite" or database in (None, "", ":memory:"):
        return
    if database.startswith("file:") or os.path.isabs(database):
        return
    raise StoreError(
        f"the store URL {display_url(url)} is invalid: its path {database!r} is relative, so "
        "each process would open (and create) a file of its own under its current folder "
        f"(here {os.path.join(os.getcwd(), database)!r}); expected an absolute path, "
        "sqlite:////absolute/path/zeus_airflow.db (four slashes)"
    )


def postgres_url(
    *,
    username: str | None,
    password: str | None,
    host: str | None,
    port: int | None,
    database: str | None,
    query: dict[str, str],
) -> URL:
    """A PostgreSQL store's URL from its parts (the driver the store ships)."""
    return URL.create(
        _POSTGRES_DRIVER,
        username=username,
        password=password,
        host=host,
        port=port,
        database=database,
        query=query,
    )


def sqlite_url(path: str) -> URL:
    """A SQLite store's URL from its file's path."""
    return URL.create("sqlite", database=path)


def display_url(url: str | URL) -> str:
    """The URL as shown in messages and logs: never with its password."""
    return make_url(url).render_as_string(hide_password=True)


def make_engine(url: str | URL, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Engine:
    """An engine configured for the store's transactions on SQLite or PostgreSQL."""
    url = normalize_url(url)
    if url.get_backend_name() != "sqlite":
        connect_args = (
            {"connect_timeout": max(1, round(timeout_s))}
            if url.get_backend_name() == "postgresql"
            else {}
        )
        # No pre-ping (a round trip per transaction): a dead pooled connection fails the
        # transaction's first statement, SQLAlchemy then discards the pool, and the store
        # retries the transaction (see retry.py).
        engine = create_engine(url, connect_args=connect_args)

        @event.listens_for(engine, "begin")
        def _on_server_begin(conn: Connection) -> None:
            if not conn.get_execution_options().get(DURABLE, True):
                conn.exec_driver_sql("SET LOCAL synchronous_commit = off")

        return engine
    in_memory = url.database in (None, "", ":memory:")
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": timeout_s},
        poolclass=StaticPool if in_memory else None,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy issue BEGIN itself, so that it can be BEGIN IMMEDIATE below.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(READ_ONLY, False):
            conn.exec_driver_sql("BEGIN")
            return
        # Only settable between transactions; FULL syncs the WAL at every commit.
        durable = options.get(DURABLE, True)
        conn.exec_driver_sql(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine

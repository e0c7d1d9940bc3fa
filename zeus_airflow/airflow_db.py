"""Reads of Airflow's own metadata database, never of the zeus-airflow store: through
Airflow's ORM models and session, in the process that runs Airflow (the api-server for the
UI, ``dag.test()``'s process for the demo). Outside the store and the migrations, the one
module that builds SQL statements: these tables are Airflow's, which only its models know.

The CLI reads two of them without importing Airflow (seconds of imports for a query of
milliseconds: bench/RESULTS.md, "CLI latency"): the store's Connection and the runs' logical
dates (:func:`store_connection`, :func:`cli_logical_dates`). It finds the metadata database
as Airflow's configuration gives it, and leaves to Airflow whatever only Airflow can answer:
a secrets backend, a Connection in the environment, a value given by a command or a secret.
"""

from __future__ import annotations

import configparser
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    URL,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
    tuple_,
)

from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.connect import normalize_url, postgres_url, sqlite_url


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


# --- The store's Connection -------------------------------------------------------------------
DEFAULT_CONN_ID = "zeus_default"
CONN_TYPE = "zeus_store"
"""The Connection type this package registers: a PostgreSQL store given field by field."""
URL_EXTRA = "sqlalchemy_url"
POSTGRES_TYPES = ("postgres", "postgresql", CONN_TYPE)
LIBPQ_EXTRAS = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
)
"""Connection extras passed on to PostgreSQL; other extras (the postgres provider's
``cursor``...) are not libpq settings."""


def url_from_connection(conn: Any) -> URL:
    """The SQLAlchemy URL of an Airflow Connection (``postgres``, ``zeus_store`` or
    ``sqlite``, or any type with ``extra.sqlalchemy_url``)."""
    extra = conn.extra_dejson or {}
    if extra.get(URL_EXTRA):
        return normalize_url(extra[URL_EXTRA])
    if conn.conn_type in POSTGRES_TYPES:
        query = {k: str(v) for k, v in extra.items() if k in LIBPQ_EXTRAS}
        return postgres_url(
            username=conn.login or None,
            password=conn.password or None,
            host=conn.host or None,
            port=conn.port or None,
            database=conn.schema or None,
            query=query,
        )
    if conn.conn_type == "sqlite":
        # ``sqlite:////tmp/x.db`` as a Connection URI parses to host='' and schema='/tmp/x.db';
        # a Connection made field by field has the path in host.
        path = conn.host or conn.schema
        if not path:
            raise StoreError(
                f"connection {conn.conn_id!r} (sqlite) names no database file: "
                "set its host to the file's absolute path"
            )
        return sqlite_url(path)
    raise StoreError(
        f"connection {conn.conn_id!r} has conn_type {conn.conn_type!r}: expected "
        f"one of {', '.join((*POSTGRES_TYPES, 'sqlite'))}, or any type with "
        f"extra.{URL_EXTRA} set to a SQLAlchemy URL"
    )


# --- Without importing Airflow (the CLI) ------------------------------------------------------
_META = MetaData()
_DAG_RUN = Table(
    "dag_run",
    _META,
    Column("dag_id", String),
    Column("run_id", String),
    Column("logical_date", DateTime),
    Column("run_after", DateTime),
)
_CONNECTION = Table(
    "connection",
    _META,
    Column("conn_id", String),
    Column("conn_type", String),
    Column("host", String),
    Column("schema", String),
    Column("login", Text),
    Column("password", Text),
    Column("port", Integer),
    Column("extra", Text),
    Column("is_encrypted", Boolean),
    Column("is_extra_encrypted", Boolean),
)
"""The columns of Airflow's ``dag_run`` and ``connection`` tables the CLI reads (Airflow 3.2
and 3.3 name them so); its models stay Airflow's."""
ASK_AIRFLOW = object()
"""What :func:`store_connection` returns where only Airflow can tell."""


@dataclass(frozen=True)
class ConnectionFields:
    """An Airflow Connection's fields as ``hooks.store.url_from_connection`` reads them."""

    conn_id: str
    conn_type: str
    host: str | None
    schema: str | None
    login: str | None
    password: str | None
    port: int | None
    extra_dejson: dict[str, Any]


def _config_value(section: str, key: str, environ: Mapping[str, str]) -> str | object | None:
    """``[section] key`` as Airflow's configuration gives it: its environment variable, else
    airflow.cfg; None when neither sets it; :data:`ASK_AIRFLOW` when it comes from a command or
    a secret (``_CMD``, ``_SECRET``), which only Airflow runs."""
    name = f"AIRFLOW__{section.upper()}__{key.upper()}"
    if environ.get(name):
        return os.path.expandvars(environ[name])
    if environ.get(f"{name}_CMD") or environ.get(f"{name}_SECRET"):
        return ASK_AIRFLOW
    parser = _airflow_cfg(environ)
    if parser.has_option(section, f"{key}_cmd") or parser.has_option(section, f"{key}_secret"):
        return ASK_AIRFLOW
    if parser.has_option(section, key):
        return os.path.expandvars(parser.get(section, key)) or None
    return None


def _airflow_cfg(environ: Mapping[str, str]) -> configparser.RawConfigParser:
    """airflow.cfg ($AIRFLOW_CONFIG, else under $AIRFLOW_HOME, else ~/airflow), as read by
    Airflow: no interpolation; empty when there is none."""
    home = Path(environ.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()
    path = Path(environ.get("AIRFLOW_CONFIG") or home / "airflow.cfg").expanduser()
    parser = configparser.RawConfigParser(strict=False)
    parser.read(path)
    return parser


def metadata_url(environ: Mapping[str, str] | None = None) -> str | None:
    """Airflow's metadata database URL as its configuration gives it (its default: the
    SQLite file under AIRFLOW_HOME); None where only Airflow can tell (a command or a secret
    gives it, or connect arguments of its own)."""
    env = os.environ if environ is None else environ
    if _config_value("database", "sql_alchemy_connect_args", env) is not None:
        return None
    found = _config_value("database", "sql_alchemy_conn", env)
    if found is ASK_AIRFLOW:
        return None
    if isinstance(found, str):
        return found
    home = Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()
    return f"sqlite:///{home / 'airflow.db'}"


def _read(url: str, statement: Any) -> list[Any]:
    """The rows of one SELECT on Airflow's metadata database, the engine disposed after."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(statement))
    finally:
        engine.dispose()


def cli_logical_dates(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], datetime]:
    """:func:`logical_dates` for the CLI: read from the metadata database where its URL is
    known without Airflow, else through Airflow's models."""
    url = metadata_url()
    if url is None:
        return logical_dates(keys)
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    query = select(
        _DAG_RUN.c.dag_id, _DAG_RUN.c.run_id, _DAG_RUN.c.logical_date, _DAG_RUN.c.run_after
    ).where(tuple_(_DAG_RUN.c.dag_id, _DAG_RUN.c.run_id).in_(wanted))
    return {(d, r): _utc(logical or after) for d, r, logical, after in _read(url, query)}


def _utc(moment: datetime) -> datetime:
    """A date of Airflow's (``UtcDateTime``: stored in UTC, naive on SQLite) as its models
    give it: aware, in UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def store_connection(conn_id: str, environ: Mapping[str, str] | None = None) -> Any:
    """The Airflow Connection ``conn_id`` read from the metadata database without Airflow: its
    fields, None when there is no such Connection, or :data:`ASK_AIRFLOW` where Airflow may
    find it elsewhere or must decrypt it (a secrets backend; ``AIRFLOW_CONN_<ID>``; a Fernet
    key given by a command or a secret)."""
    env = os.environ if environ is None else environ
    url = metadata_url(env)
    backend = _config_value("secrets", "backend", env)
    if url is None or backend is not None or env.get(f"AIRFLOW_CONN_{conn_id.upper()}"):
        return ASK_AIRFLOW
    found = _read(url, select(_CONNECTION).where(_CONNECTION.c.conn_id == conn_id))
    if not found:
        return None
    row = found[0]._mapping
    password, extra = row["password"], row["extra"]
    if row["is_encrypted"] or row["is_extra_encrypted"]:
        key = _config_value("core", "fernet_key", env)
        if not isinstance(key, str):
            return ASK_AIRFLOW
        password = _decrypt(key, password) if row["is_encrypted"] else password
        extra = _decrypt(key, extra) if row["is_extra_encrypted"] else extra
    return ConnectionFields(
        conn_id=conn_id,
        conn_type=row["conn_type"],
        host=row["host"],
        schema=row["schema"],
        login=row["login"],
        password=password,
        port=row["port"],
        extra_dejson=json.loads(extra) if extra else {},
    )


def _decrypt(keys: str, value: str | None) -> str | None:
    """A value Airflow encrypted with its Fernet key(s) (comma-separated, the first encrypts:
    Airflow's ``get_fernet``)."""
    if not value:
        return value
    from cryptography.fernet import Fernet, MultiFernet

    fernet = MultiFernet([Fernet(k.strip().encode()) for k in keys.split(",") if k.strip()])
    return fernet.decrypt(value.encode()).decode()

"""The store behind an Airflow Connection (default ``zeus_default``).

Resolution, first match wins: an explicit URL > the Connection > ``$ZEUS_AIRFLOW_DB_URL`` >
the embedded SQLite file under ``$AIRFLOW_HOME``. The default Connection id is optional (a
missing ``zeus_default`` falls through); any other id must exist, so that a typo never sends a
job's state to another database. The SQLAlchemy URL is built from the Connection's fields,
never with ``Connection.get_uri()``, whose URLs SQLAlchemy rejects.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from zeus_airflow import airflow_compat  # noqa: F401  (an unsupported Airflow: a clear error)
from zeus_airflow.core.common.config import is_blank
from zeus_airflow.core.store.base import Store, StoreError
from zeus_airflow.core.store.connect import URL, normalize_url, postgres_url, sqlite_url
from zeus_airflow.core.store.location import StoreLocation, open_store, resolve_location

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


def resolve_store_location(
    conn_id: str | None = None, url: str | URL | None = None
) -> StoreLocation:
    """The store's location with the Connection step in the chain. An empty ``url`` or
    ``conn_id`` is refused: '' is missing, never the default."""
    if url is not None:
        return resolve_location(url)
    if conn_id is not None and is_blank(conn_id):
        raise StoreError(
            f"zeus_conn_id={conn_id!r} is invalid: expected the id of an Airflow "
            f"connection (not empty, no NUL bytes), or {DEFAULT_CONN_ID!r}"
        )
    try:
        conn = BaseHook.get_connection(conn_id or DEFAULT_CONN_ID)
    except AirflowNotFoundException:
        if conn_id and conn_id != DEFAULT_CONN_ID:
            raise StoreError(
                f"zeus_conn_id={conn_id!r}: no such Airflow connection; create it "
                f"or leave zeus_conn_id at {DEFAULT_CONN_ID!r}, which falls back "
                "to $ZEUS_AIRFLOW_DB_URL, then the embedded SQLite store"
            ) from None
        return resolve_location()
    return StoreLocation(url_from_connection(conn), "connection", conn.conn_id)


class ZeusStoreHook(BaseHook):
    """Opens the zeus-airflow store named by an Airflow Connection."""

    conn_name_attr = "zeus_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Zeus store"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The Connection form: PostgreSQL fields, or a whole URL in the extra."""
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database"},
            "placeholders": {
                "host": "the PostgreSQL server",
                "schema": "zeus",
                "port": "5432",
                "extra": '{"sqlalchemy_url": "sqlite:////path/zeus.db"} (instead of the fields)',
            },
        }

    def __init__(self, zeus_conn_id: str | None = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.zeus_conn_id = zeus_conn_id

    def location(self) -> StoreLocation:
        return resolve_store_location(self.zeus_conn_id)

    def get_conn(self) -> Store:
        return self.get_store()

    def get_store(self, **options: Any) -> Store:
        """The store, schema checked (``options`` as for :func:`open_store`)."""
        return open_store(self.location(), **options)

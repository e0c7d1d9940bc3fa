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
from zeus_airflow.airflow_db import (  # the CLI reads a Connection without Airflow too
    CONN_TYPE,
    DEFAULT_CONN_ID,
    url_from_connection,
)
from zeus_airflow.core.common.config import is_blank
from zeus_airflow.core.store.base import Store, StoreError
from zeus_airflow.core.store.connect import URL
from zeus_airflow.core.store.location import StoreLocation, open_store, resolve_location

__all__ = ["DEFAULT_CONN_ID", "ZeusStoreHook", "resolve_store_location", "url_from_connection"]


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

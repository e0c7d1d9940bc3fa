"""Where the store lives, and opening it there.

Resolution, first match wins: an explicit URL > ``$ZEUS_AIRFLOW_DB_URL`` > the embedded SQLite
file ``$AIRFLOW_HOME/zeus_airflow.db`` (``AIRFLOW_HOME`` defaults to ``~/airflow``, and must
exist: the store never creates a home no Airflow uses). The Airflow
layer (``zeus_airflow.hooks.store``) puts an Airflow Connection in front of the environment
variable. Only the embedded default creates or upgrades its own schema: a server database is
upgraded by whoever runs ``zeus-airflow db upgrade``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.engine import URL

from zeus_airflow.core.common.config import is_blank
from zeus_airflow.core.store import schema
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.connect import display_url, make_engine, normalize_url
from zeus_airflow.core.store.retry import RetryPolicy, sqlite_fault
from zeus_airflow.core.store.sql import SQLStore, guarded

URL_ENV = "ZEUS_AIRFLOW_DB_URL"
EMBEDDED_FILE = "zeus_airflow.db"

Source = Literal["explicit", "connection", "environment", "embedded"]


@dataclass(frozen=True)
class StoreLocation:
    url: URL
    source: Source
    """Where the URL came from; also decides whether the store may upgrade itself."""
    conn_id: str = ""
    """The Airflow Connection's id, when the URL came from one."""

    def describe(self) -> str:
        origin = {
            "explicit": "the given URL",
            "connection": f"Airflow connection {self.conn_id}",
            "environment": f"${URL_ENV}",
            "embedded": "the embedded default under $AIRFLOW_HOME",
        }[self.source]
        return f"{display_url(self.url)} (from {origin})"


def airflow_home(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()


def resolve_location(
    url: str | URL | None = None, environ: Mapping[str, str] | None = None
) -> StoreLocation:
    """Apply the resolution chain (without the Airflow Connection step)."""
    env = os.environ if environ is None else environ
    if isinstance(url, str) and is_blank(url):  # '' is missing, never the default
        raise StoreError(
            f"the store URL {url!r} is invalid: expected a database URL (not "
            "empty, no NUL bytes), or None for the default location"
        )
    if url:
        return StoreLocation(normalize_url(url), "explicit")
    if env.get(URL_ENV):
        return StoreLocation(normalize_url(env[URL_ENV]), "environment")
    path = airflow_home(env) / EMBEDDED_FILE
    return StoreLocation(URL.create("sqlite", database=str(path)), "embedded")


def open_store(where: str | URL | StoreLocation | None = None, **options: Any) -> SQLStore:
    """Open the store at ``where`` (resolved as above when not a :class:`StoreLocation`).

    ``options`` go to :class:`SQLStore` (``lease_s``, ``retry``, ``timeout_s``). The embedded
    default (in an existing ``$AIRFLOW_HOME``) upgrades its schema on first use; any other store is
    checked and refused when its schema is not the code's.
    """
    location = _prepared(where)
    try:
        return SQLStore(location.url, create_schema=location.source == "embedded", **options)
    except StoreError as err:
        raise StoreError(f"{err} [store location: {location.describe()}]") from err


def upgrade_store(where: str | URL | StoreLocation | None = None) -> schema.Upgrade:
    """Create or upgrade the store's schema (what ``zeus-airflow db upgrade`` runs)."""
    location = _prepared(where)
    engine = make_engine(location.url)
    try:
        return guarded(
            location.describe(),
            "upgrading the schema",
            lambda: schema.upgrade(engine),
            RetryPolicy(),
            sqlite_fault(location.url),
        )
    finally:
        engine.dispose()


def _prepared(where: str | URL | StoreLocation | None) -> StoreLocation:
    """The resolved location, its folder checked: an embedded store's home must exist, a SQLite
    file's folder too."""
    location = where if isinstance(where, StoreLocation) else resolve_location(where)
    database = location.url.database
    if location.source == "embedded" and database:
        home = Path(database).parent
        if not home.is_dir():
            # Created, it would be a home no Airflow uses: a typo's store, found by nobody.
            named = "AIRFLOW_HOME" if os.environ.get("AIRFLOW_HOME") else "AIRFLOW_HOME (unset)"
            raise StoreError(
                f"opening the store: {named}={str(home)!r} does not exist, and the "
                f"embedded store ({EMBEDDED_FILE}) lives there: create it (Airflow does when "
                f"it first runs), or fix {named.split()[0]}, or set ${URL_ENV} or the "
                "connection zeus_default to the store's URL (nothing created; not retried)"
            )
    elif (
        location.url.get_backend_name() == "sqlite"
        and database
        and database != ":memory:"
        and not database.startswith("file:")
        and not Path(database).parent.is_dir()
    ):
        # SQLite says only "unable to open database file", which is retried as a busy disk:
        # a missing folder is permanent, so it is named at once.
        folder = str(Path(database).parent)
        raise StoreError(
            f"opening the store: the zeus-airflow store at "
            f"{display_url(location.url)} cannot be opened: its folder {folder!r} "
            "does not exist; create it, or fix the path in the store's URL "
            f"(not retried) [store location: {location.describe()}]"
        )
    return location

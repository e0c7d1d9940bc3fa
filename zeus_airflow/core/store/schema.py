"""The store's schema version: upgrading it with the shipped Alembic migrations, and checking it.

The revision lives in a version table of our own (``zeus_alembic_version``), so the store can
share a database with Airflow's metadata (whose Alembic uses ``alembic_version``) without the
two ever reading each other's revision.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.tables import SCHEMA_VERSION, metadata

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported where a migration runs, never to open a store: it takes as long to
# import as SQLAlchemy itself (bench/RESULTS.md, "CLI latency"), and a task or `zeus-airflow
# runs` only reads the revision, one SELECT.

VERSION_TABLE = "zeus_alembic_version"
UPGRADE_COMMAND = "zeus-airflow db upgrade"
_MISSING_TABLE = re.compile(r'no such table: (\w+)|relation "(\w+)" does not exist')
"""SQLite's and PostgreSQL's words for a statement on a table that is not there."""
# "zeus" as a number: serialises concurrent upgrades of one database.
_PG_UPGRADE_LOCK = text(f"SELECT pg_advisory_xact_lock({0x7A657573})")


@dataclass(frozen=True)
class Upgrade:
    """What an upgrade did: the revision before (None: an empty database) and after."""

    before: str | None
    after: str
    recreated: tuple[str, ...] = ()
    """Tables that were missing at the head revision and were created again, empty."""


def alembic_config() -> Config:
    """Alembic's configuration for the migrations shipped inside the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "zeus_airflow:migrations")
    return config


def migrations() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def is_known(revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return migrations().get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(conn: Connection, tables: Sequence[str] | None = None) -> str | None:
    """The database's revision; None when the store has never been created there.
    ``tables``: the database's table names, when the caller has read them already.

    Read as Alembic reads it (one row of the version table, none before the first
    migration), without importing Alembic."""
    present = inspect(conn).get_table_names() if tables is None else tables
    if VERSION_TABLE not in present:
        return None
    found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(found) > 1:  # Alembic refuses such a table too: the store's history is linear
        raise StoreError(
            f"the store's {VERSION_TABLE} table holds {len(found)} revisions "
            f"({', '.join(found)}); expected one"
        )
    return found[0] if found else None


def upgrade(engine: Engine) -> Upgrade:
    """Create the store's tables or bring them to the head revision, in one transaction.

    Concurrent upgrades of one database wait for each other (SQLite: the write lock taken
    by ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock), so workers that
    all open a fresh embedded store at once do not collide.
    """
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(_PG_UPGRADE_LOCK)
        before = current_revision(conn)
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        # Tables dropped by hand at the head revision: the migrations would never run again,
        # so recreate them (empty: their rows are gone) to make the store usable.
        missing = missing_tables(conn)
        if missing:
            metadata.create_all(conn, tables=[metadata.tables[name] for name in missing])
        return Upgrade(before, current_revision(conn) or "", tuple(missing))


def missing_tables(conn: Connection, tables: Sequence[str] | None = None) -> list[str]:
    """The store's tables that are not in the database (the connection's default schema);
    ``tables``: its table names, when the caller has read them already."""
    present = set(inspect(conn).get_table_names() if tables is None else tables)
    return sorted(name for name in metadata.tables if name not in present)


def missing_table(err: DBAPIError) -> str | None:
    """The store's table a database error says is missing, if that is what it says."""
    match = _MISSING_TABLE.search(str(err.orig))
    name = match and (match.group(1) or match.group(2))
    return name if name in metadata.tables else None


def incomplete(where: str, missing: Sequence[str]) -> str:
    """The message for a store whose revision is right but whose tables are not all there."""
    return (
        f"the zeus-airflow store at {where} lacks table(s) {', '.join(missing)} of schema "
        f"revision {SCHEMA_VERSION} (dropped outside zeus-airflow?): run "
        f"`{UPGRADE_COMMAND}` to recreate them, empty"
    )


def check(conn: Connection, where: str) -> None:
    """Refuse a store whose schema is not the one this code was written for.

    ``where`` names the store in messages (a URL without its password).
    """
    tables = inspect(conn).get_table_names()  # read once: the revision and the tables
    revision = current_revision(conn, tables)
    if revision == SCHEMA_VERSION:
        missing = missing_tables(conn, tables)
        if missing:
            raise StoreError(incomplete(where, missing))
        return
    if revision is None:
        raise StoreError(
            f"the zeus-airflow store at {where} has no tables yet: create them "
            f"with `{UPGRADE_COMMAND}` (schema revision {SCHEMA_VERSION})"
        )
    if not is_known(revision):
        raise StoreError(
            f"the zeus-airflow store at {where} is at schema revision {revision}, "
            f"unknown to this zeus-airflow (expects {SCHEMA_VERSION}): it was "
            "upgraded by a newer zeus-airflow; install that version here too"
        )
    raise StoreError(
        f"the zeus-airflow store at {where} is at schema revision {revision}, "
        f"behind this zeus-airflow (expects {SCHEMA_VERSION}): run "
        f"`{UPGRADE_COMMAND}` before running tasks"
    )

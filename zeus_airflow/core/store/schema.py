"""The store's schema version: upgrading it with the shipped Alembic migrations, and checking it.

The revision lives in a version table of our own (``zeus_alembic_version``), so the store can
share a database with Airflow's metadata (whose Alembic uses ``alembic_version``) without the
two ever reading each other's revision.
"""

from __future__ import annotations

from dataclasses import dataclass

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, text

from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.tables import SCHEMA_VERSION

VERSION_TABLE = "zeus_alembic_version"
UPGRADE_COMMAND = "zeus-airflow db upgrade"
# "zeus" as a number: serialises concurrent upgrades of one database.
_PG_UPGRADE_LOCK = text(f"SELECT pg_advisory_xact_lock({0x7A657573})")


@dataclass(frozen=True)
class Upgrade:
    """What an upgrade did: the revision before (None: an empty database) and after."""

    before: str | None
    after: str


def alembic_config() -> Config:
    """Alembic's configuration for the migrations shipped inside the package."""
    config = Config()
    config.set_main_option("script_location", "zeus_airflow:migrations")
    return config


def migrations() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def is_known(revision: str) -> bool:
    try:
        return migrations().get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(conn: Connection) -> str | None:
    """The database's revision; None when the store has never been created there."""
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade(engine: Engine) -> Upgrade:
    """Create the store's tables or bring them to the head revision, in one transaction.

    Concurrent upgrades of one database wait for each other (SQLite: the write lock taken
    by ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-scoped advisory lock), so workers that
    all open a fresh embedded store at once do not collide.
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(_PG_UPGRADE_LOCK)
        before = current_revision(conn)
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        return Upgrade(before, current_revision(conn) or "")


def check(conn: Connection, where: str) -> None:
    """Refuse a store whose schema is not the one this code was written for.

    ``where`` names the store in messages (a URL without its password).
    """
    revision = current_revision(conn)
    if revision == SCHEMA_VERSION:
        return
    if revision is None:
        raise StoreError(f"the zeus-airflow store at {where} has no tables yet: create them "
                         f"with `{UPGRADE_COMMAND}` (schema revision {SCHEMA_VERSION})")
    if not is_known(revision):
        raise StoreError(f"the zeus-airflow store at {where} is at schema revision {revision}, "
                         f"unknown to this zeus-airflow (expects {SCHEMA_VERSION}): it was "
                         "upgraded by a newer zeus-airflow; install that version here too")
    raise StoreError(f"the zeus-airflow store at {where} is at schema revision {revision}, "
                     f"behind this zeus-airflow (expects {SCHEMA_VERSION}): run "
                     f"`{UPGRADE_COMMAND}` before running tasks")

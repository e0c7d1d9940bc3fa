"""The store's schema: migrations, `zeus-airflow db upgrade`, refusal of a store behind the code,
the embedded default upgrading itself. Every test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fixtures_store import empty_database
from paths import REPO
from sqlalchemy import Connection, create_engine, inspect, text, types

from zeus_airflow.cli import main
from zeus_airflow.core.common.config import HOST_MAX_LENGTH
from zeus_airflow.core.domain import FIGURES, TRY_FIGURES
from zeus_airflow.core.store import retry, schema
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.location import open_store, upgrade_store
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import SCHEMA_VERSION, metadata


def schema_of(url: str) -> dict[str, object]:
    """Everything that defines the store's tables, as the database itself reports it."""
    engine = create_engine(url)
    with engine.connect() as conn:
        dump = _sqlite_schema(conn) if conn.dialect.name == "sqlite" else _postgres_schema(conn)
    engine.dispose()
    return dump


def _sqlite_schema(conn: Connection) -> dict[str, object]:
    rows = conn.execute(
        text(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name LIKE "
            "'zeus_%' AND tbl_name != :version AND sql IS NOT NULL"
        ),
        {"version": schema.VERSION_TABLE},
    )
    # A table's columns and constraints, in any order (SQLite keeps the DDL text as written,
    # and appends ALTER TABLE's columns to it on the last column's line).
    return {
        name: sorted(_top_level_items(sql[sql.index("(") + 1 : sql.rindex(")")]))
        if kind == "table"
        else sql
        for kind, name, sql in rows
    }


def _top_level_items(body: str) -> list[str]:
    """The comma-separated items of a CREATE TABLE body, commas inside parentheses kept."""
    items, depth, current = [], 0, ""
    for char in body:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(re.sub(r"\s+", " ", current).strip())
            current = ""
        else:
            current += char
    return [*items, re.sub(r"\s+", " ", current).strip()]


def _postgres_schema(conn: Connection) -> dict[str, object]:
    # Only this schema's tables (tests share a database, each in a schema of its own).
    queries = {
        "columns": "SELECT table_name, column_name, data_type, character_maximum_length, "
        "is_nullable, column_default, col_description(format('%I.%I', "
        "table_schema, table_name)::regclass, ordinal_position) FROM "
        "information_schema.columns WHERE table_schema = current_schema() AND "
        "table_name != :version",
        "constraints": "SELECT c.relname, conname, pg_get_constraintdef(k.oid) FROM "
        "pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN "
        "pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = "
        "current_schema() AND c.relname != :version",
        "indexes": "SELECT indexname, replace(indexdef, current_schema() || '.', '') FROM "
        "pg_indexes WHERE schemaname = current_schema() AND tablename != :version",
    }
    return {
        name: sorted(tuple(r) for r in conn.execute(text(q), {"version": schema.VERSION_TABLE}))
        for name, q in queries.items()
    }


def test_the_migrations_build_exactly_the_tables_module(
    db_url: str, db_backend: str, tmp_path: Path, postgres_url: str | None
) -> None:
    upgrade_store(db_url)
    with empty_database(db_backend, tmp_path, postgres_url) as reference_url:
        engine = create_engine(reference_url)
        metadata.create_all(engine)
        engine.dispose()
        reference = schema_of(reference_url)
    migrated = schema_of(db_url)
    assert migrated == reference
    assert "uq_zeus_trials_live_key" in str(migrated)
    engine = create_engine(db_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": schema.VERSION_TABLE}
        )
        assert compare_metadata(context, metadata) == []
    engine.dispose()


def test_schema_version_names_the_head_migration() -> None:
    assert schema.migrations().get_current_head() == SCHEMA_VERSION


def test_an_empty_database_is_refused_with_the_command_that_fixes_it(db_url: str) -> None:
    with pytest.raises(
        StoreError,
        match=r"no tables yet: create them with `zeus-airflow db "
        r"upgrade`",
    ):
        SQLStore(db_url)
    engine = create_engine(db_url)
    assert inspect(engine).get_table_names() == []  # refusing created nothing
    engine.dispose()


def test_a_store_behind_the_code_is_refused(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store at 0001 opened by this release, which expects SCHEMA_VERSION.
    engine = create_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {schema.VERSION_TABLE} SET version_num = '0001'"))
    engine.dispose()
    with pytest.raises(
        StoreError,
        match=rf"at schema revision 0001, behind this zeus-airflow "
        rf"\(expects {SCHEMA_VERSION}\): run `zeus-airflow db "
        r"upgrade`",
    ):
        open_store(migrated_url)


def test_a_store_from_a_newer_release_is_refused(migrated_url: str) -> None:
    engine = create_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {schema.VERSION_TABLE} SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"revision 0099, unknown to this zeus-airflow"):
        SQLStore(migrated_url)


def test_db_upgrade_creates_the_tables_then_has_nothing_to_do(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert (
        f"created the store's tables (schema revision {SCHEMA_VERSION})" in capsys.readouterr().out
    )
    assert main(["db", "upgrade", "--db", db_url]) == 0
    assert f"already at schema revision {SCHEMA_VERSION}" in capsys.readouterr().out
    store = SQLStore(db_url)
    with store.reading() as conn:
        assert schema.current_revision(conn) == SCHEMA_VERSION
    store.engine.dispose()


def test_concurrent_upgrades_of_one_database_wait_for_each_other(db_url: str) -> None:
    results, errors = [], []

    def upgrade() -> None:
        try:
            results.append(upgrade_store(db_url))
        except Exception as err:  # collected: a thread's exception would be lost
            errors.append(err)

    threads = [threading.Thread(target=upgrade) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (
        sorted((r.before or "", r.after) for r in results)
        == [("", SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 3
    )


def test_the_embedded_default_upgrades_itself_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "airflow-home"
    home.mkdir()  # Airflow's home, which Airflow creates
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.delenv("ZEUS_AIRFLOW_DB_URL", raising=False)
    # Several workers opening the fresh default at once: one creates it, none fails.
    code = (
        "from zeus_airflow.core.store.location import open_store; "
        "store = open_store(); print(store.where)"
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], outputs
    assert all(out.strip() == f"sqlite:///{home / 'zeus_airflow.db'}" for out, _ in outputs)
    engine = create_engine(f"sqlite:///{home / 'zeus_airflow.db'}")
    with engine.connect() as conn:
        assert schema.current_revision(conn) == SCHEMA_VERSION
    engine.dispose()


def test_the_migrations_ship_in_the_wheel(tmp_path: Path) -> None:
    # Built from a copy: building in place would leave build/ in everyone's checkout.
    repo, source = REPO, tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    shutil.copytree(
        repo / "zeus_airflow", source / "zeus_airflow", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("zeus_airflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "zeus_airflow/migrations/env.py",
        "zeus_airflow/migrations/script.py.mako",
        "zeus_airflow/migrations/versions/0001_initial_schema.py",
    } <= names


# --- the declared figures (core/domain/figures.py) have their columns ---------------------
_SQL = {"float": types.Float, "int": types.Integer, "bool": types.Boolean, "code": types.String}


def test_the_migrated_trials_table_has_each_declared_figure_of_a_try(tmp_path: Path) -> None:
    """On a real SQLite file upgraded by the migrations (not by the tables module), each
    figure a try measures is a nullable column of its declared type."""
    url = f"sqlite:///{tmp_path / 'zeus.db'}"
    upgrade_store(url)
    engine = create_engine(url)
    columns = {c["name"]: c for c in inspect(engine).get_columns("zeus_trials")}
    engine.dispose()
    assert len(TRY_FIGURES) >= 15
    for name in TRY_FIGURES:
        column = columns[name]
        assert column["nullable"], name  # None until the try ends
        assert isinstance(column["type"], _SQL[FIGURES[name].sql]), (name, column["type"])
        if FIGURES[name].sql == "code":
            assert column["type"].length == 16, name


# --- a store missing a table (a fault no Store method makes) ---------------------------------
@pytest.mark.parametrize("table", ["zeus_trials", "zeus_jobs", "zeus_gpu_leases"])
def test_a_store_missing_a_table_gets_the_schema_message(
    migrated_url: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []  # the waits the store's retry loop asks for, instead of slept
    monkeypatch.setattr(retry.time, "sleep", waits.append)
    store = SQLStore(migrated_url)
    with store.engine.begin() as conn:
        conn.execute(
            text(
                f"DROP TABLE {table} CASCADE"
                if "postgresql" in migrated_url
                else f"DROP TABLE {table}"
            )
        )
    store.engine.dispose()
    with pytest.raises(StoreError) as err:
        open_store(migrated_url)
    message = str(err.value)
    assert f"lacks table(s) {table}" in message and "zeus-airflow db upgrade" in message
    assert "\n" not in message and waits == []
    assert upgrade_store(migrated_url).recreated == (table,)  # the fix the message names


def test_the_lease_host_column_holds_what_the_node_name_check_allows(migrated_url: str) -> None:
    """``ZEUS_AIRFLOW_NODE_NAME`` is refused past ``HOST_MAX_LENGTH`` characters, named as
    the store's lease column (tests/operators/test_bad_inputs.py): the migrated column is that
    long."""
    engine = create_engine(migrated_url)
    columns = {c["name"]: c for c in inspect(engine).get_columns("zeus_gpu_leases")}
    engine.dispose()
    assert columns["host"]["type"].length == HOST_MAX_LENGTH == 250

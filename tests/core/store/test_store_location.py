"""Where the store is found: the resolution chain, Airflow Connections turned into SQLAlchemy
URLs, and a real task opening the store through its Connection (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk import Connection
from fixtures_airflow import daily, sync_dag, task_state
from sqlalchemy.engine import make_url

from zeus_airflow.cli import main
from zeus_airflow.core.store.admin import list_jobs
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.connect import display_url, normalize_url
from zeus_airflow.core.store.location import resolve_location
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.hooks.store import ZeusStoreHook, resolve_store_location, url_from_connection


# --- the chain, without Airflow ---------------------------------------------------------------
def test_an_explicit_url_beats_the_environment_which_beats_the_embedded_file() -> None:
    env = {"ZEUS_AIRFLOW_DB_URL": "postgres://u@env-host/zeus", "AIRFLOW_HOME": "/srv/af"}
    assert resolve_location("sqlite:////x.db", env).url.database == "/x.db"
    from_env = resolve_location(None, env)
    assert (from_env.source, str(from_env.url)) == (
        "environment",
        "postgresql+psycopg://u@env-host/zeus",
    )
    embedded = resolve_location(None, {"AIRFLOW_HOME": "/srv/af"})
    assert (embedded.source, embedded.url.database) == ("embedded", "/srv/af/zeus_airflow.db")


def test_airflow_home_defaults_to_the_home_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_location(None, {}).url.database == str(tmp_path / "airflow" / "zeus_airflow.db")


def test_urls_get_the_psycopg_driver_and_never_show_their_password() -> None:
    for given in ("postgres://u:pw@h:5433/db", "postgresql://u:pw@h:5433/db"):
        assert normalize_url(given).drivername == "postgresql+psycopg"
    assert display_url(normalize_url("postgres://u:pw@h/db")) == "postgresql+psycopg://u:***@h/db"


# --- Connections ------------------------------------------------------------------------------
@pytest.mark.parametrize("conn_type", ["postgres", "zeus_store"])
def test_a_postgres_connection_becomes_a_url_whatever_its_password(conn_type: str) -> None:
    conn = Connection(
        conn_id="zeus_default",
        conn_type=conn_type,
        host="db.example",
        login="zeus",
        password="p@ss:w/rd?#",
        port=5433,
        schema="zeus",
        extra=json.dumps({"sslmode": "require", "cursor": "dictcursor"}),
    )
    url = url_from_connection(conn)
    # The URL survives being written out and read back (get_uri()'s would not).
    parsed = make_url(url.render_as_string(hide_password=False))
    assert (
        parsed.drivername,
        parsed.username,
        parsed.password,
        parsed.host,
        parsed.port,
        parsed.database,
        dict(parsed.query),
    ) == (
        "postgresql+psycopg",
        "zeus",
        "p@ss:w/rd?#",
        "db.example",
        5433,
        "zeus",
        {"sslmode": "require"},
    )


def test_a_sqlite_connection_names_its_file_in_host_or_schema() -> None:
    as_uri = Connection.from_uri("sqlite:////var/zeus/store.db", conn_id="zeus_default")
    by_fields = Connection(conn_id="zeus_default", conn_type="sqlite", host="/var/zeus/a.db")
    assert url_from_connection(as_uri).database == "/var/zeus/store.db"
    assert url_from_connection(by_fields).database == "/var/zeus/a.db"


def test_any_connection_may_carry_its_own_sqlalchemy_url() -> None:
    conn = Connection(
        conn_id="zeus_default",
        conn_type="generic",
        extra=json.dumps({"sqlalchemy_url": "postgres://u@h/zeus"}),
    )
    assert str(url_from_connection(conn)) == "postgresql+psycopg://u@h/zeus"


def test_an_unsupported_connection_type_names_the_allowed_ones() -> None:
    conn = Connection(conn_id="zeus_default", conn_type="mysql", host="h")
    with pytest.raises(
        StoreError,
        match=r"conn_type 'mysql': expected one of postgres, "
        r"postgresql, zeus_store, sqlite, or any type "
        r"with extra\.sqlalchemy_url",
    ):
        url_from_connection(conn)


def test_the_connection_comes_before_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", "sqlite:////from-env.db")
    assert resolve_store_location().source == "environment"  # no zeus_default: fall through
    monkeypatch.setenv("AIRFLOW_CONN_ZEUS_DEFAULT", "sqlite:////from-conn.db")
    location = resolve_store_location()
    assert (location.source, location.url.database) == ("connection", "/from-conn.db")
    assert resolve_store_location(url="sqlite:////given.db").url.database == "/given.db"
    with pytest.raises(
        StoreError,
        match=r"zeus_conn_id='zeus_prod': no such Airflow "
        r"connection",
    ):
        resolve_store_location("zeus_prod")


# --- a real task ------------------------------------------------------------------------------
def connection_json(url: str) -> str:
    """The Airflow Connection, field by field, of a test database URL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return json.dumps({"conn_type": "sqlite", "host": parsed.database})
    return json.dumps(
        {
            "conn_type": "postgres",
            "host": parsed.host,
            "port": parsed.port,
            "login": parsed.username,
            "schema": parsed.database,
            "extra": dict(parsed.query),
        }
    )


@pytest.mark.usefixtures("dag_test")
def test_a_task_opens_the_store_through_its_connection(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk import dag, task

    from zeus_airflow.core.common.config import JobConfig

    monkeypatch.setenv("AIRFLOW_CONN_ZEUS_DEFAULT", connection_json(migrated_url))
    monkeypatch.delenv("ZEUS_AIRFLOW_DB_URL", raising=False)

    @dag(dag_id="zeus_store_via_connection", schedule=None, catchup=False)
    def via_connection() -> None:
        @task
        def register() -> str:
            store = ZeusStoreHook().get_store()
            store.register_job(JobConfig("via.connection", (8, 16), 8, 0.5, 3))
            return store.where

        register()

    run = sync_dag(via_connection()).test(logical_date=daily(1))
    assert task_state(run, "register") == ("success", 1)
    store = SQLStore(migrated_url)
    assert [j.job_id for j in list_jobs(store)] == ["via.connection"]
    store.engine.dispose()
    # The CLI, given no --db, finds the same store through the same Connection.
    capsys.readouterr()  # what dag.test() logged
    assert main(["jobs", "--format", "json"]) == 0
    assert [j["job_id"] for j in json.loads(capsys.readouterr().out)] == ["via.connection"]

"""The CLI finds the store's Airflow Connection as Airflow's servers do, without importing
Airflow: a Connection made by Airflow itself (its password and extra encrypted with the Fernet
key) reads the same through ``airflow_db.store_connection`` as through Airflow's ``BaseHook``
in a server process (the api-server, whose UI shows the store). Outside one, Airflow 3.3's
``BaseHook`` reads no Connection from the metadata database (``ensure_secrets_backend_loaded``:
environment variables and secrets backends only), so before this the CLI missed them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB

ADD = """
from airflow.models.connection import Connection
from airflow.utils.session import create_session

with create_session() as session:
    session.add(Connection(conn_id="zeus_pg", conn_type="postgres", host="db.example",
                           login="zeus", password="s3cr%t:/@", schema="zeus", port=5433,
                           extra='{"sslmode": "require", "cursor": "dictcursor"}'))
    session.add(Connection(conn_id="zeus_file", conn_type="sqlite", host="/var/zeus/z.db"))
"""

COMPARE = """
import json, sys
from zeus_airflow.cli.store import _location_without_airflow

from zeus_airflow.airflow_db import cli_logical_dates

quick = {c: _location_without_airflow(c) for c in ("zeus_pg", "zeus_file", None)}
dates = cli_logical_dates([("some_dag", "manual__2026-01-01T00:00:00+00:00")])  # none there
untouched = not [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
from zeus_airflow.hooks.store import resolve_store_location

shown = lambda l: None if l is None else [l.url.render_as_string(False), l.source, l.conn_id]
print(json.dumps({
    "untouched": untouched,
    "dates": len(dates),
    "quick": {str(c): shown(l) for c, l in quick.items()},
    "airflow": {str(c): shown(resolve_store_location(c)) for c in quick},
    "missing": shown(_location_without_airflow("no_such_conn")),
}))
"""


@pytest.fixture
def home(airflow_db: Path, tmp_path: Path) -> dict[str, str]:
    """A migrated Airflow home of its own, with a Fernet key: Airflow encrypts passwords."""
    from cryptography.fernet import Fernet

    shutil.copy(PRISTINE_DB, tmp_path / "airflow.db")
    return {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "ZEUS_AIRFLOW_DB_URL": f"sqlite:///{tmp_path / 'zeus.db'}",
    }


def _python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_connection_reads_as_airflow_reads_it_without_airflow(home: dict[str, str]) -> None:
    _python(ADD, home)
    # As the api-server runs (its UI finds the store so); the lookup itself never asks.
    server = {**home, "_AIRFLOW_PROCESS_CONTEXT": "server"}
    found = json.loads(_python(COMPARE, server).splitlines()[-1])
    assert found["untouched"], "the lookup imported Airflow"
    assert found["dates"] == 0  # read from the dag_run table, without Airflow
    assert found["quick"] == found["airflow"]
    assert found["quick"]["zeus_pg"] == [
        "postgresql+psycopg://zeus:s3cr%25t%3A%2F%40@db.example:5433/zeus?sslmode=require",
        "connection",
        "zeus_pg",
    ]
    assert found["quick"]["None"][1] == "environment"  # no zeus_default: the chain goes on
    assert found["missing"] is None  # Airflow words the error for an id that is not there


def test_a_secrets_backend_is_left_to_airflow(home: dict[str, str]) -> None:
    from zeus_airflow import airflow_db

    env = {**home, "AIRFLOW__SECRETS__BACKEND": "some.Backend"}
    assert airflow_db.store_connection("zeus_pg", env) is airflow_db.ASK_AIRFLOW
    env = {**home, "AIRFLOW_CONN_ZEUS_PG": "postgres://h/db"}
    assert airflow_db.store_connection("zeus_pg", env) is airflow_db.ASK_AIRFLOW
    cmd = {k: v for k, v in home.items() if k != "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"}
    cmd["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"] = "echo sqlite://"
    assert airflow_db.metadata_url(cmd) is None

"""Airflow fixtures: a hermetic AIRFLOW_HOME on SQLite, and dag.test() helpers.

Airflow reads its configuration when first imported, so the environment is set when pytest
loads this module, before any test imports Airflow. The metadata DB is migrated once per
session, and only for tests that ask for ``airflow_db``.

``dag.test()`` runs a DAG's tasks in this process through the real task runner and an
in-process Execution API. It needs the DAG serialized in a DAG bundle: :func:`sync_dag` does
that for a DAG built inside a test. It does *not* block the ORM as a real (supervised) task process
does; one test per feature must go through the scheduler for that.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from zeus_airflow.airflow_db import rendered_fields as rendered_fields  # the task's Rendered tab
from zeus_airflow.core.devices.spec import resolve_traces_dir

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="zeus-test-airflow-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
REPO = Path(__file__).resolve().parents[1]
TRACES = resolve_traces_dir()
"""``$ZEUS_TRACES_DIR`` when set, else the traces shipped in the package; exported below so that
Airflow's task processes read the same."""

os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_HOME / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME}/airflow.db",
        "ZEUS_TRACES_DIR": str(TRACES),
    }
)
os.environ.pop("ZEUS_AIRFLOW_DB_URL", None)  # never a developer's own store


def _one_execution_api_app_per_process() -> None:
    """``dag.test()`` builds Airflow's in-process Execution API anew for every run, and with
    cadwyn 6 (what Airflow 3.2's constraints pin) its first request generates every versioned
    route again: 2-3 s of CPU a ``dag.test()``, against 0.3 s with cadwyn 7 (Airflow 3.3).
    Here one app serves every run in a process; each ``dag.test()`` still sets a fresh dag
    bag on it (``InProcessExecutionAPI.app``), and runs never overlap in one process."""
    from functools import cache
    from importlib.metadata import version

    if int(version("cadwyn").split(".")[0]) >= 7:
        return
    from airflow.api_fastapi.execution_api import app

    app.create_task_execution_api_app = cache(app.create_task_execution_api_app)


_one_execution_api_app_per_process()


PRISTINE_DB = AIRFLOW_HOME / "pristine-airflow.db"
"""A copy of the metadata DB just after migration, for tests that start Airflow's servers
on a home of their own (``airflow db migrate`` costs them 10 s more)."""


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated metadata DB (``airflow db migrate``) in the session's AIRFLOW_HOME."""
    from airflow.utils import db

    (AIRFLOW_HOME / "dags").mkdir(exist_ok=True)
    db.initdb()
    with sqlite3.connect(AIRFLOW_HOME / "airflow.db") as live, sqlite3.connect(PRISTINE_DB) as copy:
        live.backup(copy)  # consistent even with a journal beside the file
    return AIRFLOW_HOME


@pytest.fixture
def zeus_store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite store (schema created) for one test, which tasks find through
    ``$ZEUS_AIRFLOW_DB_URL``."""
    from zeus_airflow.core.store.sql import SQLStore

    url = f"sqlite:///{tmp_path / 'zeus.db'}"
    SQLStore(url, create_schema=True).engine.dispose()
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", url)
    return url


@pytest.fixture
def zeus_store_url_both(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh store for one test on SQLite, then on PostgreSQL (``fixtures_store``), which
    tasks find through ``$ZEUS_AIRFLOW_DB_URL``."""
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", migrated_url)
    return migrated_url


@pytest.fixture
def dag_test(airflow_db: Path) -> Iterator[None]:
    """For tests calling dag.test(): the task runner installs a SIGTERM handler in this
    process to call on_kill; put the previous one back afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


FAKE_ORIGINAL_LIMIT_MW = 250_000
"""The fake GPU's limit before a task runs: below its 300 W maximum, so that restoring the
maximum instead of the original (upstream Zeus's habit) would show."""


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """One fake A40 (100..300 W, at 250 W) that ``device="auto"`` finds, as it would find a
    real GPU through NVML: only the NVML module under :class:`NVMLGPUs` is replaced."""
    import functools

    from zeus_airflow.core.devices import nvml
    from zeus_airflow.testing import FakeGPUSpec, FakeNVML

    fake = FakeNVML(1, FakeGPUSpec(default_limit_mw=FAKE_ORIGINAL_LIMIT_MW))
    monkeypatch.setattr(nvml, "NVMLGPUs", functools.partial(nvml.NVMLGPUs, nvml=fake))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def sync_dag(dag: Any) -> Any:
    """Serialize a DAG built in a test into the default bundle, as the dag-processor would
    for a file in the DAGs folder; dag.test() refuses DAGs that are not serialized."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull, load_op_links=True)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag


def load_dag_file(path: Path, dag_id: str) -> Any:
    """The DAG ``dag_id`` of a DAG file, parsed as the dag-processor parses it."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path), load_op_links=True)
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def xcoms(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """Every XCom of one task instance, deserialized, by key."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(XComModel.key, XComModel.value).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id
            )
        ).all()
    return {key: XComModel.deserialize_value(_Row(value)) for key, value in rows}


def task_state(dag_run: Any, task_id: str) -> tuple[str, int]:
    """(state, try number) of a task instance of a finished dag.test() run."""
    ti = dag_run.get_task_instance(task_id)
    return str(ti.state), int(ti.try_number)


def daily(day: int) -> datetime:
    """Logical date of the ``day``-th daily run of the test DAGs."""
    import pendulum

    return pendulum.datetime(2026, 1, 1, tz="UTC").add(days=day)


class _Row:
    """The shape XComModel.deserialize_value expects."""

    def __init__(self, value: Any) -> None:
        self.value = value

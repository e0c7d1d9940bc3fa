"""The operator under the real scheduler and LocalExecutor, not ``dag.test()``.

``dag.test()`` runs tasks in the test process, where Airflow's ORM still works; a real task
process forbids it (notes §3-4). Here the scheduler catches a daily DAG up on its past days,
each task runs in its own supervised process with the ORM blocked, and the store it finds is
the embedded default under ``$AIRFLOW_HOME``. Every process is started here, on 127.0.0.1,
with bounded waits, and killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from fixtures_airflow import PRISTINE_DB, TRACES
from sqlalchemy import create_engine, select

from zeus_airflow.core.store.tables import trials

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
RUNS = 2
DEADLINE_S = 240.0

DAG_FILE = """
import pendulum
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

with DAG("zeus_scheduled", schedule="@daily", start_date=pendulum.parse("{start}"),
         catchup=True, max_active_runs=1):
    ZeusTrainOperator(task_id="train", train=replay_train, device="replay:v100:cifar100",
                      **replay_job_settings("v100", "cifar100"))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path) -> dict[str, str]:
    """A separate AIRFLOW_HOME for the servers: a freshly migrated metadata DB, and the DAG
    in its DAGs folder."""
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    shutil.copyfile(PRISTINE_DB, home / "airflow.db")
    # A cron schedule runs at each midnight from the start date up to now: RUNS runs.
    start = (datetime.now(UTC) - timedelta(days=RUNS - 1)).date().isoformat()
    (home / "dags" / "zeus_scheduled.py").write_text(DAG_FILE.format(start=start))
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "ZEUS_AIRFLOW_DB_URL", "PYTEST"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",  # LocalExecutor forks this many workers
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),  # one for every process
        "ZEUS_TRACES_DIR": str(TRACES),
    })
    return env


@pytest.fixture
def servers(airflow_env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(*command: str) -> None:
        log = (tmp_path / f"{command[0]}.log").open("w")
        started.append(subprocess.Popen([AIRFLOW, *command], env=airflow_env, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True))

    try:
        port = airflow_env["AIRFLOW__API__PORT"]
        start("api-server", "--host", "127.0.0.1", "--port", port)
        wait_until_up(f"http://127.0.0.1:{port}/api/v2/monitor/health", started)
        start("dag-processor")  # tasks queued before the API is up would fail to start
        start("scheduler", "--skip-serve-logs")
        yield started
    finally:
        stop(started)


def wait_until_up(url: str, started: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in started), "an Airflow process exited early"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{url} did not answer within {DEADLINE_S:.0f} s")


def stop(started: list[subprocess.Popen]) -> None:
    """SIGTERM what this test started and every descendant (task processes, executor
    workers), by pid; SIGKILL whatever is still there after 10 s."""
    family = [psutil.Process(p.pid) for p in started if p.poll() is None]
    for parent in list(family):
        family.extend(parent.children(recursive=True))
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=10)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def dag_runs(home: str) -> list[tuple[str, str]]:
    """(run_id, state) of the DAG's runs, read straight from the metadata DB."""
    path = Path(home) / "airflow.db"
    if not path.exists():
        return []
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ? "
                              "ORDER BY logical_date", ("zeus_scheduled",)).fetchall()
        except sqlite3.OperationalError:  # tables not there yet, or briefly locked
            return []


def wait_for_runs(home: str, started: list[subprocess.Popen]) -> list[tuple[str, str]]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        runs = dag_runs(home)
        if len(runs) == RUNS and all(state in ("success", "failed") for _, state in runs):
            return runs
        assert all(p.poll() is None for p in started), "an Airflow process exited early"
        time.sleep(2)
    raise AssertionError(f"runs not finished after {DEADLINE_S:.0f} s: {dag_runs(home)}")


def test_scheduled_runs_in_real_task_processes(airflow_env: dict[str, str],
                                               servers: list[subprocess.Popen],
                                               tmp_path: Path) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, servers)
    logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))

    assert [state for _, state in runs] == ["success"] * RUNS, logs[-4000:]
    store = create_engine(f"sqlite:///{home}/zeus_airflow.db")  # the embedded default
    with store.connect() as conn:
        rows = conn.execute(select(trials).order_by(trials.c.id)).all()
    assert [(r.run_id, r.status, r.try_number, r.measurement) for r in rows] == \
        [(run_id, "succeeded", 1, "replayed") for run_id, _ in runs]
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        pushed = dict(db.execute("SELECT key, json(value) FROM xcom WHERE run_id = ?",
                                 (runs[-1][0],)).fetchall())
    assert json.loads(pushed["batch_size"]) == rows[-1].batch_size
    assert json.loads(pushed["device_kind"]) == "replayed"
    task_logs = [path.read_text() for path in Path(home, "logs").rglob("*.log")]
    assert any("(replayed) (job zeus_scheduled.train" in text for text in task_logs)


"""The operator under the real scheduler and LocalExecutor, not ``dag.test()``.

``dag.test()`` runs tasks in the test process, where Airflow's ORM still works; Airflow 3
blocks it in a real task process. Here the scheduler catches a daily DAG up on its past days,
each task runs in its own supervised process with the ORM blocked, and the store it finds is
the embedded default under ``$AIRFLOW_HOME``. Every process is started here, on 127.0.0.1,
with bounded waits, and killed at the end.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB, TRACES
from scheduler_harness import daily_dag_home, running_servers, wait_for_runs
from sqlalchemy import create_engine, select

from zeus_airflow.core.store.tables import trials

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


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path) -> dict[str, str]:
    """A separate AIRFLOW_HOME for the servers: a freshly migrated metadata DB, and the DAG
    in its DAGs folder."""
    # A cron schedule runs at each midnight from the start date up to now: RUNS runs.
    return daily_dag_home(tmp_path / "airflow", PRISTINE_DB, "zeus_scheduled", DAG_FILE, RUNS,
                          extra={"ZEUS_TRACES_DIR": str(TRACES)})


@pytest.fixture
def servers(airflow_env: dict[str, str],
            tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    with running_servers(airflow_env, tmp_path, DEADLINE_S) as started:
        yield started


def test_scheduled_runs_in_real_task_processes(airflow_env: dict[str, str],
                                               servers: list[subprocess.Popen[bytes]],
                                               tmp_path: Path) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, "zeus_scheduled", RUNS, servers, DEADLINE_S)
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
    assert json.loads(pushed["measurement"]) == "replayed"
    task_logs = [path.read_text() for path in Path(home, "logs").rglob("*.log")]
    assert any("(replayed) (job zeus_scheduled.train" in text for text in task_logs)


"""The operator under the real scheduler and LocalExecutor, not ``dag.test()``; and
``@task.zeus`` there (Airflow finds it in the provider info).

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
from fixtures_store import stored_trials
from scheduler_harness import catching_up_home, running_servers, wait_for_runs

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


TASKFLOW_DAG_FILE = """
import pendulum
from airflow.sdk import dag, task

from zeus_airflow.operators.replay import replay_job_settings, replay_train


@dag(schedule="@daily", start_date=pendulum.parse("{start}"), catchup=True, max_active_runs=1)
def zeus_taskflow():
    @task.zeus(device="replay:v100:cifar100", **replay_job_settings("v100", "cifar100"))
    def train(run, day):
        return {{"day": day, "batch_size": run.batch_size, **replay_train(run)}}

    train(day="{{{{ ds }}}}")


zeus_taskflow()
"""
DAGS = {"zeus_scheduled": DAG_FILE, "zeus_taskflow": TASKFLOW_DAG_FILE}
"""The DAGs a test may ask its servers to run (``airflow_env``'s param; default the first)."""


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """A separate AIRFLOW_HOME for the servers: a freshly migrated metadata DB, and the DAG
    in its DAGs folder, RUNS days to catch up on."""
    dag_id = getattr(request, "param", "zeus_scheduled")
    return catching_up_home(
        tmp_path / "airflow",
        PRISTINE_DB,
        f"{dag_id}.py",
        DAGS[dag_id],
        RUNS,
        extra={"ZEUS_TRACES_DIR": str(TRACES)},
    )


@pytest.fixture
def servers(airflow_env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    with running_servers(airflow_env, tmp_path, DEADLINE_S) as started:
        yield started


def test_scheduled_runs_in_real_task_processes(
    airflow_env: dict[str, str], servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, "zeus_scheduled", RUNS, servers, DEADLINE_S)
    logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))

    assert [state for _, state in runs] == ["success"] * RUNS, logs[-4000:]
    rows = stored_trials(f"sqlite:///{home}/zeus_airflow.db")  # the embedded default
    assert [(r.run_id, r.status, r.try_number, r.measurement) for r in rows] == [
        (run_id, "succeeded", 1, "replayed") for run_id, _ in runs
    ]
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        pushed = dict(
            db.execute(
                "SELECT key, json(value) FROM xcom WHERE run_id = ?", (runs[-1][0],)
            ).fetchall()
        )
    assert json.loads(pushed["batch_size"]) == rows[-1].batch_size
    assert json.loads(pushed["measurement"]) == "replayed"
    task_logs = [path.read_text() for path in Path(home, "logs").rglob("*.log")]
    assert any("(replayed) (job zeus_scheduled.train" in text for text in task_logs)


@pytest.mark.parametrize("airflow_env", ["zeus_taskflow"], indirect=True)
def test_a_task_zeus_dag_trains_through_the_scheduler(
    airflow_env: dict[str, str], servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    runs = wait_for_runs(home, "zeus_taskflow", RUNS, servers, DEADLINE_S)
    logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))

    assert [state for _, state in runs] == ["success"] * RUNS, logs[-4000:]
    rows = stored_trials(f"sqlite:///{home}/zeus_airflow.db")
    assert [(r.job_id, r.run_id, r.status) for r in rows] == [
        ("zeus_taskflow.train", run_id, "succeeded") for run_id, _ in runs
    ]
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        run_id = runs[-1][0]
        pushed = dict(
            db.execute("SELECT key, json(value) FROM xcom WHERE run_id = ?", (run_id,)).fetchall()
        )
        ds = db.execute(
            "SELECT date(logical_date) FROM dag_run WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
    returned = json.loads(pushed["return_value"])
    assert returned["day"] == ds  # the DAG's templated argument reached the function
    assert returned["batch_size"] == json.loads(pushed["batch_size"]) == rows[-1].batch_size
    assert json.loads(pushed["measurement"]) == "replayed"

"""The carbon-aware start through the real scheduler, LocalExecutor and triggerer.

One LocalExecutor worker (parallelism 1). A first task publishes the day's forecast as a CSV
trace: a dirty grid now, a clean one from 40 s to 270 s ahead (wide, so that the 20 s run
stays inside it on a loaded machine; the scheduler has 40 s from the forecast to the training
task's plan, as it always had). The training task plans its start from it, defers with a
date-time trigger, and the one worker slot runs a lower-priority witness task meanwhile;
the triggerer wakes the training task at the chosen time and it trains then. A second DAG's
deadline has already passed: it trains at once, never deferring. Everything listens on
127.0.0.1, the scheduler and triggerer skip serving logs, and every process started here is
stopped at the end.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB, TRACES
from fixtures_store import stored_trials
from scheduler_harness import airflow_home, running_servers, wait_for_runs

from zeus_airflow.core.carbon.csvtrace import parse_time

DEADLINE_S = 420.0
CLEAN_FROM_S, CLEAN_UNTIL_S = 40, 270
DIRTY_G, CLEAN_G = 800.0, 100.0

DAG_FILE = """
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

TRACE = os.environ["ZEUS_TEST_TRACE"]
START = pendulum.parse("{start}")


def publish_forecast():
    # The day's forecast, every 10 s: dirty now, clean from {clean_from} s to {clean_until} s.
    now = datetime.now(UTC)
    rows = ["datetime,zone,carbon_intensity_g_per_kwh"]
    for i in range(-6, 60):
        clean = {clean_from} <= 10 * i < {clean_until}
        rows.append(f"{{(now + timedelta(seconds=10 * i)).isoformat()}},TEST,"
                    f"{{{clean_g} if clean else {dirty_g}}}")
    Path(TRACE).write_text("\\n".join(rows) + "\\n")


def witness():
    return datetime.now(UTC).isoformat()


with DAG("zeus_carbon_deferred", schedule="@once", start_date=START, catchup=True):
    forecast = PythonOperator(task_id="forecast", python_callable=publish_forecast,
                              priority_weight=100)
    train = ZeusTrainOperator(
        task_id="train", train=replay_train, device="replay:v100:cifar100",
        carbon_zone="TEST", carbon_source="csv:" + TRACE, start_deadline="10min",
        expected_duration="20s", priority_weight=50, **replay_job_settings("v100", "cifar100"))
    forecast >> train
    forecast >> PythonOperator(task_id="witness", python_callable=witness, priority_weight=1)

with DAG("zeus_carbon_late", schedule="@once", start_date=START, catchup=True):
    ZeusTrainOperator(
        task_id="train", train=replay_train, device="replay:v100:cifar100",
        carbon_zone="TEST", carbon_source="fixed:300", expected_duration="20s",
        start_deadline="{{{{ (data_interval_end - macros.timedelta(days=1)).isoformat() }}}}",
        **replay_job_settings("v100", "cifar100"))
"""


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path) -> dict[str, str]:
    home = tmp_path / "airflow"
    trace = tmp_path / "forecast.csv"
    env = airflow_home(
        home,
        PRISTINE_DB,
        parallelism=1,
        extra={"ZEUS_TRACES_DIR": str(TRACES), "ZEUS_TEST_TRACE": str(trace)},
    )
    start = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    (home / "dags" / "zeus_carbon.py").write_text(
        DAG_FILE.format(
            start=start,
            clean_from=CLEAN_FROM_S,
            clean_until=CLEAN_UNTIL_S,
            clean_g=CLEAN_G,
            dirty_g=DIRTY_G,
        )
    )
    return env


@pytest.fixture
def servers(airflow_env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    with running_servers(airflow_env, tmp_path, DEADLINE_S, triggerer=True) as started:
        yield started


def _task_times(home: str, dag_id: str) -> dict[str, tuple[datetime, datetime, int]]:
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, start_date, end_date, try_number FROM task_instance WHERE dag_id = ?",
            (dag_id,),
        ).fetchall()
    return {task: (parse_time(start), parse_time(end), tries) for task, start, end, tries in rows}


def _xcoms(home: str, dag_id: str, task_id: str) -> dict[str, object]:
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        return {
            key: json.loads(value)
            for key, value in db.execute(
                "SELECT key, json(value) FROM xcom WHERE dag_id = ? AND task_id = ?",
                (dag_id, task_id),
            ).fetchall()
        }


def test_the_task_defers_frees_its_slot_and_trains_at_the_chosen_time(
    airflow_env: dict[str, str], servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    deferred = wait_for_runs(home, "zeus_carbon_deferred", 1, servers, DEADLINE_S)
    late = wait_for_runs(home, "zeus_carbon_late", 1, servers, DEADLINE_S)
    server_logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert [s for _, s in deferred + late] == ["success", "success"], server_logs[-4000:]

    rows = {r.dag_id: r for r in stored_trials(f"sqlite:///{home}/zeus_airflow.db")}
    task_logs = {path: path.read_text() for path in Path(home, "logs").rglob("*.log")}

    # The deferred run: planned from the forecast, woken at the start of the clean window.
    pushed = _xcoms(home, "zeus_carbon_deferred", "train")
    times = _task_times(home, "zeus_carbon_deferred")
    forecast_done = times["forecast"][1]
    delay_s = float(pushed["start_delay_s"])  # type: ignore[arg-type]
    assert 0 < delay_s <= CLEAN_FROM_S, pushed
    trained_at = rows["zeus_carbon_deferred"].started_at.replace(tzinfo=UTC)
    planned_at = forecast_done  # the plan is made after the forecast task ends
    assert trained_at >= planned_at + timedelta(seconds=delay_s - 1)
    assert "cut emissions by 88 %" in str(pushed["start_reason"])
    assert pushed["carbon_intensity_g_per_kwh"] == pytest.approx(CLEAN_G)
    assert pushed["carbon_provenance"] == "file"
    row = rows["zeus_carbon_deferred"]
    assert pushed["emissions_g"] == pytest.approx(
        (row.energy_j + row.setup_energy_j) / 3.6e6 * CLEAN_G
    )
    assert (row.status, row.try_number, times["train"][2]) == ("succeeded", 1, 1)
    # The one worker slot ran the witness while the training task waited in the triggerer.
    witness_start, witness_end, _ = times["witness"]
    assert times["train"][0] < witness_start and witness_end < trained_at
    assert any(
        "deferring the start until" in text and "starting at the chosen time" in text
        for text in task_logs.values()
    )
    # The triggerer ran the date-time trigger and fired it (its log sits beside the task's).
    assert any(
        "yielding event" in text
        for path, text in task_logs.items()
        if ".trigger." in path.name and "dag_id=zeus_carbon_deferred" in str(path)
    )

    # The late run: its deadline had passed, so it trained at once and never deferred.
    late_pushed = _xcoms(home, "zeus_carbon_late", "train")
    assert late_pushed["start_delay_s"] == 0.0
    assert "has already passed" in str(late_pushed["start_reason"])
    assert late_pushed["carbon_provenance"] == "fixed"
    assert late_pushed["carbon_intensity_g_per_kwh"] == pytest.approx(300.0)
    late_times = _task_times(home, "zeus_carbon_late")["train"]
    late_trained = rows["zeus_carbon_late"].started_at.replace(tzinfo=UTC)
    assert late_trained - late_times[0] < timedelta(seconds=30)
    late_logs = [t for path, t in task_logs.items() if "dag_id=zeus_carbon_late" in str(path)]
    assert any("has already passed" in t for t in late_logs)
    assert not any("deferring the start" in t for t in late_logs)

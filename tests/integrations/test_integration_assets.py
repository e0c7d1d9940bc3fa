"""The example DAG pair through the real scheduler: ``model_retrain_asset``'s Zeus task
updates the model Asset, its event carries the run's figures, and ``model_deploy_on_asset``,
scheduled on the Asset, reads them from ``triggering_asset_events``. Airflow's OpenLineage
provider is configured too (a file transport): the task's COMPLETE event, sent from a real
task process, carries the same figures in its ``zeus`` run facet. Both equal the store's."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB, REPO, TRACES
from fixtures_integrations import assert_equals_store, run_dags
from scheduler_harness import airflow_home, running_servers, wait_for_runs

from zeus_airflow.integrations.openlineage import FACET_NAME, SCHEMA_URL
from zeus_airflow.integrations.published import cost_line

DEADLINE_S = 240.0
PAIR = ("model_retrain_asset", "model_deploy_on_asset")


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path) -> dict[str, str]:
    home = tmp_path / "airflow"
    env = airflow_home(
        home,
        PRISTINE_DB,
        extra={
            "ZEUS_TRACES_DIR": str(TRACES),
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(tmp_path / "ol.jsonl"), "append": True}
            ),
        },
    )
    for dag_id in PAIR:
        shutil.copy(REPO / "dags" / f"{dag_id}.py", home / "dags")
    return env


@pytest.fixture
def servers(airflow_env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    with running_servers(airflow_env, tmp_path, DEADLINE_S) as started:
        yield started


def test_the_deploy_dag_reads_the_retrained_model_s_figures(
    airflow_env: dict[str, str], servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home = Path(airflow_env["AIRFLOW_HOME"])
    retrained = wait_for_runs(home, PAIR[0], 1, servers, DEADLINE_S)
    deployed = wait_for_runs(home, PAIR[1], 1, servers, DEADLINE_S)
    logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert [s for _, s in retrained] == ["success"] and [s for _, s in deployed] == ["success"], (
        logs[-4000:]
    )
    run_id = retrained[0][0]
    with sqlite3.connect(home / "airflow.db") as db:
        (extra,) = db.execute("SELECT extra FROM asset_event").fetchone()
        (read,) = db.execute(
            "SELECT json(value) FROM xcom WHERE dag_id = ? AND key = 'return_value'", (PAIR[1],)
        ).fetchone()
    published = json.loads(extra)["zeus"]
    assert json.loads(read) == published  # what the deploy DAG read is the event's
    store_url = f"sqlite:///{home}/zeus_airflow.db"
    run = assert_equals_store(published, store_url, run_id)
    assert published["saved_energy_j"] is not None  # its first run is b0's: Default's estimate
    assert published["measurement"] == "replayed" and published["carbon_provenance"] == "fixed"
    assert run.emissions_g is not None and run.emissions_g > 0
    task_logs = "\n".join(p.read_text() for p in (home / "logs").rglob("*.log"))
    assert cost_line(published) in task_logs and "(replayed)" in cost_line(published)

    events = [json.loads(line) for line in (tmp_path / "ol.jsonl").read_text().splitlines()]
    (complete,) = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{PAIR[0]}.train"
    ]
    facet = complete["run"]["facets"][FACET_NAME]
    assert facet.pop("_schemaURL") == SCHEMA_URL and facet.pop("_producer")
    assert facet == {name: value for name, value in published.items() if value is not None}


def test_a_train_function_s_own_zeus_extra_is_kept_and_the_log_says_where_the_record_went(
    tmp_path: Path, airflow_db: Path
) -> None:
    """Issue 48: through real Airflow (``dag.test()``), a train function that writes
    ``extra["zeus"]`` on its outlet's event keeps it; Zeus's record goes under
    ``extra["zeus_airflow"]`` and the task log says so."""
    home = tmp_path / "airflow"
    lineage = {"type": "file", "log_file_path": str(tmp_path / "ol.jsonl")}
    ran = run_dags(home, lineage, "ol_user_extra")
    assert ran["ol_user_extra"][1] == "success"
    with sqlite3.connect(home / "airflow.db") as db:
        (extra,) = db.execute("SELECT extra FROM asset_event").fetchone()
    extra = json.loads(extra)
    assert extra["zeus"] == {"owner": "the user"}
    assert_equals_store(extra["zeus_airflow"], f"sqlite:///{home}/zeus.db", ran["ol_user_extra"][0])
    assert (
        'already has extra["zeus"], written by the train function: it is kept, and the run\'s '
        'figures are under extra["zeus_airflow"]'
    ) in (home / "output.log").read_text()

"""The example DAGs in ``dags/``: they parse as the dag-processor parses them, and a run of
each goes through real Airflow (``dag.test()``) with its figures labelled honestly."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures_airflow import (
    REPO,
    daily,
    load_dag_file,
    rendered_fields,
    sync_dag,
    task_state,
    xcoms,
)

pytestmark = pytest.mark.usefixtures("dag_test")
DAGS = REPO / "dags"


def test_the_dags_folder_parses_without_errors(airflow_db: Any) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for dag_id in ("zeus_replay_daily", "hourly_retrain"):
        dag = bag.get_dag(dag_id)
        assert dag is not None and dag.doc_md and "## Run it" in dag.doc_md
        assert dag.get_task("train").__class__.__name__ == "ZeusTrainOperator"


@pytest.mark.parametrize(("dag_id", "kind"), [
    ("zeus_replay_daily", "replayed"),
    ("hourly_retrain", "simulated"),
])
def test_a_run_of_each_dag_succeeds_and_labels_its_figures(zeus_store_url: str, dag_id: str,
                                                           kind: str) -> None:
    dag = sync_dag(load_dag_file(DAGS / f"{dag_id}.py", dag_id))
    dag_run = dag.test(logical_date=daily(0).add(hours=5))

    assert task_state(dag_run, "train") == ("success", 1)
    pushed = xcoms(dag_id, dag_run.run_id, "train")
    assert pushed["device_kind"] == kind and pushed["reached_target"] is True
    assert pushed["energy_j"] > 0 and pushed["time_s"] > 0
    summary = rendered_fields(dag_id, dag_run.run_id, "train")["zeus_summary"]
    assert summary.endswith(f"({kind})") and f"b={pushed['batch_size']}" in summary


def test_the_hourly_model_really_learns(zeus_store_url: str) -> None:
    dag = sync_dag(load_dag_file(DAGS / "hourly_retrain.py", "hourly_retrain"))
    dag_run = dag.test(logical_date=daily(1))

    pushed = xcoms("hourly_retrain", dag_run.run_id, "train")
    assert pushed["return_value"]["validation_accuracy"] >= 0.885
    assert 1 <= pushed["epochs"] <= 10

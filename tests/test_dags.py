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

from zeus_airflow import ZeusTrainOperator

pytestmark = pytest.mark.usefixtures("dag_test")
DAGS = REPO / "dags"


def test_the_dags_folder_parses_without_errors(airflow_db: Any) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for dag_id in (
        "zeus_replay_daily",
        "hourly_retrain",
        "regional_retrain",
        "hf_finetune",
        "lightning_retrain",
        "ddp_retrain",
        "taskflow_retrain",
        "model_retrain_asset",
    ):
        dag = bag.get_dag(dag_id)
        assert dag is not None and dag.doc_md and "## Run it" in dag.doc_md
        task = dag.get_task("train")
        assert (
            isinstance(task, ZeusTrainOperator)
            or task.operator_class.__name__ == "ZeusTrainOperator"
        )  # a mapped task


@pytest.mark.parametrize(
    ("dag_id", "kind"),
    [
        ("zeus_replay_daily", "replayed"),
        ("taskflow_retrain", "replayed"),
        ("model_retrain_asset", "replayed"),
        ("hourly_retrain", "simulated"),
        ("hf_finetune", "simulated"),
        ("lightning_retrain", "simulated"),
        ("ddp_retrain", "simulated"),
    ],
)
def test_a_run_of_each_dag_succeeds_and_labels_its_figures(
    zeus_store_url: str, dag_id: str, kind: str
) -> None:
    dag = sync_dag(load_dag_file(DAGS / f"{dag_id}.py", dag_id))
    dag_run = dag.test(logical_date=daily(0).add(hours=5))

    assert task_state(dag_run, "train") == ("success", 1)
    pushed = xcoms(dag_id, dag_run.run_id, "train")
    assert pushed["measurement"] == kind and pushed["reached_target"] is True
    assert pushed["energy_j"] > 0 and pushed["time_s"] > 0
    summary = rendered_fields(dag_id, dag_run.run_id, "train")["zeus_summary"]
    assert summary.endswith(f"({kind})") and f"b={pushed['batch_size']}" in summary


def test_the_hourly_model_really_learns(zeus_store_url: str) -> None:
    dag = sync_dag(load_dag_file(DAGS / "hourly_retrain.py", "hourly_retrain"))
    dag_run = dag.test(logical_date=daily(1))

    pushed = xcoms("hourly_retrain", dag_run.run_id, "train")
    assert pushed["return_value"]["validation_accuracy"] >= 0.885
    assert 1 <= pushed["epochs"] <= 10


def test_the_regional_dag_trains_a_job_per_region(zeus_store_url: str) -> None:
    from fixtures_store import stored_trials

    dag = sync_dag(load_dag_file(DAGS / "regional_retrain.py", "regional_retrain"))
    dag_run = dag.test(logical_date=daily(0))

    instances = sorted(dag_run.get_task_instances(), key=lambda ti: ti.map_index)
    assert [(ti.map_index, ti.rendered_map_index, str(ti.state)) for ti in instances] == [
        (0, "eu", "success"),
        (1, "us", "success"),
        (2, "asia", "success"),
    ]
    stored = stored_trials(zeus_store_url)
    fed = {(t.job_id, t.map_index, t.measurement) for t in stored}
    reached = [t.reached_target for t in stored if t.status == "succeeded"]
    assert fed == {
        ("regional_retrain.train[eu]", 0, "simulated"),
        ("regional_retrain.train[us]", 1, "simulated"),
        ("regional_retrain.train[asia]", 2, "simulated"),
    }
    assert len(reached) == 3 and all(reached)  # each region's model reached the target


def test_task_zeus_takes_the_train_function_s_arguments_by_keyword(airflow_db: Any) -> None:
    from airflow.sdk import dag, task

    from zeus_airflow.core.common.config import ConfigError
    from zeus_airflow.operators.replay import replay_job_settings

    settings = replay_job_settings("v100", "cifar100")

    @dag(schedule=None)
    def keywords() -> None:
        @task.zeus(device="replay:v100:cifar100", **settings)
        def train(run: Any, region: str) -> None: ...

        train(region="eu")

    made = keywords().get_task("train")
    assert isinstance(made, ZeusTrainOperator) and made.train_kwargs == {"region": "eu"}

    @dag(schedule=None)
    def positional() -> None:
        @task.zeus(device="replay:v100:cifar100", **settings)
        def train(run: Any, region: str) -> None: ...

        train("eu")

    with pytest.raises(ConfigError, match="keyword arguments only"):
        positional()

"""Mapped ZeusTrainOperators (``.partial(...).expand(...)``) through real Airflow 3.3
(``dag.test()``): each instance feeds a job of its own unless the DAG names one."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures_airflow import daily, rendered_fields, sync_dag
from fixtures_store import stored_trials
from sqlalchemy import select

from zeus_airflow.core.common.naming import default_job_id, map_label
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.operators.replay import replay_job_settings, replay_train

pytestmark = pytest.mark.usefixtures("dag_test")
REGIONS = ["eu", "us"]


def train(run: TrainingRun, region: str) -> dict[str, float]:
    return replay_train(run)


def mapped_dag(dag_id: str, **partial_args: Any) -> Any:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator.partial(
            task_id="train",
            train=train,
            heartbeat_s=5,
            device="replay:v100:cifar100",
            **replay_job_settings("v100", "cifar100"),
            **partial_args,
        ).expand(train_kwargs=[{"region": r} for r in REGIONS])
    return sync_dag(dag)


def jobs_by_map_index(url: str) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for trial in stored_trials(url):
        found.setdefault(trial.map_index, set()).add(trial.job_id)
    return found


def job_links(dag_id: str, run_id: str) -> dict[int, str]:
    """The "Zeus job" button of each mapped instance, by map index."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.key == "_link_ZeusJobLink",
            )
        ).all()
        return {row.map_index: XComModel.deserialize_value(row) for row in rows}


def instance_states(dag_run: Any) -> list[str]:
    return [
        str(ti.state) for ti in sorted(dag_run.get_task_instances(), key=lambda ti: ti.map_index)
    ]


def test_the_default_job_id_names_the_instance() -> None:
    assert default_job_id("d", "t") == "d.t"
    assert default_job_id("d", "t", map_label(2)) == "d.t[2]"
    assert default_job_id("d", "t", map_label(2, " eu\n")) == "d.t[eu]"
    assert map_label(2, "") == "2"  # an empty rendering is no name
    assert map_label(-1, "eu") is None and map_label(None, "eu") is None


def test_each_mapped_instance_feeds_its_own_job_named_by_its_index(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = mapped_dag("mapped_plain")
    runs = [dag.test(logical_date=daily(day)) for day in range(2)]

    assert [instance_states(r) for r in runs] == [["success", "success"]] * 2
    assert jobs_by_map_index(zeus_store_url) == {
        0: {"mapped_plain.train[0]"},
        1: {"mapped_plain.train[1]"},
    }
    assert "share one job" not in capfd.readouterr().out


def test_the_map_index_template_names_the_jobs_as_the_ui_names_the_instances(
    zeus_store_url: str,
) -> None:
    dag = mapped_dag("mapped_named", map_index_template="{{ task.train_kwargs['region'] }}")
    dag_run = dag.test(logical_date=daily(0))

    assert instance_states(dag_run) == ["success", "success"]
    assert jobs_by_map_index(zeus_store_url) == {
        0: {"mapped_named.train[eu]"},
        1: {"mapped_named.train[us]"},
    }
    assert sorted(ti.rendered_map_index for ti in dag_run.get_task_instances()) == REGIONS
    shown = rendered_fields("mapped_named", dag_run.run_id, "train")
    assert shown["job_id"] in {"mapped_named.train[eu]", "mapped_named.train[us]"}
    assert job_links("mapped_named", dag_run.run_id) == {
        0: "/zeus/jobs/mapped_named.train%5Beu%5D",
        1: "/zeus/jobs/mapped_named.train%5Bus%5D",
    }


def test_a_template_that_needs_execute_falls_back_to_the_index(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # set_in_execute only exists once a task has put it in its context: too late to name
    dag = mapped_dag("mapped_late", map_index_template="{{ set_in_execute }}")
    dag_run = dag.test(logical_date=daily(0))

    assert jobs_by_map_index(zeus_store_url) == {
        0: {"mapped_late.train[0]"},
        1: {"mapped_late.train[1]"},
    }
    assert "cannot be rendered before training" in capfd.readouterr().out
    assert dag_run.state == "failed"  # Airflow's own rendering after execute fails the task


def test_an_explicit_job_id_templated_per_instance_wins(zeus_store_url: str) -> None:
    dag = mapped_dag("mapped_explicit", job_id="{{ dag.dag_id }}.{{ task.train_kwargs['region'] }}")
    dag.test(logical_date=daily(0))

    assert jobs_by_map_index(zeus_store_url) == {
        0: {"mapped_explicit.eu"},
        1: {"mapped_explicit.us"},
    }


@pytest.mark.parametrize("job_id", ["pooled", "{{ dag.dag_id }}-pooled"])
def test_one_job_id_for_every_instance_is_shared_with_one_warning(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str], job_id: str
) -> None:
    """Likely a mistake: said once in the job's life (by the second instance to feed it),
    not by every instance of every run."""
    dag = mapped_dag("mapped_shared", job_id=job_id)
    runs = [dag.test(logical_date=daily(day)) for day in range(2)]

    assert [instance_states(r) for r in runs] == [["success", "success"]] * 2
    shared = job_id.replace("{{ dag.dag_id }}", "mapped_shared")
    assert jobs_by_map_index(zeus_store_url) == {0: {shared}, 1: {shared}}
    warnings = [line for line in capfd.readouterr().out.splitlines() if "share one job" in line]
    assert len(warnings) == 1 and repr(shared) in warnings[0]
    assert "shared_job=True" in warnings[0] and len(warnings[0]) < 400


def test_sharing_said_to_be_meant_warns_nothing(
    zeus_store_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = mapped_dag("mapped_meant", job_id="pooled_meant", shared_job=True)
    run = dag.test(logical_date=daily(0))

    assert instance_states(run) == ["success", "success"]
    assert jobs_by_map_index(zeus_store_url) == {0: {"pooled_meant"}, 1: {"pooled_meant"}}
    assert "share one job" not in capfd.readouterr().out

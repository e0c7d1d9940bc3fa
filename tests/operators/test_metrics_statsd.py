"""The operator's run metrics, read back from a StatsD listener on 127.0.0.1.

Airflow's ``[metrics]`` section is set for this process (``statsd_on``, host, port) and the
Task SDK's metrics client initialised from it, as the task runner does at a task process's
start; the DAG runs through ``dag.test()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fixtures_airflow import daily, sync_dag, xcoms
from statsd_listener import StatsDListener

from zeus_airflow.operators.metrics import FIGURES
from zeus_airflow.operators.replay import replay_job_settings, replay_train

pytestmark = pytest.mark.usefixtures("dag_test")


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsDListener]:
    from zeus_airflow.airflow_compat import initialize_stats

    listener = StatsDListener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    initialize_stats()
    try:
        yield listener
    finally:
        listener.close()
        monkeypatch.undo()
        initialize_stats()


def run_replay_dag(dag_id: str) -> tuple[Any, dict[str, Any]]:
    from airflow.sdk import DAG

    from zeus_airflow import ZeusTrainOperator

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        ZeusTrainOperator(
            task_id="train",
            train=replay_train,
            device="replay:v100:cifar100",
            heartbeat_s=5,
            **replay_job_settings("v100", "cifar100"),
        )
    dag_run = sync_dag(dag).test(logical_date=daily(0))
    return dag_run, xcoms(dag_id, dag_run.run_id, "train")


def test_a_run_sends_its_figures_to_statsd_named_by_dag_task_and_source(
    zeus_store_url: str, statsd: StatsDListener
) -> None:
    _, pushed = run_replay_dag("metered.daily")

    suffix = ".metered__daily.train.replayed"
    gauges = statsd.wait_for("airflow.zeus.run.", 2 * len(FIGURES))
    for figure in ("energy_j", "time_s", "cost", "batch_size", "power_limit_w"):
        assert gauges[f"airflow.zeus.run.{figure}{suffix}"] == pytest.approx(pushed[figure])
        assert gauges[f"airflow.zeus.run.{figure}"] == pytest.approx(pushed[figure])
    assert gauges[f"airflow.zeus.run.reached_target{suffix}"] == 1.0
    assert set(gauges) == {f"airflow.zeus.run.{f}{s}" for f in FIGURES for s in ("", suffix)}


def test_with_influxdb_tags_the_gauges_carry_dag_task_and_job(
    zeus_store_url: str, statsd: StatsDListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zeus_airflow.airflow_compat import initialize_stats

    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    initialize_stats()
    _, pushed = run_replay_dag("metered_tags")

    gauges = statsd.wait_for("airflow.zeus.run.", len(FIGURES))
    tags = ",dag_id=metered_tags,task_id=train,zeus_job=metered_tags.train,measurement=replayed"
    assert f"airflow.zeus.run.energy_j{tags}" in gauges, sorted(gauges)
    assert gauges[f"airflow.zeus.run.energy_j{tags}"] == pytest.approx(pushed["energy_j"])
    assert gauges[f"airflow.zeus.run.power_limit_w{tags}"] == pushed["power_limit_w"]
    assert len(gauges) == len(FIGURES)  # tagged only: no name-encoded copies

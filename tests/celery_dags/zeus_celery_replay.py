"""The DAG tests/operators/test_celery_topology.py runs on a real Celery worker: a replayed paper
workload through ZeusTrainOperator, each run waiting at a barrier until the others train too."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG
from celery_barrier import DAG_ID, wait_for_other_runs

from zeus_airflow import TrainingRun, ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train


def overlapping_replay(run: TrainingRun, run_id: str) -> dict[str, float]:
    wait_for_other_runs(run_id)
    return replay_train(run)


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=2,
):
    ZeusTrainOperator(
        task_id="train",
        train=overlapping_replay,
        train_kwargs={"run_id": "{{ run_id }}"},
        device="replay:v100:cifar100",
        max_tries=1,
        seed=7,
        **replay_job_settings("v100", "cifar100"),
    )

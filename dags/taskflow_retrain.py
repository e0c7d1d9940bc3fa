"""
# taskflow_retrain: the TaskFlow way in, `@task.zeus`

The same replayed workload as `zeus_replay_daily` (ResNet on CIFAR-100, **replayed** from the
Zeus paper's V100 traces on a virtual clock: the energy and time are the traces', not a
measurement), written as a TaskFlow task. `@task.zeus(...)` takes the operator's parameters
(`docs/operator.md`); the decorated function is the train function, its first parameter the
run; the arguments the DAG calls it with (by keyword, templates and XComs welcome) reach it
on every run, after the run.

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags \\
       AIRFLOW__CORE__LOAD_EXAMPLES=False
airflow db migrate
airflow dags test taskflow_retrain 2025-01-01
zeus-airflow runs --job taskflow_retrain.train
```
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from zeus_airflow import TrainingRun
from zeus_airflow.operators.replay import replay_job_settings, replay_train


@dag(
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
)
def taskflow_retrain() -> None:
    @task.zeus(device="replay:v100:cifar100", **replay_job_settings("v100", "cifar100"))
    def train(run: TrainingRun, day: str) -> dict[str, object]:
        """One try at ``run.batch_size`` on the day's data (replayed)."""
        figures = replay_train(run)
        return {"day": day, **figures}

    train(day="{{ ds }}")


taskflow_retrain()

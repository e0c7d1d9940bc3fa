"""
# model_retrain_asset: a daily retraining that publishes the model as an Airflow Asset

Every day Zeus retrains ResNet on CIFAR-100 (**replayed** from the Zeus paper's V100 traces:
the energy and time are the traces', not a measurement, and every figure says `replayed`),
with its emissions accounted at a fixed 380 gCO2e/kWh in zone `DE` (a real deployment uses
Electricity Maps: docs/carbon.md). The task's outlet is the model, the Asset
`model://zeus-examples/cifar100-resnet`: each run's asset event carries the run's figures in
its `extra["zeus"]` (energy, time, batch size, power limit, gCO2e and their provenance, the
savings against Default, `measurement`), and `model_deploy_on_asset`, scheduled on that
Asset, prints what each new model cost (docs/integrations.md).

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags \\
       AIRFLOW__CORE__LOAD_EXAMPLES=False
airflow db migrate
airflow standalone          # or the scheduler, dag-processor and api-server: the asset event
                            # of each retraining starts model_deploy_on_asset
```
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

MODEL = Asset("model://zeus-examples/cifar100-resnet")

with DAG(
    dag_id="model_retrain_asset",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "assets", "replayed"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=replay_train,
        device="replay:v100:cifar100",
        **replay_job_settings("v100", "cifar100"),
        carbon_zone="DE",
        carbon_source="fixed:380",
        outlets=[MODEL],  # the asset event's extra["zeus"]: the run's figures
    )

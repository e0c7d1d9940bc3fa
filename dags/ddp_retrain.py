"""
# ddp_retrain: multi-process (DDP) training on one node, through Zeus

The training runs as two processes, torchrun-style: `DistributedTraining` starts one rank
per process with torchrun's environment, every rank runs `train_rank` from
`ddp_classifier.py` (`DistributedDataParallel`, gloo on this CPU), and rank 0 reports its
steps and metrics back to the task over a private Unix socket. The task alone holds the GPUs:
it sets the power limit once for all of them, measures the whole group's energy, and tells
every rank when to stop. `batch_sizes` are **global** batch sizes; each rank's DataLoader
takes `run.per_rank_batch_size` (docs/frameworks.md, "Several processes").

On a GPU node, drop `nproc_per_node` (one rank per GPU the task sees) and `device=` (the
default `auto` measures the real GPUs). Here the GPU is **simulated** (`simulated:v100`):
every figure is labelled simulated. Needs `pip install 'zeus-airflow[examples]'`.

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags
airflow db migrate
airflow dags test ddp_retrain 2025-01-01
zeus-airflow runs --job ddp_retrain.train
```
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.integrations.distributed import DistributedTraining

with DAG(
    dag_id="ddp_retrain",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "example", "simulated", "ddp"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=DistributedTraining(
            f"{Path(__file__).with_name('ddp_classifier.py')}:train_rank", nproc_per_node=2
        ),
        train_kwargs={"day": "{{ ds }}"},
        batch_sizes=[32, 64, 128, 256],
        default_batch_size=128,
        target_metric=0.9,
        max_epochs=10,
        device="simulated:v100",
        warmup_steps=2,
        profile_steps=4,
    )

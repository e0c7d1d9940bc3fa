"""
# regional_retrain: one retraining task mapped over regions, a Zeus job per region

Every day a small classifier (an MLP in PyTorch, on the CPU) is retrained from scratch for
each of three regions on that region's data of the day: 8 classes of Gaussian clusters in 32
dimensions, whose centres differ by region. The training task is mapped over the regions
with `.partial(...).expand(...)`, and `map_index_template` names each instance by its region
in Airflow's UI. PyTorch comes with `pip install 'zeus-airflow[examples]'`.

Each mapped instance feeds a **Zeus job of its own**: `regional_retrain.train[eu]`,
`regional_retrain.train[us]` and `regional_retrain.train[asia]` (`<dag_id>.<task_id>[<label>]`,
the label being the rendered `map_index_template`, else the map index). Regions converge at
different batch sizes, so one bandit fed by all three would learn nothing true of any. See
"Dynamic task mapping" in `docs/operator.md`.

As in `hourly_retrain`, the machine has no GPU: the run uses a **simulated** V100
(`device="simulated:v100"`): real training steps timed by the wall clock, power and the
slowdown under each limit from the V100's measured power curve in the Zeus traces.

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags \\
       AIRFLOW__CORE__LOAD_EXAMPLES=False
airflow db migrate
airflow dags test regional_retrain 2025-01-01   # three regions, a few seconds each
zeus-airflow jobs                               # one job per region
zeus-airflow runs --job 'regional_retrain.train[eu]'
```
"""

from __future__ import annotations

import zlib
from typing import Any

import pendulum
from airflow.sdk import DAG

from zeus_airflow import TrainingRun, ZeusTrainOperator

REGIONS = ("eu", "us", "asia")
SAMPLES = {"train_samples": 4096, "validation_samples": 1024}


def region_seed(region: str) -> int:
    """Stable across processes, unlike hash(): draws the region's cluster centres."""
    return zlib.crc32(region.encode())


def train(run: TrainingRun, region: str, day: str) -> dict[str, Any]:
    """Train an MLP from scratch for ``region`` at ``run.batch_size`` on the data of ``day``
    (a timestamp): 8 classes of clusters in 32 dimensions whose centres are the region's
    (``zeus_airflow.examples.classifier.Task``)."""
    import torch

    from zeus_airflow.examples import classifier

    torch.set_num_threads(1)  # the regions may train side by side on one machine
    task = classifier.Task(centres_seed=region_seed(region), spread=0.6, **SAMPLES)
    accuracy = task.retrain(run, seed=int(day) + region_seed(region))
    return {"region": region, "validation_accuracy": accuracy}


with DAG(
    dag_id="regional_retrain",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "example", "simulated", "mapped"],
    doc_md=__doc__,
):
    ZeusTrainOperator.partial(
        task_id="train",
        train=train,
        # Names each instance in Airflow's UI and, with job_id left unset, its Zeus job.
        map_index_template="{{ task.train_kwargs['region'] }}",
        batch_sizes=[16, 32, 64, 128, 256],
        default_batch_size=128,
        target_metric=0.85,
        max_epochs=10,
        device="simulated:v100",
        warmup_steps=3,  # an epoch is 16 to 256 steps: profile in short slices
        profile_steps=10,
    ).expand(
        train_kwargs=[
            {"region": r, "day": "{{ data_interval_start.int_timestamp }}"} for r in REGIONS
        ]
    )

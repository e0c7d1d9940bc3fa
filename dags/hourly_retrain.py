"""
# hourly_retrain: a real PyTorch model, retrained every hour on fresh data, through Zeus

Every hour a small classifier (an MLP in PyTorch, on the CPU) is trained from scratch on
data generated for that hour: 8 classes of Gaussian clusters in 32 dimensions, a new sample
each hour. A run reaches the target when validation accuracy reaches 0.885. Batch sizes
trade off as they do on a GPU: small ones need fewer epochs but many more steps, large ones
the opposite (2-3 epochs at batch size 16, 4-7 at 128, 7 to more than 10 at 512, varying
with the hour's sample).

The machine has no GPU, so the run uses a **simulated** GPU (`device="simulated:v100"`): the
training steps are real and timed by the wall clock, while the power drawn and the slowdown
under each power limit follow the V100's measured power curve for cifar100 in the Zeus traces
(see `zeus_airflow/core/devices/simulated.py`). Energy and time are labelled **simulated**
in the logs, the XComs (`measurement`) and the summary. On a GPU machine, move the model and
batches to CUDA and drop `device=` (the default `auto` measures the real GPUs).
PyTorch comes with `pip install 'zeus-airflow[examples]'` (the base install has none).

## Run it

```bash
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags \\
       AIRFLOW__CORE__LOAD_EXAMPLES=False
airflow db migrate
airflow dags test hourly_retrain 2025-01-01T05:00:00+00:00   # one hour, a few seconds
zeus-airflow runs --job hourly_retrain.train
```
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from zeus_airflow import TrainingRun, ZeusTrainOperator


def train(run: TrainingRun, hour: str) -> dict[str, float]:
    """Train an MLP from scratch at ``run.batch_size`` on the data of ``hour`` (a timestamp).
    ``classifier.fit`` holds the loop every train function has: epochs, steps, the metric."""
    import torch

    from zeus_airflow.examples import classifier

    torch.set_num_threads(1)  # parallel tasks on one machine must not fight over cores
    # 8 classes in 32 dimensions; the centres stay the same every hour, each hour draws a
    # new sample around them.
    task = classifier.Task(centres_seed=0, spread=0.55, train_samples=8192, validation_samples=2048)
    return {"validation_accuracy": task.retrain(run, seed=int(hour))}


with DAG(
    dag_id="hourly_retrain",
    schedule="@hourly",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["zeus", "example", "simulated"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=train,
        train_kwargs={"hour": "{{ data_interval_start.int_timestamp }}"},
        batch_sizes=[16, 32, 64, 128, 256, 512],
        default_batch_size=128,
        target_metric=0.885,
        max_epochs=10,
        device="simulated:v100",
        warmup_steps=3,  # an epoch is 16 to 512 steps: profile in short slices
        profile_steps=10,
    )

"""
# zeus_replay_daily: Zeus learning a paper workload's batch size and power limit, day by day

The demo DAG. Every day it "retrains" DeepSpeech2 on LibriSpeech on a V100, replayed from the
Zeus paper's measured traces (shipped in the package, `zeus_airflow/data/traces/`; another
folder with `$ZEUS_TRACES_DIR`): time and power per epoch come from the trace for the chosen
(batch size, power limit), epochs to reach the target from a random traced seed. The engine,
profiler and store are the real ones; only the GPU is virtual, so a day's run (hours of "GPU
time") takes about a second, and every figure is labelled **replayed**.

Over the runs, the job first prunes batch sizes (walking down, then up, from the default
b0 = 192), then samples among the survivors, each at the power limit its profile chose. Compare
with the Default configuration (b0 at the maximum limit): `make demo` prints the saving.

## Run it

```bash
make demo                                        # 60 daily runs, the table, the saving
# or by hand, from the repository root:
export AIRFLOW_HOME=$PWD/.airflow AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags \\
       AIRFLOW__CORE__LOAD_EXAMPLES=False
airflow db migrate
airflow dags test zeus_replay_daily 2025-01-01   # one day
zeus-airflow runs --job zeus_replay_daily.train  # what the store learned
```

## Where to look

Each run's task instance has the XComs `batch_size`, `power_limit_w`, `energy_j`, `time_s`,
`cost`, `epochs`, `reached_target`, `tries`, `phase`, `measurement`; a one-line summary in the
Rendered Templates tab (`zeus_summary`); and a **Zeus job** button to the job's page.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

GPU, WORKLOAD = "v100", "librispeech"

with DAG(
    dag_id="zeus_replay_daily",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # each day learns from the one before, as a daily job would
    tags=["zeus", "demo", "replayed"],
    doc_md=__doc__,
):
    ZeusTrainOperator(
        task_id="train",
        train=replay_train,
        device=f"replay:{GPU}:{WORKLOAD}",
        **replay_job_settings(GPU, WORKLOAD),  # batch sizes, b0, target, max epochs
        eta=0.5,
        beta=2.0,
    )

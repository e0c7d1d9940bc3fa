"""The DAG of the noise acceptance test (tests/test_acceptance_noise.py): one region's model
retrained per mapped task instance, every day, caught up over the past days.

Written as a new user would: the operator's defaults (job id, seed, beta, eta), three regions
mapped with ``.partial(...).expand(...)`` and named by ``map_index_template``, a real PyTorch
model on the CPU with the simulated V100. The test sets ``ZEUS_ACCEPTANCE_START`` (the first
logical date) so that the catch-up covers the days it wants.
"""

from __future__ import annotations

import os

import pendulum
import regional_workload as workload
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator

with DAG(
    dag_id=workload.DAG_ID,
    schedule="@daily",
    start_date=pendulum.parse(os.environ.get(workload.START_ENV, "2026-01-01")),
    catchup=True,
    max_active_runs=2,  # catch-up runs overlap: two slots for three tasks a day
    tags=["zeus", "acceptance", "simulated"],
):
    ZeusTrainOperator.partial(
        task_id="train",
        train=workload.train,
        batch_sizes=list(workload.BATCH_SIZES),
        default_batch_size=workload.DEFAULT_BATCH_SIZE,
        target_metric=workload.TARGET_ACCURACY,
        max_epochs=workload.MAX_EPOCHS,
        device="simulated:v100",
        warmup_steps=3,  # an epoch is 32 to 4096 steps: profile in short slices
        profile_steps=10,
        map_index_template="{{ task.train_kwargs['region'] }}",
    ).expand(train_kwargs=[{"region": region, "day": "{{ ds_nodash }}"}
                           for region in workload.REGIONS])

"""The DAG of the noise acceptance test (tests/operators/test_acceptance_noise.py): one region's
model
retrained per mapped task instance, every day, caught up over the past days.

Written as a new user would: the operator's defaults (job id, seed, beta, eta), three regions
mapped with ``.partial(...).expand(...)`` and named by ``map_index_template``, a real PyTorch
model on the CPU with the simulated V100. It catches up on a fixed window of past days
(``regional_workload.FIRST_DAY``, ``DAYS``), so the test sees the same data every day it runs.
"""

from __future__ import annotations

import pendulum
import regional_workload as workload
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator

with DAG(
    dag_id=workload.DAG_ID,
    schedule="@daily",
    start_date=pendulum.parse(workload.FIRST_DAY),
    end_date=pendulum.parse(workload.FIRST_DAY).add(days=workload.DAYS - 1),
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
        # What this test proves is that the walk converges under noise within its 20 days;
        # with the budget, exploration would wait for the budget's room and the last runs
        # would prove nothing (tests/core/decide/test_budget.py covers the budget).
        exploration_budget=None,
        map_index_template="{{ task.train_kwargs['region'] }}",
    ).expand(
        train_kwargs=[{"region": region, "day": "{{ ds_nodash }}"} for region in workload.REGIONS]
    )

"""The arms' windows read arm by arm (a task's few reads, from one statement compiled once)
and by one UNION ALL (the simulator's many reads on one connection) are the same rows, in the
same order, on SQLite and PostgreSQL (``store/state.py``, ``UNION_AFTER_READS``)."""

from __future__ import annotations

from fixtures_store import job_config
from sqlalchemy import select

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store import state
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining


def test_arm_by_arm_and_the_union_read_the_same_rows(
    sql_store: SQLStore, cifar_trace: WorkloadTrace
) -> None:
    gpu = ReplayGPU(cifar_trace)
    config = job_config(cifar_trace, "arms.job", exploration_budget=None)
    engine = Engine(sql_store, gpu, config, ZeusPolicy(), seed=2, heartbeat_s=None)
    train = ReplayTraining(gpu, seed=2)
    for day in range(12):  # the walk and some sampling: several arms with several costs
        train.recurrence = day
        engine.run_recurrence(train, RecurrenceKey(f"day-{day}"))
    info = engine.device_info
    with sql_store.transaction() as conn:
        job_pk = conn.execute(select(jobs.c.id).where(jobs.c.job_id == "arms.job")).scalar_one()
        here = dict(job_key=job_pk, gpu_model=info.model, gpu_count=info.count)
        conn.info.pop("zeus_arm_window_reads", None)
        by_arm = [tuple(r) for r in state._arm_rows(conn, here, config.batch_sizes, 3)]
        conn.info["zeus_arm_window_reads"] = state.UNION_AFTER_READS
        by_union = [tuple(r) for r in state._arm_rows(conn, here, config.batch_sizes, 3)]
    assert len({r[0] for r in by_arm}) >= 3  # the rows of several arms, at most 3 each
    assert by_arm == by_union

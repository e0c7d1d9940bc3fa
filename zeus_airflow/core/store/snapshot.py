"""What a decision reads: the job's exploration walk, its in-flight trials, its arm windows.

Every query is an index range scan over the one job's rows (see docs/store.md for the
plans). With a ``window_size``, each arm's window is read as its own ``ORDER BY id DESC LIMIT
window`` scan, so a decision reads at most ``window x arms`` observations however long the
job's history grows; without one, the arms are aggregated in the database.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import Connection, Integer, Select, bindparam, case, func, select, union_all
from sqlalchemy.sql.elements import BindParameter

from zeus_airflow.core.policy import EXPLORATION_PHASES, ExplorationStep, JobSnapshot
from zeus_airflow.core.posterior import ArmStats
from zeus_airflow.core.store.base import DeviceInfo, JobRef
from zeus_airflow.core.store.tables import trials

WALK_STATUSES = ("succeeded", "failed", "superseded")
"""Exploration trials that are steps of the pruning walk: finished, even if superseded since."""

# Statements are built once: building SQLAlchemy expressions costs more than running them on
# SQLite, and the simulator makes tens of thousands of decisions.
_job: BindParameter[int] = bindparam("job_key", type_=Integer)
# The job's few exploration trials, through ix_zeus_trials_phase. Filtered by status and
# sorted here, not by the database: either tempts SQLite's planner into an index that walks
# the job's whole history (by status, or in decision order).
_EXPLORATION = select(
    trials.c.decision_seq, trials.c.status, trials.c.batch_size, trials.c.reached_target,
    trials.c.cost, trials.c.power_limit_w,
).where(trials.c.job_pk == _job, trials.c.phase.in_(EXPLORATION_PHASES))
_ARM_TOTALS = select(
    trials.c.batch_size, func.count(), func.avg(trials.c.cost),
    func.sum(trials.c.cost * trials.c.cost),
    func.min(case((trials.c.reached_target, trials.c.cost))),
).where(trials.c.job_pk == _job, trials.c.observed).group_by(trials.c.batch_size)


@cache
def _arm_windows(arms: int) -> Select[Any]:
    """One statement reading each of ``arms`` arms' newest observations, arm by arm."""
    per_arm = [
        select(trials.c.batch_size, trials.c.cost, trials.c.reached_target)
        .where(trials.c.job_pk == _job, trials.c.observed,
               trials.c.batch_size == bindparam(f"arm_{i}"))
        .order_by(trials.c.id.desc()).limit(bindparam("window")).subquery()
        for i in range(arms)
    ]
    windows = union_all(*(select(arm) for arm in per_arm)).subquery()
    return select(windows.c.batch_size, windows.c.cost, windows.c.reached_target)


def read_snapshot(conn: Connection, job: JobRef, device: DeviceInfo,
                  excluded: frozenset[int]) -> JobSnapshot:
    """The job's state as the policy sees it, read inside the decision's transaction."""
    config = job.config
    params = dict(job_key=job.id)
    rows = sorted(conn.execute(_EXPLORATION, params).all(), key=lambda r: r.decision_seq)
    exploration = tuple(ExplorationStep(r.batch_size, bool(r.reached_target), r.cost,
                                        r.power_limit_w)
                        for r in rows if r.status in WALK_STATUSES)
    in_flight = tuple(r.batch_size for r in rows if r.status == "running")
    if config.window_size is None:
        observations, min_success = _totals(conn, job.id)
    else:
        observations, min_success = _windows(conn, job.id, config.batch_sizes,
                                             config.window_size)
    return JobSnapshot(config=config, exploration=exploration, in_flight=in_flight,
                       observations=observations, min_success_cost=min_success,
                       excluded=excluded, power_limits_w=device.power_limits_w)


def _totals(conn: Connection, job_pk: int) -> tuple[dict[int, ArmStats], float | None]:
    """Each arm's statistics over all its observations: one aggregate row per arm."""
    totals = conn.execute(_ARM_TOTALS, dict(job_key=job_pk)).all()
    stats = {b: ArmStats(n, mean, max(sum_sq - n * mean * mean, 0.0))
             for b, n, mean, sum_sq, _ in totals}
    minima = [m for *_, m in totals if m is not None]
    return stats, (min(minima) if minima else None)


def _windows(conn: Connection, job_pk: int, arms: tuple[int, ...], window: int
             ) -> tuple[dict[int, ArmStats], float | None]:
    """Each arm's statistics over its ``window`` newest observations."""
    params: dict[str, int] = {f"arm_{i}": b for i, b in enumerate(arms)}
    rows = conn.execute(_arm_windows(len(arms)), dict(params, job_key=job_pk, window=window))
    costs: dict[int, list[float]] = {}
    successes = []
    for b, cost, reached in rows:
        costs.setdefault(b, []).append(cost)
        if reached:
            successes.append(cost)
    return ({b: ArmStats.of(c) for b, c in costs.items()},
            min(successes) if successes else None)

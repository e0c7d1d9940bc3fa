"""Batch sizes as the Zeus policy sees them (the same snapshot, pruning replay and posterior
math it decides with), and their measured power profiles.

Arm windows are per GPU model (runs on other models count translated, ``core/fleet.py``):
the reports take the view of the GPU setup the job's latest try ran on, which is where the
next decision most likely happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from zeus_airflow.core import outlook
from zeus_airflow.core.domain import ArmStats, JobRef, JobSnapshot
from zeus_airflow.core.fleet import job_snapshot
from zeus_airflow.core.policy import HistoryOutOfOrderError, job_phase, pruning_reasons
from zeus_airflow.core.posterior import arm_posterior, pooled_cost_cv
from zeus_airflow.core.reports.records import Arm, ProfilePoint, Version
from zeus_airflow.core.store.history import latest_device
from zeus_airflow.core.store.snapshot import read_state
from zeus_airflow.core.store.tables import power_profiles, trials

_POINT = (
    power_profiles.c.batch_size,
    power_profiles.c.gpu_model,
    power_profiles.c.gpu_count,
    power_profiles.c.power_limit_w,
    power_profiles.c.avg_power_w,
    power_profiles.c.steps_per_s,
)
"""A profile point's columns, in ``ProfilePoint``'s order."""


def _snapshot(conn: Connection, v: Version) -> JobSnapshot:
    """What the policy reads when it decides for this version on its latest GPU setup."""
    job = JobRef(v.pk, v.job_id, v.version, v.config)
    return job_snapshot(read_state(conn, job, latest_device(conn, v.pk), frozenset()))


def decision_state(conn: Connection, v: Version) -> tuple[str, int | None]:
    """The job's phase and its best batch size so far, as the Zeus policy reckons them
    (``infeasible``: no size in play, runs fall back to the best known one)."""
    try:
        return outlook.standing(_snapshot(conn, v))
    except outlook.OutOfOrder:
        return _last_phase(conn, v), None


def upcoming_batch_size(conn: Connection, v: Version) -> tuple[str, int | None]:
    """The batch size the Zeus policy most likely decides next, and the job's phase
    (``core/outlook.py``); None before any observation."""
    try:
        return outlook.upcoming(_snapshot(conn, v))
    except outlook.OutOfOrder:
        return _last_phase(conn, v), None


def _last_phase(conn: Connection, v: Version) -> str:
    """The phase of the latest trial: on a history another policy (the simulator's
    baselines) wrote, the Zeus policy reads none."""
    last = conn.execute(
        select(trials.c.phase)
        .where(trials.c.job_pk == v.pk)
        .order_by(trials.c.decision_seq.desc())
        .limit(1)
    ).scalar()
    return str(last or "none")


def arms(conn: Connection, v: Version) -> tuple[Arm, ...]:
    """Every batch size of the configuration with the posterior the policy would sample."""
    snapshot = _snapshot(conn, v)
    try:
        survivors = job_phase(snapshot)[1]
        reasons = pruning_reasons(snapshot)
    except HistoryOutOfOrderError:  # another policy's history: nothing is pruned
        survivors, reasons = v.config.batch_sizes, {}
    stats = {b: snapshot.observations.get(b, ArmStats(0, 0.0, 0.0)) for b in v.config.batch_sizes}
    cv = pooled_cost_cv(stats[b] for b in survivors)
    result = []
    for b, arm in stats.items():
        belief = arm_posterior(arm, cv) if arm.count else None
        result.append(
            Arm(
                b,
                arm.count,
                arm.mean if arm.count else None,
                belief.mean if belief else None,
                belief.variance**0.5 if belief else None,
                b not in survivors,
                reasons.get(b),
            )
        )
    return tuple(result)


def profile_points(
    conn: Connection, job_pk: int, batch_size: int | None = None
) -> tuple[ProfilePoint, ...]:
    """Measured profile points, by batch size, GPU setup and limit (highest first); slices
    in progress are no points yet."""
    p = power_profiles.c
    query = (
        select(*_POINT)
        .where(p.job_pk == job_pk, p.measured_steps.is_(None))
        .order_by(p.batch_size, p.gpu_model, p.gpu_count, p.power_limit_w.desc())
    )
    if batch_size is not None:
        query = query.where(p.batch_size == batch_size)
    return tuple(ProfilePoint(*r) for r in conn.execute(query))


def profile_points_of(conn: Connection, sizes: Mapping[int, int]) -> list[Any]:
    """The measured profile points of each job's batch size (job key -> size), with their
    job key (``job_pk``), in one read."""
    p = power_profiles.c
    rows = conn.execute(
        select(p.job_pk, *_POINT).where(
            p.job_pk.in_(list(sizes)),
            p.batch_size.in_(set(sizes.values())),
            p.measured_steps.is_(None),
        )
    )
    return [r for r in rows if r[1] == sizes[r[0]]]  # (job_pk, batch_size, ...)

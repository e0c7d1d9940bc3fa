"""Batch sizes as the Zeus policy sees them (the same snapshot, pruning replay and posterior
math it decides with), and their measured power profiles.

Arm windows are per GPU model (runs on other models count translated,
``core/decide/translation.py``):
the reports take the view of the GPU setup the job's latest try ran on, which is where the
next decision most likely happens.
"""

from __future__ import annotations

from zeus_airflow.core.decide import outlook
from zeus_airflow.core.decide.in_play import job_phase, pruning_reasons
from zeus_airflow.core.decide.posterior import arm_posterior, pooled_cost_cv
from zeus_airflow.core.decide.snapshot import job_snapshot
from zeus_airflow.core.decide.walk import HistoryOutOfOrderError
from zeus_airflow.core.domain import ArmStats, DeviceInfo, JobSnapshot, Version
from zeus_airflow.core.reports.records import Arm, ProfilePoint
from zeus_airflow.core.store.reads import Reader

_NO_DEVICE = DeviceInfo("", 1, "measured", ())
"""The GPU setup of a version that has not run yet."""


def _snapshot(reader: Reader, v: Version) -> JobSnapshot:
    """What the policy reads when it decides for this version on its latest GPU setup."""
    return job_snapshot(reader.job_state(v, reader.latest_device(v.pk) or _NO_DEVICE))


def best_batch_size(reader: Reader, v: Version) -> int | None:
    """The job's best batch size so far, as the Zeus policy reckons it (None before any
    observation, and on a history another policy, the simulator's baselines, wrote)."""
    try:
        return outlook.standing(_snapshot(reader, v))[1]
    except outlook.OutOfOrder:
        return None


def upcoming_batch_size(reader: Reader, v: Version) -> tuple[str, int | None]:
    """The batch size the Zeus policy most likely decides next, and the job's phase
    (``core/decide/outlook.py``); None before any observation."""
    try:
        return outlook.upcoming(_snapshot(reader, v))
    except outlook.OutOfOrder:  # another policy's history
        return str(reader.last_phase(v.pk) or "none"), None


def arms(reader: Reader, v: Version) -> tuple[Arm, ...]:
    """Every batch size of the configuration with the posterior the policy would sample."""
    snapshot = _snapshot(reader, v)
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
    reader: Reader, job_pk: int, batch_size: int | None = None
) -> tuple[ProfilePoint, ...]:
    """Measured profile points, by batch size, GPU setup and limit (highest first); slices
    in progress are no points yet."""
    return tuple(ProfilePoint(*p) for p in reader.profile_points(job_pk, batch_size))

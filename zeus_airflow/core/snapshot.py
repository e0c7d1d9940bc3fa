"""What the policy reads: a decision's stored state (:class:`~zeus_airflow.core.domain.JobState`,
read by the store) turned into the policy's :class:`~zeus_airflow.core.domain.JobSnapshot`, in
two steps: drift detection over this GPU setup's costs (``core/drift.py``), then the runs of
other GPU setups translated into this setup's cost units (``core/fleet.py``).
"""

from __future__ import annotations

from zeus_airflow.core.domain import JobSnapshot, JobState
from zeus_airflow.core.drift import arm_view
from zeus_airflow.core.fleet import with_other_fleets


def job_snapshot(state: JobState) -> JobSnapshot:
    """The stored state as the policy reads it: with drift detection, this setup's costs
    first go through it; then runs from other GPU setups are translated and added to arms
    whose window has room for them."""
    config = state.job.config
    own, own_successes, drift = state.observations, state.successes, None
    if config.drift_detection:
        view = arm_view(state.history)
        own, own_successes, drift = view.observations, view.successes, view.drift
    observations, successes, foreign_costs = with_other_fleets(state, own, own_successes)
    return JobSnapshot(
        config=config,
        exploration=state.exploration,
        in_flight=state.in_flight,
        observations=observations,
        success_mean_cost={b: total / n for b, (total, n) in successes.items()},
        evidence=state.evidence,
        excluded=state.excluded,
        power_limits_w=state.device.power_limits_w,
        foreign_costs=foreign_costs,
        drift=drift,
        missed=state.missed,
        ledger=state.ledger,
    )

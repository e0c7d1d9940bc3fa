"""What the policy reads: a decision's stored state (:class:`~zeus_airflow.core.domain.JobState`,
read by the store) turned into the policy's :class:`~zeus_airflow.core.domain.JobSnapshot`, in
two steps: drift detection over this GPU setup's costs (``core/decide/drift.py``), then the
runs of other GPU setups translated into this setup's cost units
(``core/decide/translation.py``). The exploration
budget is dropped while it has no reference to keep within (:func:`budget_reference`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.decide.drift import arm_view
from zeus_airflow.core.decide.translation import pricing_cost_per_step, with_other_fleets
from zeus_airflow.core.domain import ExplorationStep, JobSnapshot, JobState


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
        config=budget_reference(config, state.exploration),
        exploration=state.exploration,
        deferred=state.deferred,
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
        sample_costs=sample_costs(state),
        run_sample_costs=run_sample_costs(state),
        run_since_walk=run_since_walk(state),
        gpu_limits_fixed=state.device.limits_fixed,
    )


def run_since_walk(state: JobState) -> frozenset[int]:
    """The sizes with a cost observed after the pruning walk's last step (``state.history``
    holds the costs with their decision numbers only with drift detection)."""
    walk_end = max((step.seq for step in state.exploration), default=-1)
    return frozenset(b for b, seen in state.history.items() if any(o.seq > walk_end for o in seen))


def sample_costs(state: JobState) -> dict[int, float]:
    """Per batch size whose power profile on this GPU setup measured the highest limit, its
    cost per training sample there."""
    config = state.job.config
    costs = {}
    for (key, b), profile in state.profiles.items():
        if key != state.here:
            continue
        per_step = pricing_cost_per_step(profile, config.eta)
        if per_step is not None:
            costs[b] = per_step / b
    return costs


def run_sample_costs(state: JobState) -> dict[int, float]:
    """Where limits cannot move: per batch size that trained at the job's common limit (the
    one most of its fixed-limit steps trained at), its cost per training sample there from
    its own tries, whole or stopped. A short job's probe is priced by its own steps, which
    no profile slice fits in."""
    rows = state.ledger.fixed_limit_steps
    steps_at: dict[int, int] = {}
    for row in rows:
        steps_at[row.power_limit_w] = steps_at.get(row.power_limit_w, 0) + row.steps
    if not steps_at:
        return {}
    common = max(steps_at, key=lambda limit: (steps_at[limit], limit))
    return {
        row.batch_size: row.cost / (row.steps * row.batch_size)
        for row in rows
        if row.power_limit_w == common
    }


def budget_reference(config: JobConfig, exploration: Sequence[ExplorationStep]) -> JobConfig:
    """``config``, without its exploration budget while the default batch size trains
    nothing on the job's data (its latest walk step stopped ``no_steps``: fewer samples
    than the batch size, with ``drop_last``). The budget keeps the job's cost within the
    Default configuration's, the default size run to its end; such a Default trains no model
    and costs nothing to compare with, so holding exploration back to it would keep the job
    on a size that trains nothing, run after run. The job explores as the paper does until
    the default size trains again."""
    if config.exploration_budget is None:
        return config
    b0 = [step for step in exploration if step.batch_size == config.default_batch_size]
    if b0 and b0[-1].stop_reason == "no_steps":
        return replace(config, exploration_budget=None)
    return config

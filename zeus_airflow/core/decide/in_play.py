"""After pruning: which sizes are in play (the survivors, those that earned another try, the
walk's new frontier), the job's phase, and why each size out of play is out."""

from __future__ import annotations

import math

from zeus_airflow.core.decide.budget import repays
from zeus_airflow.core.decide.exploring import cost_margin, estimated_cost
from zeus_airflow.core.decide.parameters import DEFAULT_PARAMETERS, PolicyParameters
from zeus_airflow.core.decide.posterior import arm_posterior, pooled_cost_cv
from zeus_airflow.core.decide.walk import PruningState, walk_state
from zeus_airflow.core.domain import STOPPED_REASONS, JobSnapshot, SizeEvidence


def sizes_in_play(
    snapshot: JobSnapshot, state: PruningState, params: PolicyParameters = DEFAULT_PARAMETERS
) -> tuple[int, ...]:
    """The sampling arms: the sizes that survived pruning, those that earned another try,
    and the walk's new frontier (:func:`frontier`). Empty while pruning is still under way
    only if nothing survived a finished round."""
    sizes = snapshot.config.batch_sizes
    in_play = [
        b
        for b in sizes
        if b in state.survivors
        or earned_another_try(b, snapshot, params)
        or _returned_after_drift(b, snapshot)
        or repriced(b, snapshot)
    ]
    return tuple(b for b in sizes if b in in_play or b in frontier(snapshot, in_play))


def frontier(snapshot: JobSnapshot, in_play: list[int]) -> set[int]:
    """Sizes the pruning walk never reached that are next to a size in play which reached
    the target: the walk stopped before them at a size that has since come back (a hard
    day's miss, an early stop the bound outgrew, a price a drift made stale), so the reason
    it stopped no longer holds. Each is tried once, within the budget, like any untried
    arm. As the walk goes on while sizes get cheaper, one that reaches the target at no more
    than the mean cost of the size it is next to stays in play, judged by its costs as a
    walked size is, and the frontier goes on beyond it; a dearer one drops, as the walk
    would have stopped there."""
    sizes = sorted(snapshot.config.batch_sizes)
    walked = {s.batch_size for s in snapshot.exploration}
    stale = snapshot.drift.stale_mean if snapshot.drift else {}

    def unreached(b: int) -> bool:
        seen = snapshot.observations.get(b)
        return b not in walked and (seen is None or seen.count == 0) and b not in stale

    means = snapshot.success_mean_cost

    def cheaper_beyond(b: int, n: int) -> bool:
        return n not in walked and n in means and means[n] <= means[b]

    found: set[int] = set()
    reaching = [b for b in in_play if b in means]
    while reaching:
        b = reaching.pop()
        at = sizes.index(b)
        for n in sizes[max(at - 1, 0) : at + 2]:
            if n in found or n in in_play:
                continue
            if unreached(n):
                found.add(n)
            elif cheaper_beyond(b, n):
                found.add(n)
                reaching.append(n)
    return found


def _returned_after_drift(batch_size: int, snapshot: JobSnapshot) -> bool:
    """Whether a size round 2 dropped as dominated is back in play under drift detection.

    Dominance was judged on the data of its time. Once drift detection finds a change
    (``snapshot.drift``), such a size is an arm again; and once it has been run since the
    walk ended (sampled then), it stays one, so it does not drop out when the change leaves
    the detection's memory. Runs before the walk ended do not count: the default size runs
    on every day of a budgeted job's first week, and was not sampled for it. Without drift
    detection, as in the paper with our round-2 change, it stays dropped. A size the budget
    priced out (``cannot_win``) stays out as a failed one does: a price, not a finished
    run, judged it.
    """
    if not snapshot.config.drift_detection:
        return False
    steps = [s for s in snapshot.exploration if s.batch_size == batch_size]
    if not steps or not all(s.succeeded for s in steps):
        return False  # never reached by the walk, or failed: earned_another_try decides
    return snapshot.drift is not None or batch_size in snapshot.run_since_walk


def repriced(batch_size: int, snapshot: JobSnapshot) -> bool:
    """Whether a size its price dropped (``cannot_win`` before it reached the target) is back
    in play: its price, against the best size now and what the job's sizes now say of how
    epochs scale (``budget.priced_verdict``), says it can pay back. The price that dropped
    it leant on a few runs of its neighbours; their later runs can say otherwise. Once back
    and run to its target, it stays in play, judged by its own costs. A size that ran until
    its cost alone judged it stays dropped: its belief, given that cost, is dearer than the
    best."""
    if snapshot.config.exploration_budget is None:
        return False
    steps = [s for s in snapshot.exploration if s.batch_size == batch_size]
    if not steps or any(s.stop_reason != "cannot_win" for s in steps):
        return False
    if batch_size in snapshot.success_mean_cost or batch_size in snapshot.foreign_costs:
        return True  # back in play, it ran (here or on another GPU): its costs judge it now
    estimate = estimated_cost(snapshot, batch_size)
    best = min(snapshot.success_mean_cost.values(), default=None)
    if estimate is None or best is None:
        return False
    judged = estimate.given_at_least(max(s.cost for s in steps))
    return repays(judged.belief, best, snapshot.config.payback_horizon, cost_margin(snapshot))


def earned_another_try(
    batch_size: int, snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> bool:
    """Whether a size that pruning dropped for failing comes back into play.

    Pruning judged it on one try; noise, a slow machine or a lucky run elsewhere can make one
    try wrong, and a wrong prune must not last for good. It comes back when:

    * it failed only by early stops, and it has reached the target in some try (it converges:
      a size that reached the target is never pruned for an early stop alone), or the bound
      has since grown past ``params.readmit_growth x`` the highest bound that stopped it, beyond the
      noise of the best mean (:func:`_settled_bound`: the bound was set by runs that now look
      lucky); each return needs the bound to grow again;
    * it missed the target (max epochs, or the function returned), and a later try of it
      reached the target (a fallback run, say): it converges after all; or every miss was
      in a recurrence whose data later runs showed to be hard (:func:`_hard_recurrences`).

    A size dropped without failing (dominated, or never reached by the walk) stays dropped.
    """
    failures = [
        s
        for s in snapshot.exploration
        if s.batch_size == batch_size and not s.succeeded and s.stop_reason != "cannot_win"
    ]
    if not failures:
        return False
    evidence = snapshot.evidence.get(batch_size, SizeEvidence())
    missed = [s for s in failures if s.stop_reason != "early_stop"]
    if missed:
        if all(s.recurrence and s.recurrence in _hard_recurrences(snapshot) for s in missed):
            return True
        last = max(s.seq for s in missed)
        return evidence.last_success_seq is not None and evidence.last_success_seq > last
    if evidence.last_success_seq is not None:
        return True
    bound = _settled_bound(snapshot, params)
    if bound is not None and snapshot.drift is not None:
        # Costs moved by the drift's ratio: a bound grown by as much says nothing about the
        # runs that set the old one.
        bound /= snapshot.drift.cost_ratio
    return (
        bound is not None
        and evidence.max_stop_bound is not None
        and bound > params.readmit_growth * evidence.max_stop_bound
    )


def _hard_recurrences(snapshot: JobSnapshot) -> set[str]:
    """Recurrences whose misses later runs overturned: a size that missed the target in one
    has reached it since. Its data was hard, so the other sizes that missed on it were
    judged on that data, not on their merit: they earn another try too, and a job that
    failed everything on one hard day does not fall back for good."""
    hard = set()
    for step in snapshot.exploration:
        if step.succeeded or step.stop_reason in STOPPED_REASONS or not step.recurrence:
            continue
        later = snapshot.evidence.get(step.batch_size, SizeEvidence()).last_success_seq
        if later is not None and later > step.seq:
            hard.add(step.recurrence)
    return hard


def _settled_bound(
    snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> float | None:
    """The early-stop bound from the low edge of the best size's mean: ``params.readmit_z`` standard
    errors (its posterior's, see :mod:`posterior`) below it.

    The best mean moves with every run, by its noise alone: a job whose cheapest size needs
    one epoch on most days and two on some sees it rise and fall by a fifth. A pruned size
    returns when the bound grew by more than that, when the runs that set the old bound
    look lucky beside the many since, not when a few dear days nudged it past the stop."""
    means = snapshot.success_mean_cost
    if not means:
        return None
    best = min(means, key=lambda b: means[b])
    stats = snapshot.observations.get(best)
    if stats is None or stats.count == 0:
        return snapshot.config.beta * means[best]
    error = math.sqrt(arm_posterior(stats, pooled_cost_cv(snapshot.observations.values())).variance)
    return snapshot.config.beta * max(means[best] - params.readmit_z * error, 0.0)


def job_phase(
    snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> tuple[str, tuple[int, ...]]:
    """``pruning``, ``sampling`` or ``infeasible`` (no size in play: runs fall back), and the
    sizes in play."""
    state = walk_state(snapshot, params)
    if state.next_batch_size is not None:
        return "pruning", state.survivors
    in_play = sizes_in_play(snapshot, state, params)
    return ("sampling" if in_play else "infeasible"), in_play


def pruning_reasons(
    snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> dict[int, str]:
    """Why each size out of play is out, in words a user can act on."""
    config = snapshot.config
    _, in_play = job_phase(snapshot, params)
    reasons: dict[int, str] = {}
    for b in config.batch_sizes:
        if b in in_play:
            continue
        failures = [
            s
            for s in snapshot.exploration
            if s.batch_size == b and not s.succeeded and s.stop_reason != "cannot_win"
        ]
        if not failures:
            tried = any(s.batch_size == b for s in snapshot.exploration)
            reasons[b] = (
                "dropped: its cost makes it implausible as the optimum"
                if tried
                else "not tried: the pruning walk stopped before it"
            )
        elif any(s.stop_reason != "early_stop" for s in failures):
            reasons[b] = (
                f"missed target_metric={config.target_metric} within max_epochs={config.max_epochs}"
            )
        else:
            stopped = max((s.early_stop_cost or s.cost) for s in failures)
            reasons[b] = (
                f"early-stopped at the bound beta={config.beta} x the best mean cost "
                f"({stopped:.4g}); it comes back if the bound grows past "
                f"{params.readmit_growth * stopped:.4g}"
            )
    return reasons


def infeasibility_report(
    snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> str:
    """Why no batch size is left in play, size by size."""
    reasons = pruning_reasons(snapshot, params)
    listed = "; ".join(f"{b}: {why}" for b, why in reasons.items())
    return (
        f"no batch size of {list(snapshot.config.batch_sizes)} is left to try ({listed}). "
        "Relax target_metric, raise max_epochs, or raise beta if early stops are the cause"
    )

"""Choosing among the sizes in play: Gaussian Thompson sampling (paper Alg. 1), and after a
drift, the cheapest size's stale neighbours first."""

from __future__ import annotations

import math

import numpy as np

from zeus_airflow.core.decide.best import early_stop_bound
from zeus_airflow.core.decide.posterior import Posterior, arm_posterior, pooled_cost_cv
from zeus_airflow.core.domain import ArmStats, JobSnapshot


def thompson_sample(snapshot: JobSnapshot, arms: list[int], rng: np.random.Generator) -> int:
    """Paper Alg. 1: draw each arm's mean cost from its posterior, take the smallest draw.
    Arms with no observation in their window go first, the cheapest elsewhere first; after
    a drift, an arm with no cost since it is drawn from its stale belief instead
    (``JobSnapshot.drift``)."""
    stats = {b: snapshot.observations.get(b, ArmStats(0, 0.0, 0.0)) for b in arms}
    drift = snapshot.drift
    stale = drift.stale_mean if drift else {}
    untried = [b for b in arms if stats[b].count == 0 and b not in stale]
    if untried:
        return min(untried, key=lambda b: snapshot.foreign_costs.get(b, math.inf))
    neighbour = stale_neighbour(snapshot, arms)
    if neighbour is not None:
        return neighbour
    cv = pooled_cost_cv(stats.values())
    best, best_draw = arms[0], math.inf
    for b in arms:
        if stats[b].count == 0 and drift is not None:  # no cost since the drift
            belief = Posterior(stale[b], (drift.stale_spread * stale[b]) ** 2)
        else:
            belief = arm_posterior(stats[b], cv)
        draw = rng.normal(belief.mean, math.sqrt(belief.variance))
        if draw < best_draw:
            best, best_draw = b, draw
    return best


def stale_neighbour(snapshot: JobSnapshot, arms: list[int]) -> int | None:
    """After a change drift detection found: an arm next to the cheapest one with costs since
    the change (adjacent among ``arms`` by batch size) that has none itself and whose stale
    mean is under the early-stop bound, the lower stale mean first; None when there is none.

    A drift moves the optimum along the batch sizes, to a neighbour of the old one first (a
    new data set that favours larger batches makes the next larger size cheaper). A stale
    belief cannot show that: it is an old cost, often one pruning run's with its profiling,
    moved as the sizes that ran moved, and Thompson sampling drew such a neighbour below the
    size in use about once in 25 decisions (docs/drift.md). Trying each neighbour once costs
    at most two runs per change, each cut at the bound; one whose belief is beyond the bound
    would only be stopped there. As the cheapest size moves, the check follows it."""
    drift, bound = snapshot.drift, early_stop_bound(snapshot)
    if drift is None or bound is None:
        return None
    fresh = {
        b: snapshot.observations[b].mean
        for b in arms
        if b in snapshot.observations and snapshot.observations[b].count
    }
    if not fresh:
        return None
    best = min(fresh, key=lambda b: fresh[b])
    ordered = sorted(arms)
    at = ordered.index(best)
    neighbours = [
        b
        for b in ordered[max(at - 1, 0) : at + 2]
        if b not in fresh
        and drift.stale_mean.get(b, math.inf) < bound
        and b not in snapshot.in_flight
    ]
    return min(neighbours, key=lambda b: drift.stale_mean[b]) if neighbours else None

"""Gaussian belief about an arm's mean cost, with the cost variance learned (paper Alg. 2).

The paper plugs the sample variance of an arm's costs into the conjugate Gaussian update.
With one observation, or identical ones, that variance is 0: the arm becomes deterministic
(or the update divides by zero). We keep the update and replace the plug-in variance by its
posterior under a scaled-inverse-chi-squared prior (``PRIOR_DOF`` pseudo-observations):

* costs of different batch sizes of one job vary by a similar *fraction* of their mean
  (training randomness, not the batch size, drives the spread), so the prior scale is the
  squared coefficient of variation pooled over all arms of the job, times the arm's mean²;
* the pooled coefficient itself starts from ``PRIOR_COST_CV`` = 14 %, the run-to-run spread of
  time-to-accuracy the paper cites (§4.4), weighted as one pseudo-observation.

So an arm is never certain after one run, its variance never reaches 0, and arms with many
observations are governed by their own spread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from zeus_airflow.core.domain.decision import ArmStats

PRIOR_COST_CV = 0.14
PRIOR_DOF = 1.0


@dataclass(frozen=True)
class Posterior:
    """Belief about an arm's mean cost: Normal(mean, variance)."""

    mean: float
    variance: float


def pooled_cost_cv(arms: Iterable[ArmStats]) -> float:
    """Coefficient of variation of cost, pooled over arms (each weighted by its dof)."""
    weighted, dof = PRIOR_DOF * PRIOR_COST_CV**2, PRIOR_DOF
    for arm in arms:
        if arm.count < 2 or arm.mean <= 0:
            continue
        weighted += arm.sum_sq_dev / arm.mean**2
        dof += arm.count - 1
    return math.sqrt(weighted / dof)


def cost_variance(arm: ArmStats, cv: float) -> float:
    """Posterior estimate of one arm's cost variance; > 0 whenever its mean cost is > 0."""
    prior_scale = (cv * arm.mean) ** 2
    return max((arm.sum_sq_dev + PRIOR_DOF * prior_scale) / (arm.count - 1 + PRIOR_DOF), 1e-12)


def arm_posterior(
    arm: ArmStats, cv: float, prior_mean: float = 0.0, prior_variance: float = math.inf
) -> Posterior:
    """Paper Alg. 2 with the learned variance above. The default prior is flat."""
    if arm.count == 0:
        return Posterior(prior_mean, prior_variance)
    noise = cost_variance(arm, cv)
    prior_precision = 0.0 if math.isinf(prior_variance) else 1.0 / prior_variance
    precision = prior_precision + arm.count / noise
    mean = (prior_mean * prior_precision + arm.count * arm.mean / noise) / precision
    return Posterior(mean, 1.0 / precision)

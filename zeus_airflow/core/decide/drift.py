"""Drift detection: which of an arm's observed costs still describe the job's data.

A fixed posterior window is a guess about how fast the data drifts: too short and arms whose
costs are close stay uncertain for good (the bandit keeps paying to tell them apart), too long
and the job follows a drift late. Drift detection instead keeps every arm's recent history
(up to ``config.DRIFT_MEMORY`` observations) and looks for a *change point* in it: a split into
an older and a newer run of costs whose means differ by more than :data:`CHANGE_Z` standard
errors. Without one, the arm's posterior uses its whole memory, as without a window. With
one, the job's data has drifted at that point:

* the arm's posterior keeps only the costs after its change point;
* every other arm's costs from before the change are *stale*: an arm that has run since keeps
  only its newer costs, and one that has not is drawn from a belief (its old mean moved as
  the nearest arms that ran on both sides of the change moved, half the job's change as its
  spread: :func:`local_ratio`), so Thompson sampling
  re-checks the arms the drift may have made the cheapest instead of trusting old costs;
* sizes that pruning dropped as dominated come back into play
  (:func:`zeus_airflow.core.decide.in_play._returned_after_drift`): they were judged on the
  old data; so do sizes the budget priced out whose price, widened by the drift's spread,
  now pays back (:func:`zeus_airflow.core.decide.in_play.repriced`).

Everything is recomputed from the store's rows at each decision, so concurrent workers agree
and nothing is stored. Units: costs are the job's cost units (docs/algorithm.md, Cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zeus_airflow.core.decide.posterior import PRIOR_COST_CV, PRIOR_DOF
from zeus_airflow.core.domain import ArmStats, DriftFound, Observed

CHANGE_Z = 5.0
"""Standard errors between the two segments' means that make a change point. High, because
each decision tests every split of every arm: see docs/drift.md for the false alarms measured
at lower values."""
MIN_SEGMENT = 3
"""Observations each side of a change point needs: one or two unusual runs are noise."""


@dataclass(frozen=True)
class ArmView:
    """What the posteriors use after drift detection, for every arm."""

    observations: dict[int, ArmStats] = field(default_factory=dict)
    successes: dict[int, tuple[float, int]] = field(default_factory=dict)
    """Per arm, sum and count of the costs in use that reached the target."""
    drift: DriftFound | None = None


def change_point(costs: Sequence[float]) -> int | None:
    """Index of the first cost of the newest regime, or None when the costs look like one
    regime. Tests every split leaving :data:`MIN_SEGMENT` costs each side with a two-sample
    z-statistic, and returns the strongest split if it clears :data:`CHANGE_Z`. Its variance
    is the largest of: both segments' pooled spread (with the prior spread ``PRIOR_COST_CV``
    as ``PRIOR_DOF`` observation), that prior spread itself, and the whole history's spread
    as if it held no change."""
    n = len(costs)
    if n < 2 * MIN_SEGMENT:
        return None
    prefix, prefix_sq = [0.0], [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
        prefix_sq.append(prefix_sq[-1] + c * c)
    # The spread of the whole memory, as if it held no change, is a floor too: runs of
    # epochs-to-target are discrete and heavy-tailed (a seed that needs 6 epochs instead of
    # 4), so a few unlucky runs in a row must not pass for a drift.
    whole = max(prefix_sq[n] - prefix[n] ** 2 / n, 0.0) / (n - 1)
    best_split, best_z = None, CHANGE_Z
    for split in range(MIN_SEGMENT, n - MIN_SEGMENT + 1):
        n_old, n_new = split, n - split
        old_mean = prefix[split] / n_old
        new_mean = (prefix[n] - prefix[split]) / n_new
        ssd = (
            prefix_sq[split]
            - n_old * old_mean**2
            + prefix_sq[n]
            - prefix_sq[split]
            - n_new * new_mean**2
        )
        floor = (PRIOR_COST_CV * old_mean) ** 2
        variance = max((ssd + PRIOR_DOF * floor) / (n - 2 + PRIOR_DOF), floor, whole, 1e-12)
        z = abs(new_mean - old_mean) / math.sqrt(variance * (1 / n_old + 1 / n_new))
        if z > best_z:
            best_split, best_z = split, z
    return best_split


def arm_view(history: Mapping[int, Sequence[Observed]]) -> ArmView:
    """The costs each arm's posterior uses (see the module docstring). ``history``: per arm,
    its most recent observations, oldest first."""
    changes: dict[int, int] = {}
    log_ratios = []
    for b, seen in history.items():
        costs = [o.cost for o in seen]
        split = change_point(costs)
        if split is not None:
            changes[b] = seen[split].seq
            old, new = costs[:split], costs[split:]
            log_ratios.append(math.log((sum(new) / len(new)) / (sum(old) / len(old))))
    if not changes:
        return _view({b: list(seen) for b, seen in history.items()}, {}, None, 1.0, {})
    since = min(changes.values())
    ratio = math.exp(sum(log_ratios) / len(log_ratios))
    kept: dict[int, list[Observed]] = {}
    stale: dict[int, list[Observed]] = {}
    moved: dict[int, float] = {}
    for b, seen in history.items():
        start = changes.get(b, since)
        fresh = [o for o in seen if o.seq >= start]
        old = [o.cost for o in seen if o.seq < start]
        if fresh:
            kept[b] = fresh
            if old:
                moved[b] = math.log(sum(o.cost for o in fresh) / len(fresh) * len(old) / sum(old))
        elif seen:
            stale[b] = list(seen)
    return _view(kept, stale, since, ratio, moved)


def local_ratio(batch_size: int, moved: Mapping[int, float], ratio: float) -> float:
    """How much a stale size's cost likely moved: interpolated in log batch size between the
    nearest sizes on each side whose costs are known on both sides of the change (the
    nearest one's when only one side has any), else the job-wide ``ratio``. A drift that
    moves sizes apart (a new data set favouring larger batches) moves a size like its
    neighbours, not like the size the job happened to be training."""
    below = [b for b in moved if b < batch_size]
    above = [b for b in moved if b > batch_size]
    if not below and not above:
        return ratio
    if not below or not above:
        return math.exp(moved[min(below or above, key=lambda b: abs(math.log(b / batch_size)))])
    low, high = max(below), min(above)
    weight = math.log(batch_size / low) / math.log(high / low)
    return math.exp(moved[low] + weight * (moved[high] - moved[low]))


def _view(
    kept: Mapping[int, list[Observed]],
    stale: Mapping[int, list[Observed]],
    since: int | None,
    ratio: float,
    moved: Mapping[int, float],
) -> ArmView:
    observations = {b: ArmStats.of([o.cost for o in seen]) for b, seen in kept.items() if seen}
    successes = _successes(kept)
    # A stale arm's old mean, moved as its neighbours moved, is a hint where to look, not a
    # belief to exploit: the drift may also have moved arms apart, by a part of what it moved
    # them all (half, as its spread; at least the prior run-to-run spread).
    # The whole change as the spread made Thompson sampling re-try most stale sizes of a
    # 15-size job (docs/drift.md).
    spread = max(abs(math.log(ratio)) / 2, PRIOR_COST_CV)
    stale_mean = {
        b: local_ratio(b, moved, ratio) * sum(o.cost for o in seen) / len(seen)
        for b, seen in stale.items()
    }
    if not successes:  # no run has reached the target since the change: keep a bound
        successes = _successes(stale)
    drift = None if since is None else DriftFound(since, ratio, stale_mean, spread)
    return ArmView(observations, successes, drift)


def _successes(arms: Mapping[int, list[Observed]]) -> dict[int, tuple[float, int]]:
    out = {}
    for b, seen in arms.items():
        reached = [o.cost for o in seen if o.reached_target]
        if reached:
            out[b] = (sum(reached), len(reached))
    return out

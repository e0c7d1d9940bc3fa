"""Batch-size policies: Zeus (pruning, then Thompson sampling) and the paper's baselines.

A policy is pure: it reads a :class:`JobSnapshot` the store assembled inside its decision
transaction and returns a :class:`Decision`. It never touches the database or a device, so
the same code decides in the simulator, the operator and the tests, and any worker can
decide for any job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.posterior import ArmStats, arm_posterior, pooled_cost_cv

Phase = Literal["pruning", "sampling", "calibrate", "concurrent", "default", "grid", "exploit"]
"""``calibrate``: the first run of a surviving size on a GPU model the job has not used it on,
whose observations from other models cannot be translated before it is profiled here."""
EXPLORATION_PHASES: tuple[str, ...] = ("pruning", "grid")
PRUNING_ROUNDS = 2
DOMINANCE_PROBABILITY = 0.05
"""Round 2 skips a size less likely than this to beat the best one seen (see pruning_state)."""


class NoFeasibleBatchSizeError(RuntimeError):
    """Every batch size failed to reach the target: the job cannot be optimised as set up."""


@dataclass(frozen=True)
class ExplorationStep:
    """A finished exploration trial, in decision order."""

    batch_size: int
    succeeded: bool
    cost: float
    power_limit_w: int | None = None


@dataclass(frozen=True)
class JobSnapshot:
    """What a decision may read: exploration history, in-flight exploration, arm windows."""

    config: JobConfig
    exploration: tuple[ExplorationStep, ...] = ()
    in_flight: tuple[int, ...] = ()
    """Batch sizes of exploration trials other workers are running now."""
    observations: Mapping[int, ArmStats] = field(default_factory=dict)
    """Per batch size, statistics of its most recent ``window_size`` observed costs."""
    min_success_cost: float | None = None
    """Cheapest successful run within the windows; sets the early-stop bound."""
    excluded: frozenset[int] = frozenset()
    """Batch sizes that already failed in the current recurrence."""
    power_limits_w: tuple[int, ...] = ()
    """The device's candidate limits, highest first (only the grid baseline uses them)."""
    foreign_costs: Mapping[int, float] = field(default_factory=dict)
    """Mean cost per size on other GPU models, for sizes with no observation on this one:
    which to calibrate first."""


@dataclass(frozen=True)
class Decision:
    batch_size: int
    phase: Phase
    power_limit_w: int | None = None
    """A fixed limit (baselines); None lets the profiler choose."""
    early_stop_cost: float | None = None


class Policy(Protocol):
    name: str

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision: ...


def counts_as_observation(phase: str, reached_target: bool) -> bool:
    """Whether a finished trial's cost feeds its arm's posterior.

    A failed exploration trial prunes its batch size instead; a failed sampling trial's cost
    (stopped at the early-stop bound, so clearly worse than the best) is evidence about it.
    """
    return reached_target or phase not in EXPLORATION_PHASES


def early_stop_bound(snapshot: JobSnapshot) -> float | None:
    if snapshot.min_success_cost is None:
        return None
    return snapshot.config.beta * snapshot.min_success_cost


# --- pruning (paper Alg. 3, lines 1-9) ----------------------------------------------------------
@dataclass(frozen=True)
class PruningState:
    next_batch_size: int | None
    """Next size to explore; None once both rounds are done."""
    round: int
    survivors: tuple[int, ...]
    """Sizes that converged in the last finished round (the sampling arms when done)."""


def _walk(sizes: tuple[int, ...], start: int, outcome: Mapping[int, bool],
          admit: Callable[[int], bool] = lambda b: True) -> Iterator[int]:
    """Visit ``start``, then smaller sizes downwards until one fails, then larger ones upwards
    until one fails; a size ``admit`` rejects is passed over unvisited. ``outcome`` and
    ``admit`` are consulted lazily, as the walk's results arrive."""
    yield start
    for direction in (reversed([b for b in sizes if b < start]), [b for b in sizes if b > start]):
        for b in direction:
            if not admit(b):
                continue
            yield b
            if not outcome[b]:
                break


def pruning_state(config: JobConfig, history: tuple[ExplorationStep, ...]) -> PruningState:
    """Replay the exploration history through two pruning rounds to find where it stands.

    Round 2 differs from the paper in one way: it does not revisit a size whose cost so far
    makes it implausible as the optimum (:func:`is_dominated`); like a failure, such a size
    ends its direction and is dropped. Upstream re-runs every converged size once more, and
    on jobs whose default is near the optimum that exploration costs more than it returns.
    A job with a ``window_size`` keeps the paper's rule: a window says its costs drift, and a
    size dropped now could never return as the optimum after a drift (docs/drift.md).
    """
    sizes, start = config.batch_sizes, config.default_batch_size
    steps = iter(history)
    costs: dict[int, list[float]] = {}
    for round_number in range(1, PRUNING_ROUNDS + 1):
        outcome: dict[int, bool] = {}
        admit = (lambda b: True) if round_number == 1 or config.window_size else (
            lambda b: not is_dominated(b, costs))
        for b in _walk(sizes, start, outcome, admit):
            step = next(steps, None)
            if step is None:
                return PruningState(b, round_number, sizes)
            if step.batch_size != b:
                raise RuntimeError(f"exploration history out of order: expected batch size {b}, "
                                   f"found {step.batch_size} (was the job's history edited?)")
            outcome[b] = step.succeeded
            if step.succeeded:
                costs.setdefault(b, []).append(step.cost)
        sizes = tuple(b for b in sizes if outcome.get(b))
        if not sizes:
            raise NoFeasibleBatchSizeError(
                f"no batch size of {list(config.batch_sizes)} reached target_metric="
                f"{config.target_metric} within max_epochs={config.max_epochs} and the "
                f"early-stop bound (beta={config.beta}); relax the target or raise max_epochs, "
                "then reset the job")
        start = min(sizes, key=lambda b: sum(costs[b]) / len(costs[b]))
    return PruningState(None, PRUNING_ROUNDS, sizes)


def is_dominated(batch_size: int, costs: Mapping[int, list[float]]) -> bool:
    """Whether the posterior probability that this size's mean cost is below the best observed
    size's is under ``DOMINANCE_PROBABILITY`` (Gaussian beliefs of :mod:`posterior`)."""
    if batch_size not in costs:
        return False
    stats = {b: ArmStats.of(c) for b, c in costs.items()}
    best = min(stats, key=lambda b: stats[b].mean)
    if best == batch_size:
        return False
    cv = pooled_cost_cv(stats.values())
    mine, leader = arm_posterior(stats[batch_size], cv), arm_posterior(stats[best], cv)
    z = (leader.mean - mine.mean) / math.sqrt(mine.variance + leader.variance)
    return 0.5 * math.erfc(-z / math.sqrt(2)) < DOMINANCE_PROBABILITY


# --- policies ----------------------------------------------------------------------------------
class ZeusPolicy:
    """Pruning exploration, then Gaussian Thompson sampling over the survivors."""

    name = "zeus"

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        state = pruning_state(snapshot.config, snapshot.exploration)
        bound = early_stop_bound(snapshot)
        if state.next_batch_size is not None:
            b = state.next_batch_size
            if b in snapshot.in_flight or b in snapshot.excluded:
                # Its outcome is pending (or known bad now): while pruning, overlapping runs
                # take the best size known so far instead of exploring blindly (paper §4.4).
                return Decision(best_known(snapshot, state.survivors), "concurrent",
                                early_stop_cost=bound)
            return Decision(b, "pruning", early_stop_cost=bound)
        arms = [b for b in state.survivors if b not in snapshot.excluded]
        if not arms:
            # Every surviving size failed in this recurrence. After a drift all of them can
            # exceed beta x a minimum measured before it, so run the cheapest to the end: the
            # recurrence still yields a model, and its full cost tells the window what changed.
            return Decision(cheapest(snapshot, state.survivors), "sampling")
        choice = thompson_sample(snapshot, arms, rng)
        observed_here = snapshot.observations.get(choice, ArmStats(0, 0.0, 0.0)).count > 0
        phase: Phase = "sampling" if observed_here or choice not in snapshot.foreign_costs \
            else "calibrate"
        return Decision(choice, phase, early_stop_cost=bound)


def best_known(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The cheapest candidate that has not failed in this recurrence (see :func:`cheapest`)."""
    allowed = tuple(b for b in candidates if b not in snapshot.excluded)
    return cheapest(snapshot, allowed or candidates)


def cheapest(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The candidate with the lowest mean observed cost; b0 (else the first) when none has
    been observed."""
    observed = {b: snapshot.observations[b].mean for b in candidates
                if b in snapshot.observations and snapshot.observations[b].count}
    if observed:
        return min(observed, key=lambda b: observed[b])
    b0 = snapshot.config.default_batch_size
    return b0 if b0 in candidates else candidates[0]


def thompson_sample(snapshot: JobSnapshot, arms: list[int], rng: np.random.Generator) -> int:
    """Paper Alg. 1: draw each arm's mean cost from its posterior, take the smallest draw.
    Arms with no observation in their window go first, the cheapest elsewhere first."""
    stats = {b: snapshot.observations.get(b, ArmStats(0, 0.0, 0.0)) for b in arms}
    untried = [b for b in arms if stats[b].count == 0]
    if untried:
        return min(untried, key=lambda b: snapshot.foreign_costs.get(b, math.inf))
    cv = pooled_cost_cv(stats.values())
    best, best_draw = arms[0], math.inf
    for b in arms:
        belief = arm_posterior(stats[b], cv)
        draw = rng.normal(belief.mean, math.sqrt(belief.variance))
        if draw < best_draw:
            best, best_draw = b, draw
    return best


class DefaultPolicy:
    """Baseline: the default batch size at the maximum power limit, every time."""

    name = "default"

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        limit = max(snapshot.power_limits_w) if snapshot.power_limits_w else None
        return Decision(snapshot.config.default_batch_size, "default", power_limit_w=limit)


class GridSearchPolicy:
    """Baseline: one (batch size, power limit) per recurrence, batch sizes in the pruning walk
    order (a size that fails ends its direction), then the cheapest pair seen, for good."""

    name = "grid"

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        config, limits = snapshot.config, snapshot.power_limits_w
        if not limits:
            raise ValueError("grid search needs the device's candidate power limits")
        tried = {(s.batch_size, s.power_limit_w): s for s in snapshot.exploration}
        bound = early_stop_bound(snapshot)
        outcome: dict[int, bool] = {}
        for b in _walk(config.batch_sizes, config.default_batch_size, outcome):
            for p in limits:
                step = tried.get((b, p))
                if step is None:
                    return Decision(b, "grid", power_limit_w=p, early_stop_cost=bound)
                if not step.succeeded:
                    outcome[b] = False
                    break
            else:
                outcome[b] = True
        done = [s for s in snapshot.exploration if s.succeeded]
        if not done:
            raise NoFeasibleBatchSizeError("grid search found no (batch size, power limit) "
                                           "that reaches the target")
        best = min(done, key=lambda s: s.cost)
        return Decision(best.batch_size, "exploit", power_limit_w=best.power_limit_w,
                        early_stop_cost=bound)


POLICIES: dict[str, type[ZeusPolicy] | type[DefaultPolicy] | type[GridSearchPolicy]] = {
    "zeus": ZeusPolicy, "default": DefaultPolicy, "grid": GridSearchPolicy,
}

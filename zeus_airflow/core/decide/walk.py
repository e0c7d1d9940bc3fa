"""The pruning walk (paper Alg. 3, lines 1-9): replay the exploration history through the
pruning rounds to find where the job stands, and the two rules that end a direction early or
skip a size (``cannot_win``, ``is_dominated``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.decide.exploring import estimated_cost
from zeus_airflow.core.decide.parameters import DEFAULT_PARAMETERS, PolicyParameters
from zeus_airflow.core.decide.posterior import arm_posterior, pooled_cost_cv
from zeus_airflow.core.domain import ArmStats, ExplorationStep, JobSnapshot


class HistoryOutOfOrderError(RuntimeError):
    """The exploration history is not the one the pruning rounds would have asked for: another
    policy wrote it (the simulator's Default and Grid search baselines) or it was edited. The
    reports catch this, and only this, to show such a job without the Zeus policy's view."""


@dataclass(frozen=True)
class PruningState:
    next_batch_size: int | None
    """Next size to explore; None once both rounds are done."""
    round: int
    survivors: tuple[int, ...]
    """Sizes that converged in the last finished round (every size during round 1; the
    sampling arms when done, with those that earned another try); empty when none
    converged."""


def walk_order(
    sizes: tuple[int, ...],
    start: int,
    outcome: Mapping[int, bool],
    admit: Callable[[int], bool] = lambda b: True,
    defer: Callable[[int], bool] = lambda b: False,
    first: Callable[[list[int]], int] = lambda held: 0,
) -> Iterator[int]:
    """Visit ``start``, then smaller sizes downwards until one fails, then larger ones upwards
    until one fails; a size ``admit`` rejects is passed over unvisited. A size ``defer``
    holds back (its step was stopped at the exploration budget's cap) ends its direction for
    now: the walk goes on in the other one and comes back to the held sizes last, ``first``
    choosing which (an index into them). ``outcome``, ``admit``, ``defer`` and ``first`` are
    consulted lazily, as the walk's results arrive."""
    yield start
    held: list[tuple[int, Iterator[int]]] = []
    for direction in (reversed([b for b in sizes if b < start]), [b for b in sizes if b > start]):
        rest = iter(direction)
        for b in rest:
            if not admit(b):
                continue
            if defer(b):
                held.append((b, rest))
                break
            yield b
            if not outcome[b]:
                break
    while held:
        size, rest = held.pop(first([size for size, _ in held]))
        for b in itertools.chain([size], rest):
            if not admit(b):
                continue
            yield b
            if not outcome[b]:
                break


@dataclass
class _Replay:
    """The exploration history as the walk reads it, step by step."""

    history: tuple[ExplorationStep, ...]
    deferred: tuple[ExplorationStep, ...]
    """The steps stopped at the budget's cap: no verdict, the walk holds their size back."""
    order: Callable[[int], float]
    """A held size's cost at its most favourable: the walk comes back to the lowest first."""
    at: int = 0
    """Steps of ``history`` replayed so far."""

    def take(self, batch_size: int) -> ExplorationStep | None:
        """The history's next step, which must be ``batch_size``'s; None past its end."""
        if self.at == len(self.history):
            return None
        step = self.history[self.at]
        self.at += 1
        if step.batch_size != batch_size:
            raise HistoryOutOfOrderError(
                f"exploration history out of order: expected batch size {batch_size}, found "
                f"{step.batch_size} (was the job's history edited?)"
            )
        return step

    def defer(self, b: int) -> bool:
        """Whether ``b``'s step was stopped at the cap at this point of the walk."""
        history, at = self.history, self.at
        after = history[at - 1].seq if at else -1
        before = history[at].seq if at < len(history) else math.inf
        return any(s.batch_size == b and after < s.seq < before for s in self.deferred)

    def first(self, held: list[int]) -> int:
        """Which held size the walk comes back to first: the one the history went to, else
        the cheapest at its most favourable (``order``: cheapest risk first)."""
        history, at = self.history, self.at
        if at < len(history) and history[at].batch_size in held:
            return held.index(history[at].batch_size)
        return min(range(len(held)), key=lambda i: self.order(held[i]))


def pruning_state(
    config: JobConfig,
    history: tuple[ExplorationStep, ...],
    params: PolicyParameters = DEFAULT_PARAMETERS,
    deferred: tuple[ExplorationStep, ...] = (),
    order: Callable[[int], float] = lambda b: 0.0,
) -> PruningState:
    """Replay the exploration history through two pruning rounds to find where it stands.

    Two differences from the paper, both about sizes that cannot be the optimum:

    * in either round, a step that reached the target at a cost the best size seen cannot
      lose to (:func:`cannot_win`) ends the walk in its direction, as a failure does;
    * round 2 does not revisit a size whose cost so far makes it implausible as the optimum
      (:func:`is_dominated`); such a size is dropped, but unlike a failure it does not end its
      direction. Upstream re-runs every converged size once more, and on jobs whose default
      is near the optimum that exploration costs more than it returns.

    And one about the exploration budget: a step stopped at the budget's cap (``deferred``,
    censored: it says only that the size costs more than the cap) is no verdict. The walk
    defers that size: it goes on in the other direction first and comes back to it last,
    when the budget can pay for a verdict (:func:`walk_order`).

    A job with a ``window_size`` keeps the paper's rules: a window says its costs drift, and
    a size dropped now could never return as the optimum after a drift (docs/drift.md).
    """
    sizes, start = config.batch_sizes, config.default_batch_size
    judge = config.window_size is None  # see cannot_win
    replay = _Replay(history, deferred, order)
    costs: dict[int, list[float]] = {}  # the successful steps' costs so far, per size
    for round_number in range(1, params.pruning_rounds + 1):
        outcome: dict[int, bool] = {}
        admit = (
            (lambda b: True)
            if round_number == 1 or not judge
            else (lambda b: not is_dominated(b, costs, params))
        )
        for b in walk_order(sizes, start, outcome, admit, replay.defer, replay.first):
            step = replay.take(b)
            if step is None:
                return PruningState(b, round_number, sizes)
            outcome[b] = step.succeeded and not (judge and cannot_win(b, step.cost, costs, params))
            if step.succeeded:
                costs.setdefault(b, []).append(step.cost)
        sizes = tuple(b for b in sizes if outcome.get(b))
        if not sizes:  # nothing converged: only sizes that earn another try remain
            return PruningState(None, round_number, ())
        start = min(sizes, key=lambda b: sum(costs[b]) / len(costs[b]))
    return PruningState(None, params.pruning_rounds, sizes)


def walk_state(
    snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> PruningState:
    """:func:`pruning_state` of the snapshot's walk, with its deferred steps, coming back
    first to the held size that is cheapest at its most favourable (``budget.cost_range``):
    the one that could save most."""

    def order(batch_size: int) -> float:
        estimate = estimated_cost(snapshot, batch_size)
        return math.inf if estimate is None else estimate.lowest

    return pruning_state(snapshot.config, snapshot.exploration, params, snapshot.deferred, order)


def cannot_win(
    batch_size: int,
    cost: float,
    costs: Mapping[int, list[float]],
    params: PolicyParameters = DEFAULT_PARAMETERS,
) -> bool:
    """Whether a pruning step of ``batch_size`` that reached the target at ``cost`` shows its
    size cannot be the optimum: its mean cost with this step is above the best other size's
    mean by ``params.cannot_win_z`` of the job's run-to-run spreads (pooled coefficient of
    variation, 14 % before any size has run twice: a factor of 1.56). ``costs``: the
    successful pruning costs before this step, per size.

    The walk then treats the step as the end of its direction, as it treats a failure: the
    sizes beyond it, further from the best, are dearer still on every trace we have, and the
    paper would run each of them up to ``beta`` times the best and then retry the
    recurrence. Unlike a failure, the size keeps its run (it reached the target, so the
    recurrence has its model) and is dropped as dominated: it returns only after a drift
    that drift detection finds. A job with a ``window_size`` walks as the paper does, as it
    keeps dominated sizes (see :func:`pruning_state`).
    """
    others = [ArmStats.of(c) for b, c in costs.items() if b != batch_size]
    if not others:
        return False
    mine = ArmStats.of([*costs.get(batch_size, []), cost])
    best = min(s.mean for s in others)
    return mine.mean > best * (1.0 + params.cannot_win_z * pooled_cost_cv([*others, mine]))


def is_dominated(
    batch_size: int,
    costs: Mapping[int, list[float]],
    params: PolicyParameters = DEFAULT_PARAMETERS,
) -> bool:
    """Whether the posterior probability that this size's mean cost is below the best observed
    size's is under ``params.dominance_probability`` (Gaussian beliefs of :mod:`posterior`)."""
    if batch_size not in costs:
        return False
    stats = {b: ArmStats.of(c) for b, c in costs.items()}
    best = min(stats, key=lambda b: stats[b].mean)
    if best == batch_size:
        return False
    cv = pooled_cost_cv(stats.values())
    mine, leader = arm_posterior(stats[batch_size], cv), arm_posterior(stats[best], cv)
    z = (leader.mean - mine.mean) / math.sqrt(mine.variance + leader.variance)
    return 0.5 * math.erfc(-z / math.sqrt(2)) < params.dominance_probability

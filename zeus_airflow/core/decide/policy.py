"""Batch-size policies: Zeus (pruning, then Thompson sampling) and the paper's baselines.

A policy is pure: it reads a :class:`~zeus_airflow.core.domain.JobSnapshot` (the engine
builds it from the state the store read inside its decision transaction, ``snapshot.job_snapshot``)
and returns a :class:`~zeus_airflow.core.domain.Decision`. It never touches the database or a
device, so the same code decides in the simulator, the operator and the tests, and any worker
can decide for any job.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.decide.budget import (
    RESERVE_Z,
    CostEstimate,
    budget_status,
    cannot_beat,
    cost_range,
    predictive_upper,
)
from zeus_airflow.core.decide.posterior import (
    PRIOR_COST_CV,
    Posterior,
    arm_posterior,
    pooled_cost_cv,
)
from zeus_airflow.core.domain import (
    STOPPED_REASONS,
    ArmStats,
    BudgetCap,
    BudgetStatus,
    CostReference,
    Decision,
    ExplorationStep,
    JobSnapshot,
    Phase,
    SizeEvidence,
)


@dataclass(frozen=True)
class PolicyParameters:
    """The Zeus policy's tuning: the same for every job (a job's own settings are its
    ``JobConfig``). The defaults are the values every figure in ``bench/`` was measured with."""

    pruning_rounds: int = 2
    """Rounds of the pruning walk (paper Alg. 3)."""
    dominance_probability: float = 0.05
    """Round 2 skips a size less likely than this to beat the best one seen (see
    :func:`pruning_state`)."""
    cannot_win_z: float = 4.0
    """A pruning step whose cost passes the best mean seen so far by this many run-to-run
    spreads cannot be the optimum: the walk ends its direction there (see
    :func:`cannot_win`)."""
    readmit_growth: float = 1.1
    """A size pruned only by early stops gets another try once the early-stop bound has
    grown past this many times the highest bound that stopped it (see
    :func:`earned_another_try`)."""
    readmit_z: float = 2.0
    """The growth must hold at the low edge of the best mean's interval, this many standard
    errors below it: a best mean that moved within its own noise says nothing about the old
    bound."""


DEFAULT_PARAMETERS = PolicyParameters()


class NoFeasibleBatchSizeError(RuntimeError):
    """No batch size is left to try, and the job was asked to fail rather than train anyway."""


class HistoryOutOfOrderError(RuntimeError):
    """The exploration history is not the one the pruning rounds would have asked for: another
    policy wrote it (the simulator's Default and Grid search baselines) or it was edited. The
    reports catch this, and only this, to show such a job without the Zeus policy's view."""


class Policy(Protocol):
    name: str

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision: ...


def best_success_cost(snapshot: JobSnapshot) -> float | None:
    """A robust estimate of the best achievable cost: the lowest per-size *mean* of successful
    runs. Not the lowest single run: one lucky run would early-stop every other size."""
    return min(snapshot.success_mean_cost.values(), default=None)


def early_stop_bound(snapshot: JobSnapshot) -> float | None:
    """Training cost above which a try stops: ``beta x`` :func:`best_success_cost`."""
    best = best_success_cost(snapshot)
    return None if best is None else snapshot.config.beta * best


# --- pruning (paper Alg. 3, lines 1-9) ----------------------------------------------------------
@dataclass(frozen=True)
class PruningState:
    next_batch_size: int | None
    """Next size to explore; None once both rounds are done."""
    round: int
    survivors: tuple[int, ...]
    """Sizes that converged in the last finished round (every size during round 1; the
    sampling arms when done, with those that earned another try); empty when none
    converged."""


def _walk(
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
    when the budget can pay for a verdict (:func:`_walk`).

    A job with a ``window_size`` keeps the paper's rules: a window says its costs drift, and
    a size dropped now could never return as the optimum after a drift (docs/drift.md).
    """
    sizes, start = config.batch_sizes, config.default_batch_size
    judge = config.window_size is None  # see cannot_win
    at = 0  # steps of ``history`` replayed so far
    costs: dict[int, list[float]] = {}

    def defer(b: int) -> bool:
        """Whether ``b``'s step was stopped at the cap at this point of the walk."""
        after = history[at - 1].seq if at else -1
        before = history[at].seq if at < len(history) else math.inf
        return any(s.batch_size == b and after < s.seq < before for s in deferred)

    def first(held: list[int]) -> int:
        """Which held size the walk comes back to first: the one the history went to, else
        the cheapest at its most favourable (``order``: cheapest risk first)."""
        if at < len(history) and history[at].batch_size in held:
            return held.index(history[at].batch_size)
        return min(range(len(held)), key=lambda i: order(held[i]))

    for round_number in range(1, params.pruning_rounds + 1):
        outcome: dict[int, bool] = {}
        admit = (
            (lambda b: True)
            if round_number == 1 or not judge
            else (lambda b: not is_dominated(b, costs, params))
        )
        for b in _walk(sizes, start, outcome, admit, defer, first):
            if at == len(history):
                return PruningState(b, round_number, sizes)
            step = history[at]
            at += 1
            if step.batch_size != b:
                raise HistoryOutOfOrderError(
                    f"exploration history out of order: expected batch size {b}, found "
                    f"{step.batch_size} (was the job's history edited?)"
                )
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


# --- policies ----------------------------------------------------------------------------------
class ZeusPolicy:
    """Pruning exploration, then Gaussian Thompson sampling over the sizes in play.

    ``fallback``: with no size left in play, train the best known one anyway (phase
    ``fallback``); False raises :class:`NoFeasibleBatchSizeError` instead, before any trial
    starts, for users who want such a job to fail its task. ``params``: its tuning.
    """

    name = "zeus"

    def __init__(
        self, fallback: bool = True, params: PolicyParameters = DEFAULT_PARAMETERS
    ) -> None:
        self.fallback = fallback
        self.params = params

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        return within_budget(snapshot, self._explore(snapshot, rng))

    def _explore(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        """What the paper's policy, with our edge cases, would run next, budget aside."""
        state = walk_state(snapshot, self.params)
        bound = bound_for(snapshot)
        if state.next_batch_size is not None:
            b = state.next_batch_size
            if b in snapshot.in_flight or b in snapshot.excluded:
                # Its outcome is pending (or known bad now): while pruning, overlapping runs
                # take the best size known so far instead of exploring blindly (paper §4.4);
                # a retry after the budget stopped it delivers the model with it.
                best = best_known(snapshot, state.survivors)
                if best in snapshot.missed:
                    raise NoFeasibleBatchSizeError(missed_again(snapshot, best))
                busy: Phase = "concurrent" if b in snapshot.in_flight else "exploit"
                return Decision(best, busy, early_stop_cost=bound(best))
            return Decision(b, "pruning", early_stop_cost=bound(b))
        in_play = sizes_in_play(snapshot, state, self.params)
        if not in_play:
            fallback = best_success_size(snapshot)
            # Already run in this recurrence: without a bound (nothing had succeeded yet),
            # so the recurrence has its model; running it again would double the cost.
            if not self.fallback or fallback in snapshot.excluded:
                raise NoFeasibleBatchSizeError(infeasibility_report(snapshot, self.params))
            return Decision(
                fallback,
                "fallback",
                keep_power_limit=True,
                final=True,
                reason=infeasibility_report(snapshot, self.params),
            )
        arms = [b for b in in_play if b not in snapshot.excluded]
        if not arms:
            # Every size in play failed in this recurrence. After a drift all of them can
            # exceed a bound measured before it, so run the cheapest to the end: the
            # recurrence still yields a model, and its full cost tells the window what changed.
            # Not one that missed the target within max epochs: on the same data it would
            # miss again, at the same cost.
            stopped = tuple(b for b in in_play if b not in snapshot.missed)
            if not stopped:
                raise NoFeasibleBatchSizeError(missed_again(snapshot, *in_play))
            return Decision(cheapest(snapshot, stopped), "sampling", final=True)
        if snapshot.excluded:
            # A retry: this recurrence already paid for a failed try. Deliver the model with
            # the size known to be cheapest among those left, rather than explore now.
            choice = best_known(snapshot, tuple(arms))
        else:
            choice = thompson_sample(snapshot, arms, rng)
        observed_here = snapshot.observations.get(choice, ArmStats(0, 0.0, 0.0)).count > 0
        phase: Phase = (
            "sampling" if observed_here or choice not in snapshot.foreign_costs else "calibrate"
        )
        return Decision(choice, phase, early_stop_cost=bound(choice))


def missed_again(snapshot: JobSnapshot, *sizes: int) -> str:
    """Why a recurrence ends rather than run ``sizes`` again."""
    return (
        f"batch size {', '.join(map(str, sizes))} missed target_metric="
        f"{snapshot.config.target_metric} within max_epochs={snapshot.config.max_epochs} "
        "in this recurrence; run again on the same data it would miss again"
    )


EXPLORING_PHASES = ("pruning", "sampling", "calibrate")
"""Phases whose decision may run a size other than the best known one: they spend budget."""


PROBE_SHARE = 0.1
"""A size not priced yet is first tried once the budget's cap reaches this share of the best
mean cost (and one epoch's): enough for its profile's first slice, a few dozen steps, which
prices the rest (``budget.cost_range``)."""


def within_budget(snapshot: JobSnapshot, decision: Decision) -> Decision:
    """``decision`` within the exploration budget (``core/decide/budget.py``).

    An exploring try (any size but the best known one) runs capped at what the books can
    pay (:func:`exploration_cap`), and only when that cap reaches what the try is worth
    (:func:`needed_cap`); otherwise the best known size runs instead (phase ``exploit``). A
    retry delivers the recurrence's model rather than explore (:func:`may_explore_now`). A
    known size other than the default one runs only when its upper cost fits
    (:func:`priced_exploit`)."""
    status = budget_status(
        snapshot.config, snapshot.ledger, snapshot.drift.cost_ratio if snapshot.drift else 1.0
    )
    if status is not None and too_short_to_price(snapshot):
        status = replace(status, exploring_fraction=0.0, savings_only=True)
    decision = replace(decision, budget=status)
    if snapshot.config.exploration_budget is None or decision.final:
        return decision
    best = best_success_size(snapshot)
    if decision.phase not in EXPLORING_PHASES or decision.batch_size == best:
        return priced_exploit(snapshot, decision, status)
    if status is not None and may_explore_now(snapshot, best):
        cap = exploration_cap(snapshot, status, best)
        if cap >= needed_cap(snapshot, decision, best):
            return capped(snapshot, decision, cap)
    if best in snapshot.excluded:
        # The best size already ran in this recurrence and missed: its model is the
        # recurrence's, as it would have been without Zeus when the best is the default size.
        raise NoFeasibleBatchSizeError(
            f"{budget_reason(status, decision)}; the recurrence ends with its last try"
        )
    exploit = Decision(
        best,
        "exploit",
        early_stop_cost=bound_for(snapshot)(best),
        budget=status,
        reason=budget_reason(status, decision),
    )
    return priced_exploit(snapshot, exploit, status)


def too_short_to_price(snapshot: JobSnapshot) -> bool:
    """Whether the job's runs are too short to price a size before its probe's cap (an
    epoch of the best size): that epoch is shorter than the profile's first slice (its
    warm-up and measured seconds at the highest limit), or a size was stopped at the cap
    that its power profile never priced. Such a job's probes cost an epoch each and learn
    only that epoch's cost, which a short job's run-to-run noise drowns; a budget spent on
    them does not pay back within weeks, so it explores only with what it saved, as in its
    first week."""
    ledger = snapshot.ledger
    if any(b not in snapshot.sample_costs for b in ledger.censored):
        return True
    if not snapshot.success_mean_cost:
        return False
    epoch_s = ledger.success_epoch_s.get(best_success_size(snapshot))
    profiler = snapshot.config.profiler
    return epoch_s is not None and epoch_s < profiler.warmup_s + profiler.profile_s


def may_explore_now(snapshot: JobSnapshot, best: int) -> bool:
    """Whether the recurrence may still explore: a retry delivers the model rather than
    explore, unless what the recurrence spent so far was no more than a profile's worth (a
    size priced and stopped at its first steps)."""
    if not snapshot.excluded:
        return True
    best_cost = snapshot.success_mean_cost.get(best, math.inf)
    return snapshot.ledger.recurrence_spent <= PROBE_SHARE * best_cost


def priced_exploit(
    snapshot: JobSnapshot, decision: Decision, status: BudgetStatus | None
) -> Decision:
    """``decision``, which runs a known size, or the default size instead when ``decision``'s
    size is another one whose upper cost (``RESERVE_Z`` spreads) does not fit what is left
    of the allowance: a best size with a lucky run or two, or one whose true cost is near
    Default's, must not take the job over its budget. The default size's run, to its end,
    prices its own Default (it trains on the same data), so it always fits."""
    b0 = snapshot.config.default_batch_size
    b = decision.batch_size
    if status is None or decision.phase == "fallback":
        return decision
    if b == b0:  # the first rule: the recurrence gets the model it would have without Zeus
        return decision
    stats = snapshot.observations.get(b)
    room = status.room()
    if stats is not None and stats.count:
        cv = max(pooled_cost_cv(snapshot.observations.values()), PRIOR_COST_CV)
        if predictive_upper(stats, cv, RESERVE_Z) <= room:
            return decision
    if b0 in snapshot.excluded:
        # The default size already ran in this recurrence and missed: its model is the
        # recurrence's, as it would have been without Zeus.
        raise NoFeasibleBatchSizeError(
            f"batch size {b}'s upper cost does not fit the exploration budget left "
            f"({status.left_before_runs():.2f} Default runs' worth); the recurrence ends "
            "with its last try, as it would without Zeus"
        )
    return Decision(
        b0,
        "exploit",
        budget=status,
        reason=(
            f"batch size {b}'s upper cost does not fit the exploration budget left "
            f"({status.left_before_runs():.2f} Default runs' worth), so the default batch size "
            f"{b0} runs"
        ),
    )


def exploration_cap(snapshot: JobSnapshot, status: BudgetStatus, best: int) -> float:
    """The most an explored try may cost and still leave room, should it be stopped, for the
    recurrence to end with a run that fits the allowance: the best size's (its upper cost,
    ``RESERVE_Z`` spreads), or the default size's, which prices its own Default (it trains
    on the same data, and at its profiled limit costs at most that) and so needs only the
    recurrence's share of the allowance, less the budget's fraction of its own cost."""
    room = status.room()
    config = snapshot.config
    cv = max(pooled_cost_cv(snapshot.observations.values()), PRIOR_COST_CV)
    b0 = snapshot.observations.get(config.default_batch_size)
    share = status.exploring_fraction * b0.mean * max(1.0 - RESERVE_Z * cv, 0.0) if b0 else 0.0
    with_default = status.room(before=True) + share
    stats = snapshot.observations.get(best)
    if best == config.default_batch_size or stats is None or stats.count == 0:
        return with_default
    return max(with_default, room - predictive_upper(stats, cv, RESERVE_Z))


def verdict_cost(snapshot: JobSnapshot) -> float:
    """The cost at which a size cannot win (:func:`cannot_win`): the best mean plus
    ``cannot_win_z`` of the job's run-to-run spreads; infinite before any size succeeded."""
    best = min(snapshot.success_mean_cost.values(), default=None)
    if best is None:
        return math.inf
    cv = pooled_cost_cv(snapshot.observations.values())
    return best * (1.0 + DEFAULT_PARAMETERS.cannot_win_z * cv)


def nearest_epochs(snapshot: JobSnapshot, batch_size: int) -> tuple[int, float] | None:
    """The nearest size (in log scale) with runs that reached the target, and their mean
    epochs; None before any."""
    epochs = snapshot.ledger.success_epochs
    if not epochs:
        return None
    nearest = min(epochs, key=lambda b: abs(math.log(b / batch_size)))
    return nearest, epochs[nearest]


def expected_epochs(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The epochs ``batch_size`` is expected to need: as many as its nearest size with runs
    that reached the target (``budget.cost_range``, the expected case)."""
    near = nearest_epochs(snapshot, batch_size)
    return None if near is None else near[1]


def fewest_epochs(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The fewest epochs ``batch_size`` can be expected to need, from its nearest size with
    runs that reached the target: as many (a larger batch needs as many samples), or, for a
    smaller batch, as many steps (at best it needs no more steps: McCandlish et al., "An
    empirical model of large-batch training", 2018)."""
    near = nearest_epochs(snapshot, batch_size)
    if near is None:
        return None
    size, epochs = near
    return epochs * min(1.0, batch_size / size)


def cost_reference(snapshot: JobSnapshot, batch_size: int) -> CostReference | None:
    """The size to price ``batch_size`` by (``budget.cost_range``): the nearest one in log
    scale whose runs reached the target and whose cost per sample is known; None if none."""
    sizes = [b for b in snapshot.success_mean_cost if b in snapshot.sample_costs]
    if not sizes:
        return None
    near = min(sizes, key=lambda b: abs(math.log(b / batch_size)))
    stats = snapshot.observations.get(near, ArmStats(0, 0.0, 0.0))
    cv = max(pooled_cost_cv(snapshot.observations.values()), PRIOR_COST_CV)
    return CostReference(
        near,
        snapshot.success_mean_cost[near],
        snapshot.sample_costs[near],
        cv / math.sqrt(max(stats.count, 1)),
    )


def estimated_cost(snapshot: JobSnapshot, batch_size: int) -> CostEstimate | None:
    """What a run of ``batch_size`` is expected to cost (``budget.cost_range``), from its
    cost per sample; None before it is known, or without a reference."""
    reference = cost_reference(snapshot, batch_size)
    sample_cost = snapshot.sample_costs.get(batch_size)
    if reference is None or sample_cost is None:
        return None
    return cost_range(reference, batch_size, sample_cost)


def needed_cap(snapshot: JobSnapshot, decision: Decision, best: int) -> float:
    """The cap below which trying ``decision``'s size is not worth it yet: an arm with
    successful runs, its upper cost (``CONFIDENCE_Z``); a priced size, its expected cost; a
    size not priced yet (or priced as unable to beat the best), a probe's share of the best
    mean (its price comes a few dozen steps in, and the try stops there unless it is
    expected to finish within the cap). A size a probe stopped at the cap needs an epoch
    more than it had, and its expected cost; one stopped later, after its price let it go on,
    a cap that judges it. Never above the cost at which a stop is a verdict (its early-stop
    bound, or where it cannot win)."""
    b = decision.batch_size
    cv = pooled_cost_cv(snapshot.observations.values())
    stats = snapshot.observations.get(b)
    if b in snapshot.success_mean_cost and stats is not None and stats.count:
        need = predictive_upper(stats, cv)
    else:
        best_cost = snapshot.success_mean_cost.get(best, math.inf)
        estimate = estimated_cost(snapshot, b)
        if estimate is None or cannot_beat(estimate.lowest, best_cost):
            # Its profile prices it, or judges it, a few dozen steps in; the first epoch
            # runs whole, so the cap covers one, even at twice the best size's cost.
            epochs = expected_epochs(snapshot, b) or 1.0
            need = max(PROBE_SHARE, 2.0 / epochs) * best_cost
        else:
            need = estimate.expected
        stopped = snapshot.ledger.censored.get(b)
        lowest = censored_lowest(snapshot, b)
        if lowest is not None and cannot_beat(lowest, best_cost):
            need = PROBE_SHARE * best_cost  # judged at its first step (``BudgetCap``)
        elif stopped is not None and stopped.epochs > 1:
            # Priced as fitting, it ran on and still met the cap: only a cap that judges it
            # (where a stop is a verdict) is worth paying again.
            need = math.inf
        elif stopped is not None:  # an epoch more, and what it is expected to cost
            epochs = expected_epochs(snapshot, b) or 0.0
            need = max(need, stopped.cost + stopped.epoch_cost, stopped.epoch_cost * epochs)
    verdict = decision.early_stop_cost if decision.early_stop_cost is not None else math.inf
    if snapshot.config.window_size is None:
        verdict = min(verdict, verdict_cost(snapshot))
    return min(need, verdict)


def capped(snapshot: JobSnapshot, decision: Decision, cap: float) -> Decision:
    """``decision`` stopped at ``cap`` or its early-stop bound, whichever is lower (a stop at
    a cap below the bound is censored, ``budget_cap``, unless the cap shows the size cannot
    win), and priced as it goes (``BudgetCap``): it stops as soon as its cost, predicted
    from its power profile or its epochs, passes the cost at which it cannot win
    (``cannot_win``, for jobs that judge so) or is not expected to fit the cap. A walk step
    not priced yet runs as a probe, capped at an epoch of the best size, until its price
    lets it go on."""
    bound = decision.early_stop_cost
    b = decision.batch_size
    judge = snapshot.config.window_size is None
    verdict = verdict_cost(snapshot) if judge else math.inf
    stop = cap if bound is None else min(cap, bound)
    # Predictions judge the walk's steps only. An arm Thompson sampling draws is judged by
    # its own costs: a prediction from its noisy epochs would stop runs that would have
    # finished, and a stop a few steps in is no cost to learn from.
    if decision.phase != "pruning" or b in snapshot.success_mean_cost:
        return replace(
            decision, early_stop_cost=stop, budget_cap=BudgetCap(verdict_cost=verdict, bound=bound)
        )
    probe = probe_cost(snapshot, b)
    return replace(
        decision,
        early_stop_cost=stop if probe is None else min(stop, probe),
        budget_cap=BudgetCap(
            verdict_cost=verdict,
            bound=bound,
            best_cost=min(snapshot.success_mean_cost.values(), default=math.inf),
            min_epochs=fewest_epochs(snapshot, b),
            expected_epochs=expected_epochs(snapshot, b),
            reference=cost_reference(snapshot, b),
            priced_cap=None if probe is None else stop,
            lowest_cost=censored_lowest(snapshot, b),
        ),
    )


def probe_cost(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The cap of a walk step nobody has priced yet (no cost per sample, no try stopped at
    the cap): an epoch of the best size. Its price raises it; a size that cannot be priced
    within it is stopped there, censored, with its cost per epoch learned. None: priced."""
    if batch_size in snapshot.sample_costs or batch_size in snapshot.ledger.censored:
        return None
    means = snapshot.success_mean_cost
    if not means:
        return None
    best = best_success_size(snapshot)
    epochs = snapshot.ledger.success_epochs.get(best)
    return None if not epochs else means[best] / epochs


def censored_lowest(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """What ``batch_size`` costs at its most favourable, from its latest try stopped at the
    cap: its cost per epoch times the fewest epochs it can need (``fewest_epochs``); None
    without such a try."""
    stopped = snapshot.ledger.censored.get(batch_size)
    fewest = fewest_epochs(snapshot, batch_size)
    if stopped is None or fewest is None:
        return None
    return stopped.epoch_cost * fewest


def budget_reason(status: BudgetStatus | None, wanted: Decision) -> str:
    """Why a decision exploited, for the log and the summary line."""
    want = f"batch size {wanted.batch_size} ({wanted.phase})"
    if status is None:
        return (
            f"exploration waits for the default batch size's first complete run (the "
            f"budget's reference), so {want} is not tried yet"
        )
    left = f"{status.left_before_runs():.2f} Default runs' worth left"
    if status.exploring_fraction == 0.0:
        when = (
            "a job whose runs are too short to price a size within a probe"
            if status.savings_only
            else "in its first week a job"
        )
        return (
            f"exploration budget: {when} explores only with what it saved, too little yet "
            f"for {want} ({left}), so the best known size runs"
        )
    return (
        f"exploration budget: {want} is not worth trying with what is left ({left}), so "
        "the best known size runs"
    )


def bound_for(snapshot: JobSnapshot) -> Callable[[int], float | None]:
    """The early-stop bound a size runs under: :func:`early_stop_bound`, except for the size
    whose mean successful cost sets it, which always runs to its end. The bound exists to cut
    short sizes that cannot beat the best one; stopping the best one itself (on a day whose
    data needs more epochs, on a busy machine) only adds a restart at a costlier size."""
    bound = early_stop_bound(snapshot)
    best = best_success_size(snapshot) if snapshot.success_mean_cost else None
    return lambda batch_size: None if batch_size == best else bound


# --- after pruning: which sizes are in play --------------------------------------------------
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
        or returned_after_drift(b, snapshot)
    ]
    return tuple(b for b in sizes if b in in_play or b in frontier(snapshot, in_play))


def frontier(snapshot: JobSnapshot, in_play: list[int]) -> set[int]:
    """Sizes the pruning walk never reached that are next to a size in play which reached
    the target: the walk stopped before them at a size that has since come back (a hard
    day's miss, an early stop the bound outgrew), so the reason it stopped no longer holds.
    Each is tried once, within the budget, like any untried arm; beyond it the walk goes on
    only if it reaches the target too."""
    sizes = sorted(snapshot.config.batch_sizes)
    walked = {s.batch_size for s in snapshot.exploration}
    stale = snapshot.drift.stale_mean if snapshot.drift else {}

    def unreached(b: int) -> bool:
        seen = snapshot.observations.get(b)
        return b not in walked and (seen is None or seen.count == 0) and b not in stale

    found: set[int] = set()
    for at, b in enumerate(sizes):
        if b in in_play and b in snapshot.success_mean_cost:
            found.update(n for n in sizes[max(at - 1, 0) : at + 2] if unreached(n))
    return found


def returned_after_drift(batch_size: int, snapshot: JobSnapshot) -> bool:
    """Whether a size round 2 dropped as dominated is back in play under drift detection.

    Dominance was judged on the data of its time. Once drift detection finds a change
    (``snapshot.drift``), such a size is an arm again; and once it has been sampled (it has
    more observations than its pruning runs), it stays one, so it does not drop out when
    the change leaves the detection's memory. Without drift detection, as in the paper
    with our round-2 change, it stays dropped. A size the budget priced out (``cannot_win``)
    stays out as a failed one does: a price, not a finished run, judged it.
    """
    if not snapshot.config.drift_detection:
        return False
    steps = [s for s in snapshot.exploration if s.batch_size == batch_size]
    if not steps or not all(s.succeeded for s in steps):
        return False  # never reached by the walk, or failed: earned_another_try decides
    if snapshot.drift is not None:
        return True
    seen = snapshot.observations.get(batch_size)
    return seen is not None and seen.count > len(steps)


def earned_another_try(
    batch_size: int, snapshot: JobSnapshot, params: PolicyParameters = DEFAULT_PARAMETERS
) -> bool:
    """Whether a size that pruning dropped for failing comes back into play.

    Pruning judged it on one try; noise, a slow machine or a lucky run elsewhere can make one
    try wrong, and a wrong prune must not last for good. It comes back when:

    * it failed only by early stops, and it has reached the target in some try (it converges:
      a size that reached the target is never pruned for an early stop alone), or the bound
      has since grown past ``params.readmit_growth x`` the highest bound that stopped it, beyond the
      noise of the best mean (:func:`settled_bound`: the bound was set by runs that now look
      lucky); each return needs the bound to grow again;
    * it missed the target (max epochs, or the function returned), and a later try of it
      reached the target (a fallback run, say): it converges after all; or every miss was
      in a recurrence whose data later runs showed to be hard (:func:`hard_recurrences`).

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
        if all(s.recurrence and s.recurrence in hard_recurrences(snapshot) for s in missed):
            return True
        last = max(s.seq for s in missed)
        return evidence.last_success_seq is not None and evidence.last_success_seq > last
    if evidence.last_success_seq is not None:
        return True
    bound = settled_bound(snapshot, params)
    if bound is not None and snapshot.drift is not None:
        # Costs moved by the drift's ratio: a bound grown by as much says nothing about the
        # runs that set the old one.
        bound /= snapshot.drift.cost_ratio
    return (
        bound is not None
        and evidence.max_stop_bound is not None
        and bound > params.readmit_growth * evidence.max_stop_bound
    )


def hard_recurrences(snapshot: JobSnapshot) -> set[str]:
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


def settled_bound(
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


def best_success_size(snapshot: JobSnapshot) -> int:
    """The size whose successful runs cost least on average; b0 when none succeeded, unless
    b0 trains nothing on the job's data (its latest walk step stopped ``no_steps``): then
    the size the walk last saw train."""
    means = snapshot.success_mean_cost
    if means:
        return min(means, key=lambda b: means[b])
    b0 = snapshot.config.default_batch_size
    walk = snapshot.exploration[::-1]  # latest first
    if next((s.stop_reason for s in walk if s.batch_size == b0), None) != "no_steps":
        return b0
    return next((s.batch_size for s in walk if s.stop_reason != "no_steps"), b0)


def best_known(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The cheapest candidate that has not failed in this recurrence (see :func:`cheapest`)."""
    allowed = tuple(b for b in candidates if b not in snapshot.excluded)
    return cheapest(snapshot, allowed or candidates)


def cheapest(snapshot: JobSnapshot, candidates: tuple[int, ...]) -> int:
    """The candidate with the lowest mean observed cost; b0 (else the first) when none has
    been observed."""
    observed = {
        b: snapshot.observations[b].mean
        for b in candidates
        if b in snapshot.observations and snapshot.observations[b].count
    }
    if observed:
        return min(observed, key=lambda b: observed[b])
    b0 = snapshot.config.default_batch_size
    return b0 if b0 in candidates else candidates[0]


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


class DefaultPolicy:
    """Baseline: the default batch size at the maximum power limit, every time."""

    name = "default"

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        limit = max(snapshot.power_limits_w) if snapshot.power_limits_w else None
        # The DAG without Zeus runs once a recurrence, whether or not it reaches the target.
        return Decision(
            snapshot.config.default_batch_size, "default", power_limit_w=limit, final=True
        )


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
            raise NoFeasibleBatchSizeError(
                "grid search found no (batch size, power limit) that reaches the target"
            )
        best = min(done, key=lambda s: s.cost)
        return Decision(
            best.batch_size, "exploit", power_limit_w=best.power_limit_w, early_stop_cost=bound
        )


POLICIES: dict[str, type[ZeusPolicy] | type[DefaultPolicy] | type[GridSearchPolicy]] = {
    "zeus": ZeusPolicy,
    "default": DefaultPolicy,
    "grid": GridSearchPolicy,
}

"""Exploring within the exploration budget (``core/decide/budget.py``): whether a try of a
size is worth its price now, the cap it runs under, and what runs instead when it is not."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from zeus_airflow.core.decide import budget
from zeus_airflow.core.decide.best import NoFeasibleBatchSizeError, best_success_size, bound_for
from zeus_airflow.core.decide.budget import (
    RESERVE_Z,
    CostEstimate,
    PricedCap,
    books_problem,
    budget_status,
    cannot_beat,
    cost_range,
    epoch_exponent,
    predictive_upper,
    priced_verdict,
)
from zeus_airflow.core.decide.parameters import DEFAULT_PARAMETERS
from zeus_airflow.core.decide.posterior import PRIOR_COST_CV, pooled_cost_cv
from zeus_airflow.core.domain import (
    ArmStats,
    BudgetCap,
    BudgetStatus,
    CostReference,
    Decision,
    JobSnapshot,
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
    pay (:func:`_exploration_cap`), and only when that cap reaches what the try is worth
    (:func:`needed_cap`); otherwise the best known size runs instead (phase ``exploit``). A
    retry delivers the recurrence's model rather than explore (:func:`may_explore_now`). A
    known size other than the default one runs only when its upper cost fits
    (:func:`priced_exploit`)."""
    status = budget_status(
        snapshot.config, snapshot.ledger, snapshot.drift.cost_ratio if snapshot.drift else 1.0
    )
    if status is not None and _too_short_to_price(snapshot):
        status = replace(status, exploring_fraction=0.0, savings_only=True)
    decision = replace(decision, budget=status)
    if snapshot.config.exploration_budget is None or decision.final:
        return decision
    problem = books_problem(snapshot.config, snapshot.ledger) if status is None else None
    if problem is not None and decision.phase != "fallback":
        return _default_size_instead(snapshot, decision, problem)
    best = best_success_size(snapshot)
    if decision.phase not in EXPLORING_PHASES or decision.batch_size == best:
        return priced_exploit(snapshot, decision, status)
    if status is not None and may_explore_now(snapshot, best):
        cap = worth_its_cap(snapshot, decision, best, _exploration_cap(snapshot, status, best))
        if cap is not None:
            return _capped(snapshot, decision, cap)
    if best in snapshot.excluded:
        # The best size already ran in this recurrence and missed: its model is the
        # recurrence's, as it would have been without Zeus when the best is the default size.
        raise NoFeasibleBatchSizeError(
            f"{_budget_reason(status, decision)}; the recurrence ends with its last try"
        )
    exploit = Decision(
        best,
        "exploit",
        early_stop_cost=bound_for(snapshot)(best),
        budget=status,
        reason=_budget_reason(status, decision),
    )
    return priced_exploit(snapshot, exploit, status)


def _default_size_instead(snapshot: JobSnapshot, wanted: Decision, problem: str) -> Decision:
    """The default size at its early-stop bound where the budget's books cannot be right
    (``budget.books_problem``): what the DAG would run without Zeus, until the rows that
    broke them are repaired; nothing is explored on books that cannot be read."""
    b0 = snapshot.config.default_batch_size
    reason = (
        f"exploration budget: {problem}, so the default batch size {b0} runs instead of "
        f"batch size {wanted.batch_size} ({wanted.phase})"
    )
    if b0 in snapshot.excluded:
        raise NoFeasibleBatchSizeError(f"{reason}; it already ran in this recurrence")
    if wanted.batch_size == b0:
        return replace(wanted, reason=wanted.reason or reason)
    return Decision(b0, "exploit", early_stop_cost=bound_for(snapshot)(b0), reason=reason)


def _too_short_to_price(snapshot: JobSnapshot) -> bool:
    """Whether the job's runs are too short to price a size before its probe's cap (an
    epoch of the best size): that epoch is shorter than the profile's first slice (its
    warm-up and measured seconds at the highest limit), or a size was stopped at the cap
    that neither its power profile nor its own steps priced (where limits cannot move, a
    probe's steps price it: :func:`_prices`). Such a job's probes cost an epoch each and learn
    only that epoch's cost, which a short job's run-to-run noise drowns; a budget spent on
    them does not pay back within weeks, so it explores only with what it saved, as in its
    first week."""
    ledger = snapshot.ledger
    if any(_sample_cost(snapshot, b) is None for b in ledger.censored):
        return True
    if not snapshot.success_mean_cost:
        return False
    best = best_success_size(snapshot)
    if best in snapshot.run_sample_costs:
        return False  # a fixed limit: a probe's own steps price it, however short
    epoch_s = ledger.success_epoch_s.get(best)
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


def _exploration_cap(snapshot: JobSnapshot, status: BudgetStatus, best: int) -> float:
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


def _nearest_epochs(snapshot: JobSnapshot, batch_size: int) -> tuple[int, float] | None:
    """The nearest size (in log scale) with runs that reached the target, and their mean
    epochs; None before any."""
    epochs = snapshot.ledger.success_epochs
    if not epochs:
        return None
    nearest = min(epochs, key=lambda b: abs(math.log(b / batch_size)))
    return nearest, epochs[nearest]


def _expected_epochs(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The epochs ``batch_size`` is expected to need: as many as its nearest size with runs
    that reached the target (``budget.cost_range``, the expected case)."""
    near = _nearest_epochs(snapshot, batch_size)
    return None if near is None else near[1]


def _fewest_epochs(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The fewest epochs ``batch_size`` can be expected to need, from its nearest size with
    runs that reached the target: as many (a larger batch needs as many samples), or, for a
    smaller batch, as many steps (at best it needs no more steps: McCandlish et al., "An
    empirical model of large-batch training", 2018)."""
    near = _nearest_epochs(snapshot, batch_size)
    if near is None:
        return None
    size, epochs = near
    return epochs * min(1.0, batch_size / size)


def _prices(snapshot: JobSnapshot, batch_size: int) -> Mapping[int, float]:
    """The costs per sample ``batch_size`` is priced in: its power profile's where it has
    one, else, where limits cannot move, its own tries' steps at the job's common limit
    (``snapshot.run_sample_costs``). One unit per price: a size and its reference are never
    priced one from a profile slice and the other from whole tries."""
    if batch_size not in snapshot.sample_costs and batch_size in snapshot.run_sample_costs:
        return snapshot.run_sample_costs
    return snapshot.sample_costs


def _sample_cost(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """``batch_size``'s cost per sample in its own unit (:func:`_prices`); None: unpriced."""
    return _prices(snapshot, batch_size).get(batch_size)


def _cost_reference(
    snapshot: JobSnapshot, batch_size: int, prices: Mapping[int, float] | None = None
) -> CostReference | None:
    """The size to price ``batch_size`` by (``budget.cost_range``): the nearest one in log
    scale whose runs reached the target and whose cost per sample is known in ``prices``
    (:func:`_prices`' by default); None if none."""
    prices = _prices(snapshot, batch_size) if prices is None else prices
    sizes = [b for b in snapshot.success_mean_cost if b in prices]
    if not sizes:
        return None
    near = min(sizes, key=lambda b: abs(math.log(b / batch_size)))
    stats = snapshot.observations.get(near, ArmStats(0, 0.0, 0.0))
    pooled = pooled_cost_cv(snapshot.observations.values())
    cv = max(pooled, PRIOR_COST_CV)
    return CostReference(
        near,
        snapshot.success_mean_cost[near],
        prices[near],
        mean_spread=cv / math.sqrt(max(stats.count, 1)),
        cv=pooled,
        runs=max(stats.count, 1),
        epoch_exponent=epoch_exponent(
            snapshot.ledger.success_epochs,
            {b: stats.count for b, stats in snapshot.observations.items()},
            pooled,
            near,
            batch_size,
        ),
        epoch_prior_shape=_epoch_prior_shape(snapshot, prices),
        drift_spread=snapshot.drift.stale_spread if snapshot.drift else 0.0,
    )


def _epoch_prior_shape(snapshot: JobSnapshot, prices: Mapping[int, float]) -> float | None:
    """The epochs' prior where limits cannot move (``budget.FIXED_LIMIT_EPOCH_PRIOR_SHAPE``)
    and a slice in a size's own first run prices it; None: the usual one, as for a price
    from whole tries' steps (a job of runs shorter than a slice)."""
    sliced = snapshot.limits_fixed and prices is snapshot.sample_costs
    return budget.FIXED_LIMIT_EPOCH_PRIOR_SHAPE if sliced else None


def estimated_cost(snapshot: JobSnapshot, batch_size: int) -> CostEstimate | None:
    """What a run of ``batch_size`` is expected to cost (``budget.cost_range``), from its
    cost per sample; None before it is known, or without a reference."""
    reference = _cost_reference(snapshot, batch_size)
    sample_cost = _sample_cost(snapshot, batch_size)
    if reference is None or sample_cost is None:
        return None
    return cost_range(reference, batch_size, sample_cost)


def worth_its_cap(snapshot: JobSnapshot, decision: Decision, best: int, cap: float) -> float | None:
    """The cap an explored try of ``decision``'s size runs under, at most ``cap`` (what the
    books can pay); None when it is not worth trying under it. A walk step priced from its
    cost per sample runs under the cap at which it is expected to pay back most over
    ``payback_horizon`` runs (``budget.priced_cap``), and waits while that is none of those
    the books can pay; one that cannot pay back under any cap is judged at its first step,
    as one that cannot beat the best (its price stops it: ``TrainingRun._priced_at``).
    Every other try needs ``cap`` to reach what it is worth (:func:`needed_cap`)."""
    estimate = _priced_step(snapshot, decision)
    best_cost = snapshot.success_mean_cost.get(best, math.inf)
    if estimate is not None and estimate.open_belief:
        verdict = priced_verdict(
            estimate,
            best_cost,
            snapshot.config.payback_horizon,
            cap,
            cost_margin(snapshot),
            _cap_growth(snapshot),
        )
        if verdict == "wait":
            return None
        if isinstance(verdict, PricedCap):
            return verdict.cap
    return cap if cap >= needed_cap(snapshot, decision, best) else None


def _cap_growth(snapshot: JobSnapshot) -> float:
    """How much the books' cap grows a run: the budget's share of a Default run."""
    status = budget_status(
        snapshot.config, snapshot.ledger, snapshot.drift.cost_ratio if snapshot.drift else 1.0
    )
    return 0.0 if status is None else status.exploring_fraction * status.default_cost


def _priced_step(snapshot: JobSnapshot, decision: Decision) -> CostEstimate | None:
    """The price of a walk step whose size has no runs of its own that reached the target,
    from its cost per sample (:func:`estimated_cost`), given what a try of it stopped at the
    cap showed (``CostEstimate.given_at_least``); None for any other try, before it is
    priced, and where it cannot beat the best size even at its most favourable."""
    b = decision.batch_size
    if not _judged_by_price(snapshot, decision):
        return None
    estimate = estimated_cost(snapshot, b)
    best_cost = snapshot.success_mean_cost.get(best_success_size(snapshot), math.inf)
    if estimate is None or cannot_beat(estimate.lowest, best_cost):
        return None
    stopped = snapshot.ledger.censored.get(b)
    if stopped is None:
        return estimate
    # That day's data may have been a hard one: its draw is the job's run-to-run spread.
    day = max(1.0 - RESERVE_Z * pooled_cost_cv(snapshot.observations.values()), 0.0)
    return estimate.given_at_least((stopped.cost + stopped.epoch_cost) * day)


def _judged_by_price(snapshot: JobSnapshot, decision: Decision) -> bool:
    """Whether ``decision``'s try is weighed by its price before it is made
    (``budget.cost_range``): a walk step of a size that never reached the target, or a
    sampling arm with no cost of its own yet (a size the walk never reached, or one a price
    dropped, back in play: ``in_play.repriced``). An arm with costs is judged by them."""
    b = decision.batch_size
    if b in snapshot.success_mean_cost:
        return False
    if decision.phase == "pruning":
        return True
    seen = snapshot.observations.get(b)
    return decision.phase == "sampling" and (seen is None or seen.count == 0)


def cost_margin(snapshot: JobSnapshot) -> float:
    """A run's own noise as a factor over its cost: one of the job's run-to-run spreads
    (pooled, at least the prior's) above 1."""
    return 1.0 + max(pooled_cost_cv(snapshot.observations.values()), PRIOR_COST_CV)


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
        if estimate is None:
            # Its profile prices it, or judges it, a few dozen steps in; the first epoch
            # runs whole, so the cap covers one, even at twice the best size's cost.
            epochs = _expected_epochs(snapshot, b) or 1.0
            need = max(PROBE_SHARE, 2.0 / epochs) * best_cost
        else:  # priced, and not worth a try (``worth_its_cap``): judged at its first step
            need = PROBE_SHARE * best_cost
        stopped = snapshot.ledger.censored.get(b)
        lowest = _censored_lowest(snapshot, b)
        if lowest is not None and cannot_beat(lowest, best_cost):
            need = PROBE_SHARE * best_cost  # judged at its first step (``BudgetCap``)
        elif stopped is not None and stopped.epochs > 1:
            # Priced as fitting, it ran on and still met the cap: only a cap that judges it
            # (where a stop is a verdict) is worth paying again.
            need = math.inf
        elif stopped is not None:  # an epoch more, and what it is expected to cost
            epochs = _expected_epochs(snapshot, b) or 0.0
            need = max(need, stopped.cost + stopped.epoch_cost, stopped.epoch_cost * epochs)
    verdict = decision.early_stop_cost if decision.early_stop_cost is not None else math.inf
    if snapshot.config.window_size is None:
        verdict = min(verdict, verdict_cost(snapshot))
    return min(need, verdict)


def _capped(snapshot: JobSnapshot, decision: Decision, cap: float) -> Decision:
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
    # finished, and a stop a few steps in is no cost to learn from (a sampling try's cost is
    # an observation of its arm). An arm with no cost yet had its price weighed before the
    # try (``worth_its_cap``), which chose its cap.
    if decision.phase != "pruning" or b in snapshot.success_mean_cost:
        return replace(
            decision, early_stop_cost=stop, budget_cap=BudgetCap(verdict_cost=verdict, bound=bound)
        )
    probe = _probe_cost(snapshot, b)
    return replace(
        decision,
        early_stop_cost=stop if probe is None else min(stop, probe),
        budget_cap=BudgetCap(
            verdict_cost=verdict,
            bound=bound,
            best_cost=min(snapshot.success_mean_cost.values(), default=math.inf),
            min_epochs=_fewest_epochs(snapshot, b),
            expected_epochs=_expected_epochs(snapshot, b),
            # Priced as it trains by its profile: against a profile-priced reference only.
            reference=_cost_reference(snapshot, b, snapshot.sample_costs),
            priced_cap=None if probe is None else stop,
            lowest_cost=_censored_lowest(snapshot, b),
            horizon_runs=snapshot.config.payback_horizon,
            cost_margin=cost_margin(snapshot),
            cap_growth=_cap_growth(snapshot),
        ),
    )


def _probe_cost(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """The cap of a walk step nobody has priced yet (no cost per sample, no try stopped at
    the cap): an epoch of the best size. Its price raises it; a size that cannot be priced
    within it is stopped there, censored, with its cost per epoch learned. None: priced."""
    if _sample_cost(snapshot, batch_size) is not None or batch_size in snapshot.ledger.censored:
        return None
    means = snapshot.success_mean_cost
    if not means:
        return None
    best = best_success_size(snapshot)
    epochs = snapshot.ledger.success_epochs.get(best)
    return None if not epochs else means[best] / epochs


def _censored_lowest(snapshot: JobSnapshot, batch_size: int) -> float | None:
    """What ``batch_size`` costs at its most favourable, from its latest try stopped at the
    cap: its cost per epoch times the fewest epochs it can need (``fewest_epochs``); None
    without such a try."""
    stopped = snapshot.ledger.censored.get(batch_size)
    fewest = _fewest_epochs(snapshot, batch_size)
    if stopped is None or fewest is None:
        return None
    return stopped.epoch_cost * fewest


def _budget_reason(status: BudgetStatus | None, wanted: Decision) -> str:
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

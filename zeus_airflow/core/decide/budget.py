"""The exploration budget: a conservative bandit's books, and the prices they pay by
(docs/algorithm.md, "The exploration budget").

Wu, Shariff, Lattimore and Szepesvári ("Conservative Bandits", ICML 2016) keep a learner's
cumulative reward above ``(1 - alpha)`` times what a known baseline would have earned, by
playing an exploratory arm only when a pessimistic estimate of it keeps the books in credit,
and the baseline otherwise. Here the baseline is the Default configuration (the default batch
size at the GPUs' maximum power limit, what the DAG does without Zeus) and the reward a cost:
a job's cumulative cost stays within ``(1 + exploration_budget)`` times Default's over the
same recurrences.

The books (:func:`budget_status`, :func:`budget_after`): Default's cost of a recurrence in
which the default batch size ran to its end is known (the same steps on the same data, priced
at the maximum limit: ``RunOutcome.default_cost``); for the others it is estimated from those
runs, low (:func:`unknown_default_bound`). What is left of the allowance, in Default runs, is
one figure, the same in the decision log, the summary, the XComs, the store and the UI.

The prices (:func:`cost_range`, :func:`predictive_upper`): how much an explored try may cost
is the policy's to decide (``core/decide/exploring.py``, ``within_budget``); it caps the try at
what the books can pay while keeping room for the run that ends the recurrence, and prices a
size from its cost per sample, measured a few dozen steps into its first run.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from zeus_airflow.core.common.config import DRIFT_MEMORY, JobConfig
from zeus_airflow.core.decide.posterior import (
    PRIOR_COST_CV,
    PRIOR_DOF,
    cost_variance,
    pooled_cost_cv,
)
from zeus_airflow.core.domain import (
    ArmStats,
    BudgetLedger,
    BudgetStatus,
    CostReference,
    RunOutcome,
)

CONFIDENCE_Z = 1.0
"""Spreads of a new run above an arm's mean cost at which exploring it is worth a try: the
cap its try needs (``exploring.needed_cap``)."""
RESERVE_Z = 2.0
"""Spreads below or above an estimate that the books hold to where it guards the allowance:
Default's unknown costs are taken this far low, a known size's run that must end a recurrence
this far high, a reference's mean this far either way when it prices another size."""
FIRST_WEEK = 7
"""Recurrences in which exploration spends no budget, only what Zeus has saved so far (the
power profile may spend it, and pays it back): a job's first week of daily runs ends at or
below Default's cost."""
IMPOSSIBLE_OVERRUN_RUNS = 10.0
"""Default runs a recurrence over the allowance past which the books cannot be right: tries
capped at what the books pay, and Default's own size pricing itself, never overrun by that
much; a row no worker wrote (a forged or restored one) does (issue 48)."""
AT_ODDS = 100.0
"""How far one of Default's costs may lie from their median (either way) before the books
cannot be right: runs of one size on one job's data never differ a hundredfold."""
PRICE_MARGIN = 0.9
"""How far a size's most favourable price is trusted: it cannot beat the best size when even
this fraction of it is dearer (:func:`cannot_beat`)."""


# --- the books ------------------------------------------------------------------------------
def unknown_default_bound(ledger: BudgetLedger, recurrences: int) -> float:
    """A lower confidence bound (``RESERVE_Z`` standard deviations) of the Default
    configuration's total cost over ``recurrences`` recurrences in which it did not run: each
    day costs Default its own draw around the mean, and the mean itself is estimated from
    ``default_costs``."""
    if recurrences <= 0 or not ledger.default_costs:
        return 0.0
    stats = ArmStats.of(ledger.default_costs)
    spread = pooled_cost_cv([stats]) * stats.mean
    deviation = spread * math.sqrt(recurrences + recurrences**2 / stats.count)
    return max(recurrences * stats.mean - RESERVE_Z * deviation, 0.0)


def budget_status(
    config: JobConfig, ledger: BudgetLedger, cost_ratio: float = 1.0
) -> BudgetStatus | None:
    """Where the job's budget stands; None without a budget, before Default's cost is
    estimated (then only the default batch size may run: it is Default's own choice) or
    when the books say something impossible (:func:`books_problem`: the same).

    ``cost_ratio``: as :func:`_reckoned`."""
    status = _reckoned(config, ledger, cost_ratio)
    if status is None or _status_problem(status) is not None:
        return None
    return status


def books_problem(config: JobConfig, ledger: BudgetLedger) -> str | None:
    """What the books say that cannot be (a job far more over its allowance than capped
    tries can take it, one of Default's costs a hundredfold from the others); None when
    nothing. A row no worker wrote does that (a forged one, a bad restore): the budget then
    reads as unknown (:func:`budget_status`) until the rows are repaired."""
    status = _reckoned(config, ledger)
    return None if status is None else _status_problem(status)


def _status_problem(status: BudgetStatus) -> str | None:
    ledger = status.ledger
    if not status.default_cost > 0.0:
        return None  # no unit to count runs in: the books hold nothing yet
    left = status.left_runs()
    floor = -IMPOSSIBLE_OVERRUN_RUNS * (ledger.recurrences + 1)
    if not math.isfinite(left) or left < floor:
        return (
            f"its books leave {left:.3g} Default runs' worth of budget after "
            f"{ledger.recurrences} recurrence(s) (spent {ledger.spent_cost:.3g} against "
            f"Default's {status.default_total:.3g}): no capped try overruns that far"
        )
    costs = sorted(ledger.default_costs)
    median = costs[len(costs) // 2]
    if len(costs) >= 3 and (costs[-1] > AT_ODDS * median or costs[0] * AT_ODDS < median):
        return (
            f"Default's costs in its books are at odds with each other (from {costs[0]:.3g} "
            f"to {costs[-1]:.3g}, median {median:.3g}): runs of one size never differ "
            f"{AT_ODDS:g}-fold"
        )
    return None


def _reckoned(
    config: JobConfig, ledger: BudgetLedger, cost_ratio: float = 1.0
) -> BudgetStatus | None:
    """Where the job's budget stands as its books say, impossible or not (None without a
    budget or before Default's cost is estimated).

    ``cost_ratio``: how much costs moved since a change drift detection found (new over
    old). Default's runs before it priced the old data; on the new data Default would cost
    that much more, as every size does, and a budget priced on the old would stop the
    exploration the change calls for."""
    if config.exploration_budget is None or not ledger.default_costs:
        return None
    unknown = max(ledger.recurrences - ledger.known_recurrences, 0)

    def default_total(unknown: int) -> float:
        estimated = unknown_default_bound(ledger, unknown) * cost_ratio
        return ledger.known_default_cost + estimated

    fraction = config.exploration_budget
    mean = sum(ledger.default_costs) / len(ledger.default_costs)
    return BudgetStatus(
        default_total=default_total(unknown),
        default_total_before=default_total(max(unknown - 1, 0)),
        spent=ledger.spent_cost,
        default_cost=mean * cost_ratio,
        fraction=fraction,
        exploring_fraction=fraction if ledger.recurrences > FIRST_WEEK else 0.0,
        ledger=ledger,
        cost_ratio=cost_ratio,
    )


def budget_after(
    config: JobConfig, status: BudgetStatus, outcome: RunOutcome, judged: bool
) -> BudgetStatus | None:
    """Where the budget stands after a try decided under ``status`` ended with ``outcome``:
    its cost spent, and, for a judged try of the default batch size that ran to its end,
    its recurrence's Default cost known (the same books the store keeps, updated without a
    read; ``store/state.py`` reads them the same way)."""
    ledger = status.ledger
    known = (
        judged
        and outcome.batch_size == config.default_batch_size
        and outcome.stop_reason in ("target", "max_epochs")
    )
    default = outcome.default_cost if outcome.default_cost is not None else outcome.cost
    after = replace(
        ledger,
        spent_cost=ledger.spent_cost + outcome.cost,
        recurrence_spent=ledger.recurrence_spent + outcome.cost,
        known_default_cost=ledger.known_default_cost + (default if known else 0.0),
        known_recurrences=ledger.known_recurrences + int(known),
        default_costs=(*ledger.default_costs, default)[-DRIFT_MEMORY:]
        if known
        else ledger.default_costs,
    )
    return budget_status(config, after, status.cost_ratio)


# --- the prices -----------------------------------------------------------------------------
def predictive_upper(stats: ArmStats, cv: float, z: float = CONFIDENCE_Z) -> float:
    """An upper confidence bound of the cost of one more run of an arm with ``stats``: its
    mean plus ``z`` spreads of a new run (the run-to-run spread and the mean's own
    uncertainty together), widened as Student's t widens a normal quantile when the spread
    itself is estimated from few runs: a size with one lucky run is no well-known size."""
    noise = cost_variance(stats, cv)
    spread = math.sqrt(noise * (1.0 + 1.0 / max(stats.count, 1)))
    return stats.mean + student_quantile(z, degrees=max(stats.count - 1 + PRIOR_DOF, 1.0)) * spread


def student_quantile(z: float, degrees: float) -> float:
    """Student's t quantile at the normal one ``z``, to first order (Cornish-Fisher): ``z``
    times ``1 + (z**2 + 1) / (4 * degrees)``; 4.5 for ``z = 2`` and one degree of freedom,
    2.25 for ten."""
    return z * (1.0 + (z * z + 1.0) / (4.0 * degrees))


@dataclass(frozen=True)
class CostEstimate:
    """What a run of a size is expected to cost, from its cost per sample (job cost units)."""

    lowest: float
    """At its most favourable epochs to target."""
    expected: float
    """With as many epochs as the reference size: how most sizes near each other train."""
    highest: float
    """At its least favourable epochs to target."""
    belief: tuple[float, ...] = ()
    """Equally likely costs over the epochs' possible scaling (``reference.epoch_exponent``):
    what :func:`payback` weighs a try by."""
    open_belief: tuple[float, ...] = ()
    """The same over the whole of McCandlish et al.'s range, every exponent in it equally
    likely, before the job's own sizes narrowed it: what a verdict on the size (it cannot
    pay back) is judged by, for the sizes that narrowed it are a few noisy runs, and a
    verdict lasts."""

    def given_at_least(self, cost: float) -> CostEstimate:
        """This estimate given that the size costs at least ``cost`` (a try of it stopped
        at the cap after that much, short of its target): the beliefs' costs it leaves."""
        return replace(
            self,
            belief=censored_belief(self.belief, cost),
            open_belief=censored_belief(self.open_belief, cost),
        )


BELIEF_POINTS = 8
"""Points of a size's cost belief (:func:`cost_range`): the epochs' exponent at the middles
of as many equal parts of its range."""


def cost_range(reference: CostReference, batch_size: int, sample_cost: float) -> CostEstimate:
    """The cost a run of ``batch_size`` can be expected to have, from its cost per training
    sample (its power profile) and a reference size's runs.

    A run costs its epochs times the cost of an epoch, and an epoch's cost scales with the
    cost per sample. The epochs are unknown, but bounded by how training scales with the
    batch (McCandlish et al., "An empirical model of large-batch training", 2018): a larger
    batch needs at least as many samples as a smaller one (as many epochs), and at most as
    many steps (epochs in proportion to the batch); a smaller batch the reverse. So epochs
    scale as ``batch_size ** k`` with ``k`` in [0, 1], a range the job's own sizes narrow
    (:func:`epoch_exponent`): the belief spreads over it evenly. Most neighbouring sizes of
    the paper's traces need about as many epochs as each other (the expected case); sizes
    far above the critical batch need proportionally more."""
    scaled = reference.mean_cost * sample_cost / reference.sample_cost
    ratio = batch_size / reference.batch_size
    low = max(1.0 - RESERVE_Z * reference.mean_spread, 0.0)  # the reference's mean is noisy
    high = 1.0 + RESERVE_Z * reference.mean_spread
    measured = reference.epoch_exponent
    least, most = (0.0, 1.0) if measured is None else measured
    epochs = [ratio**k for k in (least, most)]
    prior = reference.epoch_prior_shape
    shape = 0.0 if measured is not None else EPOCH_PRIOR_SHAPE if prior is None else prior
    return CostEstimate(
        scaled * min(epochs) * low,
        scaled,
        scaled * max(epochs) * high,
        _belief(reference, scaled, ratio, least, most, shape),
        _belief(reference, scaled, ratio, 0.0, 1.0, 0.0),
    )


def _belief(
    reference: CostReference,
    scaled: float,
    ratio: float,
    least: float,
    most: float,
    shape: float,
) -> tuple[float, ...]:
    """Equally likely costs: the epochs' exponent at ``BELIEF_POINTS`` quantiles of density
    ``(1 - k) ** shape`` on [least, most], each with the reference mean's noise and the
    scaling law's error."""
    mean_noise = reference.cv / math.sqrt(max(reference.runs, 1))
    model_error = max(reference.cv, MODEL_ERROR, reference.drift_spread)
    exponents = [
        _exponent_quantile(least, most, (i + 0.5) / BELIEF_POINTS, shape)
        for i in range(BELIEF_POINTS)
    ]
    return tuple(
        scaled * ratio**k * (1.0 + z * mean_noise) * (1.0 + y * model_error)
        for k in exponents
        for z in _MEAN_NOISE
        for y in _MEAN_NOISE
    )


EPOCH_PRIOR_SHAPE = 3.0
"""The belief over the epochs' exponent ``k`` before the job has measured how its epochs
scale: density ``(1 - k) ** EPOCH_PRIOR_SHAPE`` on [0, 1], most of it near 0 (as many
epochs as the reference: how most neighbouring sizes train). Once it has measured it
(:func:`epoch_exponent`), every exponent of the measured range is as likely. Where limits
cannot move, :data:`FIXED_LIMIT_EPOCH_PRIOR_SHAPE` instead."""

FIXED_LIMIT_EPOCH_PRIOR_SHAPE = 0.0
"""The epochs' prior where the power limit cannot move and a slice in a size's own first run
prices it (measure mode, or GPUs whose limits the task cannot change:
``exploring._epoch_prior_shape``): every exponent in [0, 1] as likely. There a size's epochs
are the job's only saving, and a smaller size costs more per sample on most GPUs, so the
cautious prior (as many epochs) never lets the job try one; where the limit moves, the
limit's savings come without a try and the cautious prior keeps the budget for them. A price
from whole tries' steps (runs shorter than a slice) keeps the cautious prior: there a bet is
a whole try after a probe already stopped, and the flat prior lost more than it found (the
frontier: bench/short_horizon.md)."""


def _exponent_quantile(least: float, most: float, u: float, shape: float) -> float:
    """The ``u`` quantile of density ``(1 - k) ** shape`` on [least, most]."""
    power = shape + 1.0
    top, bottom = (1.0 - least) ** power, (1.0 - most) ** power
    return 1.0 - max(top - u * (top - bottom), 0.0) ** (1.0 / power)


MODEL_ERROR = PRIOR_COST_CV
"""How far a size's epochs may lie off the scaling law between sizes (relative), at least:
the spread of time-to-accuracy the paper cites, where the job's own runs vary less."""

_MEAN_NOISE = (-math.sqrt(3.0), 0.0, 0.0, 0.0, 0.0, math.sqrt(3.0))
"""Where the reference's mean may lie, in its standard errors, equally likely: the three
points of Gauss-Hermite quadrature of a normal (weights 1/6, 2/3, 1/6)."""


def epoch_exponent(
    success_epochs: Mapping[int, float],
    runs: Mapping[int, int],
    cv: float,
    reference: int,
    batch_size: int,
) -> tuple[float, float] | None:
    """The range of ``k`` in ``epochs ~ batch ** k`` from ``reference`` to ``batch_size``
    that the job's own sizes measured, within [0, 1] (McCandlish et al.'s bounds); None
    before they say anything. Along the batch axis ``k`` grows (from 0 far below the critical
    batch to 1 far above it), so the exponent the job measured between ``reference`` and
    another of its sizes bounds the one to ``batch_size`` when that size lies on the other
    side of ``reference`` or between the two: going down, ``k`` is at most that; going up,
    at least. Each bound is widened by ``RESERVE_Z`` standard errors of its exponent (each
    size's mean epochs is ``runs`` runs of the job's run-to-run spread ``cv``); the tightest
    holds."""
    if batch_size == reference or reference not in success_epochs:
        return None
    down = batch_size < reference
    bounds = []
    for other, epochs in success_epochs.items():
        between = min(batch_size, reference) < other < max(batch_size, reference)
        if other == reference or not (between or (other > reference) == down):
            continue
        log_ratio = math.log(other / reference)
        measured = math.log(epochs / success_epochs[reference]) / log_ratio
        spread = cv * math.sqrt(1 / max(runs.get(other, 1), 1) + 1 / max(runs.get(reference, 1), 1))
        noise = RESERVE_Z * spread / abs(log_ratio)
        bounds.append(measured + noise if down else measured - noise)
    if not bounds:
        return None
    if down:
        return (0.0, min(max(min(bounds), 0.0), 1.0))
    return (max(min(max(bounds), 1.0), 0.0), 1.0)


@dataclass(frozen=True)
class PricedCap:
    """The cap at which a priced try is expected to pay back most (:func:`priced_cap`)."""

    cap: float
    """Job cost units."""
    payback: float
    """What the try is expected to return under it (:func:`payback`): positive where it is
    worth making."""


def priced_cap(
    belief: Sequence[float], best_cost: float, horizon_runs: int, most: float, margin: float
) -> PricedCap:
    """Of the caps up to ``most`` (what the books can pay), the one under which a try of a
    size with ``belief`` is expected to pay back most (:func:`payback`): each of its costs
    with a ``margin`` for a run's own noise (a factor, e.g. one run-to-run spread above 1),
    or ``most``. A lower cap stops sooner a size that turns out dear; a higher one lets a
    cheap size finish: the belief says which is worth more."""
    caps = sorted({min(cost * margin, most) for cost in belief} | {most})
    paid = paybacks(belief, best_cost, caps, horizon_runs)
    values = [PricedCap(cap, value) for cap, value in zip(caps, paid, strict=True)]
    top = max(v.payback for v in values)
    # The lowest cap that pays back as much, within rounding: the costs come from sums the
    # databases add up in their own order, and a tie must not flip on the last bit.
    return next(v for v in values if v.payback >= top - _TIE * abs(best_cost))


_TIE = 1e-9
"""Paybacks closer than this fraction of the best cost are equal (``priced_cap``, ``bet_now``)."""


def bet_now(
    belief: Sequence[float],
    best_cost: float,
    horizon_runs: int,
    cap: float,
    margin: float,
    growth: float,
) -> PricedCap | None:
    """The cap to try a size with ``belief`` under now, at most ``cap`` (what the books can
    pay); None when it cannot pay back under it, or when waiting for a higher cap pays
    more. The books grow by ``growth`` a run (the budget's share of a Default run), so a
    cap that lets more of the belief finish is some runs away; waiting forgoes the
    expected saving of those runs (the mean of ``best_cost - cost`` where it is
    positive). A try stopped at a cap too low for it wastes the whole cap; with no room
    (``cap`` at or below 0: the books are spent) there is none to try under."""
    if cap <= 0:
        return None
    here = priced_cap(belief, best_cost, horizon_runs, cap, margin)
    if here.payback <= 0:
        return None
    ideal = priced_cap(belief, best_cost, horizon_runs, math.inf, margin)
    if growth <= 0 or ideal.cap <= here.cap:
        return here
    runs = math.ceil((ideal.cap - here.cap) / growth - _TIE)
    saving = sum(max(best_cost - cost, 0.0) for cost in belief) / len(belief)
    waiting = ideal.payback - runs * saving
    return here if here.payback >= waiting - _TIE * abs(best_cost) else None


def priced_verdict(
    estimate: CostEstimate,
    best_cost: float,
    horizon_runs: int,
    cap: float,
    margin: float,
    growth: float,
) -> PricedCap | str:
    """What a size priced by ``estimate`` gets, under the books' ``cap``:

    * ``"never"``: it cannot pay back under any cap even over the whole of the epochs' range
      (``estimate.open_belief``): a verdict on the size;
    * ``"doubt"``: it cannot on what the job's own sizes say of its epochs
      (``estimate.belief``): a verdict for now, which those sizes' runs may overturn
      (``in_play.repriced``);
    * ``"wait"``: no cap the books pay is worth it yet, or waiting for one pays more
      (:func:`bet_now`);
    * else the cap to try it under now."""
    if not repays(estimate.open_belief, best_cost, horizon_runs, margin):
        return "never"
    if not repays(estimate.belief, best_cost, horizon_runs, margin):
        return "doubt"
    bet = bet_now(estimate.belief, best_cost, horizon_runs, cap, margin, growth)
    return "wait" if bet is None else bet


def repays(belief: Sequence[float], best_cost: float, horizon_runs: int, margin: float) -> bool:
    """Whether a size with ``belief`` can be expected to pay back under some cap."""
    return (
        bool(belief) and priced_cap(belief, best_cost, horizon_runs, math.inf, margin).payback > 0
    )


def censored_belief(belief: Sequence[float], at_least: float) -> tuple[float, ...]:
    """``belief`` given that the size costs at least ``at_least`` (a try of it stopped at
    the cap after that much, short of its target): the costs it leaves. Empty when none
    is left, for then the belief was wrong."""
    return tuple(cost for cost in belief if cost >= at_least)


def payback(belief: Sequence[float], best_cost: float, cap: float, horizon_runs: int) -> float:
    """What a capped try of a size is expected to return, in the job's cost units, over
    ``horizon_runs`` runs from this one: where it beats the best size and finishes within
    its ``cap``, the saving of every one of them (the try's own run and those that use the
    size after it); where it finishes dearer, what its run cost beyond the best size's;
    where it stops at ``cap``, the cap (the best size runs after it). ``belief``: its
    equally likely costs (:func:`cost_range`). Positive: the try can be expected to pay
    back within the horizon; otherwise it is not worth making."""
    if not belief:
        return -math.inf
    total = 0.0
    for cost in belief:
        if cost > cap:
            total -= cap
        elif cost < best_cost:
            total += horizon_runs * (best_cost - cost)
        else:
            total -= cost - best_cost
    return total / len(belief)


def paybacks(
    belief: Sequence[float], best_cost: float, caps: Sequence[float], horizon_runs: int
) -> list[float]:
    """:func:`payback` under each of ``caps``, from one sort of ``belief`` and its running
    sums: a decision prices every cap of every size it may explore (quadratic in the belief,
    a third of the operator's own time before: bench/RESULTS.md, issue 47)."""
    if not belief:
        return [-math.inf for _ in caps]
    costs = sorted(belief)
    sums = [0.0, *accumulate(costs)]
    cheaper = bisect_left(costs, best_cost)  # the costs below the best size's
    found = []
    for cap in caps:
        done = bisect_right(costs, cap)  # the costs that finish within the cap
        saving, dearer, stopped = min(cheaper, done), done - min(cheaper, done), len(costs) - done
        # Each term only where it counts a cost: 0 x inf (an unbounded cap) would be NaN.
        total = horizon_runs * (saving * best_cost - sums[saving]) if saving else 0.0
        total -= sums[done] - sums[saving] - dearer * best_cost if dearer else 0.0
        total -= stopped * cap if stopped else 0.0
        found.append(total / len(costs))
    return found


def cannot_beat(lowest_cost: float, best_cost: float) -> bool:
    """Whether a size that costs ``lowest_cost`` at its most favourable (a price's lowest,
    or what a try stopped at the cap says) cannot beat a size that costs ``best_cost``."""
    return lowest_cost * PRICE_MARGIN > best_cost


# --- profiling within the books ------------------------------------------------------------
@dataclass(frozen=True)
class ProfilingCredit:
    """What profiling power limits may add to a run's cost, over the same steps at the
    maximum limit (Default's), in the job's cost units.

    Measuring a low limit slows training, and on a job of a few dozen steps the slices alone
    could take a run past its budget. So the profiler (``core/train/profiler.py``) starts a slice
    only when its pessimistic extra cost fits ``carried`` (the job's credit before the run)
    plus ``fraction`` of the cost at the maximum limit of every step run so far, less what
    profiling added already. Until then it trains at the best limit measured."""

    carried: float
    fraction: float

    def available(self, steps_run: int, max_limit_step_cost: float, extra_spent: float) -> float:
        """The credit left after ``steps_run`` steps, ``extra_spent`` of it used."""
        return self.carried + self.fraction * steps_run * max_limit_step_cost - extra_spent


def profiling_credit(config: JobConfig, status: BudgetStatus | None) -> ProfilingCredit | None:
    """The credit for profiling in a run whose cost nothing else bounds (the best known size,
    the default size before the budget has a reference); None without a budget.

    The run is expected to cost what Default's would (``status.default_cost``) and brings its
    own share of the budget as it trains; what the books held beyond that is carried. A job
    too short to price a size (``status.savings_only``) profiles only with what it saved:
    its profile spreads over many runs, each slice a noisy fraction of a second, and a budget
    spent on it does not pay back."""
    if config.exploration_budget is None:
        return None
    if status is not None and status.savings_only:
        return ProfilingCredit(max(status.room(before=True), 0.0), 0.0)
    carried = 0.0
    if status is not None:
        expected = (1.0 + config.exploration_budget) * status.default_cost
        carried = max(status.allowance - status.spent - expected, 0.0)
    return ProfilingCredit(carried, config.exploration_budget)

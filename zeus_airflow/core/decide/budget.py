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
from dataclasses import dataclass, replace

from zeus_airflow.core.common.config import DRIFT_MEMORY, JobConfig
from zeus_airflow.core.decide.posterior import PRIOR_DOF, cost_variance, pooled_cost_cv
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
    """Where the job's budget stands; None without a budget or before Default's cost is
    estimated (then only the default batch size may run: it is Default's own choice).

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


def cost_range(reference: CostReference, batch_size: int, sample_cost: float) -> CostEstimate:
    """The cost a run of ``batch_size`` can be expected to have, from its cost per training
    sample (its power profile) and a reference size's runs.

    A run costs its epochs times the cost of an epoch, and an epoch's cost scales with the
    cost per sample. The epochs are unknown, but bounded by how training scales with the
    batch (McCandlish et al., "An empirical model of large-batch training", 2018): a larger
    batch needs at least as many samples as a smaller one (as many epochs), and at most as
    many steps (epochs in proportion to the batch); a smaller batch the reverse. Most
    neighbouring sizes of the paper's traces need about as many epochs as each other (the
    expected case); sizes far above the critical batch need proportionally more."""
    scaled = reference.mean_cost * sample_cost / reference.sample_cost
    ratio = batch_size / reference.batch_size
    low = max(1.0 - RESERVE_Z * reference.mean_spread, 0.0)  # the reference's mean is noisy
    high = 1.0 + RESERVE_Z * reference.mean_spread
    return CostEstimate(scaled * min(1.0, ratio) * low, scaled, scaled * max(1.0, ratio) * high)


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

"""The exploration budget: a conservative bandit's books (docs/algorithm.md, "The budget").

Wu, Shariff, Lattimore and Szepesvári ("Conservative Bandits", ICML 2016) keep a learner's
cumulative reward above ``(1 - alpha)`` times what a known baseline would have earned, by
playing an exploratory arm only when a pessimistic estimate of it keeps the books in credit,
and the baseline otherwise. Here the baseline is the Default configuration (the default batch
size at the GPUs' maximum power limit, what the DAG does without Zeus) and the reward a cost:
a job's cumulative cost stays within ``(1 + exploration_budget)`` times Default's over the
same recurrences.

Default's cost of a recurrence in which the default batch size ran to its end is known: the
same steps on the same data, priced at the maximum limit (``RunOutcome.default_cost``). For
the other recurrences it is estimated from those runs and taken at its lower confidence bound;
exploring is allowed when the explored try's upper cost bound still fits. Savings earned
(a better power limit, a cheaper size) widen the budget; a dear exploration narrows it.
Everything here is arithmetic on the store's :class:`BudgetLedger`; which decision counts as
exploration, and its upper cost, is the policy's (``core/policy.py``, ``within_budget``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.domain import ArmStats, BudgetLedger, BudgetStatus
from zeus_airflow.core.posterior import pooled_cost_cv

CONFIDENCE_Z = 1.0
"""Standard deviations between an estimate and the bound the books use: Default's cost is
taken this far below its mean (per recurrence, its standard error), an explored size's cost
this far above its mean (per run, its spread)."""


def default_cost_bound(ledger: BudgetLedger) -> float | None:
    """A lower confidence bound of the Default configuration's cost of one recurrence; None
    before the default batch size has run to its end once."""
    if not ledger.default_costs:
        return None
    stats = ArmStats.of(ledger.default_costs)
    spread = pooled_cost_cv([stats]) / math.sqrt(stats.count)
    return stats.mean * max(1.0 - CONFIDENCE_Z * spread, 0.0)


def budget_status(
    config: JobConfig, ledger: BudgetLedger, cost_ratio: float = 1.0
) -> BudgetStatus | None:
    """Where the job's budget stands; None without a budget or before Default's cost is
    estimated (then only the default batch size may run: it is Default's own choice).

    ``cost_ratio``: how much costs moved since a change drift detection found (new over
    old). Default's runs before it priced the old data; on the new data Default would cost
    that much more, as every size does, and a budget priced on the old would stop the
    exploration the change calls for."""
    default = default_cost_bound(ledger)
    if config.exploration_budget is None or not default:
        return None
    default *= cost_ratio
    unknown = max(ledger.recurrences - ledger.known_recurrences, 0)
    allowance = (1.0 + config.exploration_budget) * (ledger.known_default_cost + unknown * default)
    return BudgetStatus(allowance, ledger.spent_cost, default)


def affords(status: BudgetStatus, upper_cost: float) -> bool:
    """Whether a try whose cost is at most ``upper_cost`` keeps the job within its budget."""
    return status.spent + upper_cost <= status.allowance


@dataclass(frozen=True)
class ProfilingCredit:
    """What profiling power limits may add to a run's cost, over the same steps at the
    maximum limit (Default's), in the job's cost units.

    Measuring a low limit slows training, and on a job of a few dozen steps the slices alone
    could take a run past its budget. So the profiler (``core/profiler.py``) starts a slice
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
    own share of the budget as it trains; what the books held beyond that is carried."""
    if config.exploration_budget is None:
        return None
    carried = 0.0
    if status is not None:
        expected = (1.0 + config.exploration_budget) * status.default_cost
        carried = max(status.allowance - status.spent - expected, 0.0)
    return ProfilingCredit(carried, config.exploration_budget)

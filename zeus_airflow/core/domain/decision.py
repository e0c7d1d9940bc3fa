"""What a decision reads (the job's snapshot) and what it returns."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.domain.phases import Phase


@dataclass(frozen=True)
class ArmStats:
    """Sufficient statistics of an arm's observed costs (within its window)."""

    count: int
    mean: float
    sum_sq_dev: float
    """Sum of squared deviations from the mean (Welford's M2)."""

    @classmethod
    def of(cls, costs: Sequence[float]) -> ArmStats:
        n = len(costs)
        if n == 0:
            return cls(0, 0.0, 0.0)
        mean = sum(costs) / n
        return cls(n, mean, sum((c - mean) ** 2 for c in costs))

    def merge(self, other: ArmStats) -> ArmStats:
        """Statistics of both sets of costs together (Chan et al.'s pairwise update)."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        return ArmStats(
            count,
            self.mean + delta * other.count / count,
            self.sum_sq_dev + other.sum_sq_dev + delta**2 * self.count * other.count / count,
        )

    @property
    def sample_variance(self) -> float:
        return self.sum_sq_dev / (self.count - 1) if self.count > 1 else 0.0


@dataclass(frozen=True)
class ExplorationStep:
    """A finished exploration trial, in decision order."""

    batch_size: int
    succeeded: bool
    cost: float
    power_limit_w: int | None = None
    seq: int = 0
    """Its decision number: orders it against the job's other trials."""
    stop_reason: str | None = None
    early_stop_cost: float | None = None
    """The bound it ran under (None: unbounded)."""
    recurrence: str = ""
    """Which recurrence (Airflow task instance) it ran in: steps that share one ran on the
    same data."""


@dataclass(frozen=True)
class CostReference:
    """A size whose runs reached the target, to price another size by: a run's cost scales
    with its cost per training sample and with the epochs it needs (``budget.cost_range``)."""

    batch_size: int
    mean_cost: float
    """Mean cost of its runs that reached the target (job cost units)."""
    sample_cost: float
    """Its cost per training sample at the highest limit (job cost units)."""
    mean_spread: float = 0.0
    """The relative standard error of ``mean_cost`` (its runs' spread over the root of
    their number)."""
    cv: float = 0.0
    """The job's run-to-run spread of cost (relative, pooled over its sizes): the noise of
    this size's mean (over the root of ``runs``) and how far a size's epochs may lie off the
    scaling law between sizes, which holds on average, not for every size."""
    runs: int = 1
    """Runs of this size that reached the target: what its mean is the mean of."""
    epoch_exponent: tuple[float, float] | None = None
    """How the epochs to target may scale from this size's to the priced size's: as
    ``batch_size ** k`` for ``k`` in this range (0: as many epochs, as many samples; 1: as
    many steps), as the job's own sizes measured it (``budget.epoch_exponent``); None before
    they did (the prior, ``epoch_prior_shape``)."""
    epoch_prior_shape: float | None = None
    """Before the job measured how its epochs scale, the belief's shape over ``k``: density
    ``(1 - k) ** shape`` on [0, 1] (0: every exponent as likely); None:
    ``budget.EPOCH_PRIOR_SHAPE``."""
    drift_spread: float = 0.0
    """After a change drift detection found, how far the drift may have moved sizes apart
    (relative; ``DriftFound.stale_spread``), else 0: the epochs' scaling between sizes that
    the job measured before the change may not hold after it."""


@dataclass(frozen=True)
class BudgetCap:
    """How an explored try is stopped where the exploration budget cannot pay for more
    (``core/decide/budget.py``). Costs in the job's cost units."""

    verdict_cost: float
    """The cost at which the size cannot win (``walk.cannot_win``)."""
    bound: float | None = None
    """The size's early-stop bound (None: none): a stop at a cap as high is an early stop."""
    best_cost: float = math.inf
    """The best size's mean cost: a size that cannot beat it even at its most favourable
    (``budget.cannot_beat``) stops as ``cannot_win`` once its profile prices it."""
    min_epochs: float | None = None
    """The fewest epochs the size can be expected to need (``exploring._fewest_epochs``): a try
    whose cost over that many epochs passes ``verdict_cost`` stops as ``cannot_win``.
    None: no such prediction, the try runs to the cap."""
    expected_epochs: float | None = None
    """The epochs the size is expected to need (its nearest neighbour's mean): a try its
    profile has not priced yet stops once its cost over that many epochs is not expected to
    fit the cap (``budget_cap``). None: no such prediction."""
    reference: CostReference | None = None
    """Once the try's profile has measured the highest limit (a few dozen steps in), its cost
    is priced from its cost per sample there against this size's (``budget.cost_range``):
    a size that cannot win, or is not expected to finish within the cap, stops there."""
    priced_cap: float | None = None
    """Set for a try not priced yet: its ``early_stop_cost`` is a probe's (an epoch of the
    best size), raised to this cap once its price says it may go on. Short jobs price a size
    only after an epoch, and a size nobody can price is not worth more than a probe."""
    lowest_cost: float | None = None
    """What the size costs at its most favourable, from an earlier try stopped at the cap
    (its cost per epoch): one that cannot beat the best size stops at its first step."""
    horizon_runs: int | None = None
    """Runs over which the try must be expected to pay back once priced
    (``budget.priced_cap``): one that cannot stops (``cannot_win``), one that can only under
    a higher cap than the books pay stops too (``budget_cap``), and the rest run under the
    cap that pays back most. None: no such test."""
    cost_margin: float = 1.0
    """A run's own noise, as a factor over a cost (one run-to-run spread above 1): the
    margin a priced cap leaves a cost it lets finish."""
    cap_growth: float = 0.0
    """How much the books' cap grows a run (``budget.bet_now``): a priced try waits for a
    cap that pays back more when that pays."""


@dataclass(frozen=True)
class CensoredTry:
    """A try stopped at the exploration budget's cap: a lower bound of its size's cost."""

    cap: float
    """The cap it ran under (job cost units)."""
    cost: float
    """What it cost until it stopped."""
    epochs: int
    """Epochs it trained: its size needs more."""

    @property
    def epoch_cost(self) -> float:
        """Its mean cost per epoch."""
        return self.cost / max(self.epochs, 1)


@dataclass(frozen=True)
class StepsAtLimit:
    """A batch size's tries at one power limit, held there for their whole training: what
    their steps cost together. Where limits cannot move, every size shares the limit, so
    these price sizes against each other without a profile (``snapshot.run_sample_costs``)."""

    batch_size: int
    power_limit_w: int
    """The limit they trained at (W)."""
    cost: float
    """Their summed cost (job cost units)."""
    steps: int
    """Their summed training steps."""


@dataclass(frozen=True)
class BudgetLedger:
    """The exploration budget's books for one job on one GPU setup (``core/decide/budget.py``).
    Costs in the job's cost units."""

    spent_cost: float = 0.0
    """Cost of every try so far, the current recurrence's included."""
    recurrences: int = 0
    """Recurrences begun, the current one included."""
    recurrence_spent: float = 0.0
    """Cost of the current recurrence's earlier tries (part of ``spent_cost``)."""
    default_costs: tuple[float, ...] = ()
    """What the default batch size's latest complete runs (to the target or to max epochs)
    would have cost at the GPUs' maximum power limit, oldest first: samples of what a
    recurrence costs the Default configuration."""
    known_default_cost: float = 0.0
    """Default's cost of the recurrences in which the default batch size ran to its end: it
    trained on the same data, so what it would have cost at the maximum limit is known."""
    known_recurrences: int = 0
    """How many recurrences ``known_default_cost`` covers."""
    censored: Mapping[int, CensoredTry] = field(default_factory=dict)
    """Per batch size, its latest try stopped at the exploration budget's cap
    (``stop_reason="budget_cap"``): it costs more than that cap, as far as the job knows."""
    success_epochs: Mapping[int, float] = field(default_factory=dict)
    """Per batch size, the mean epochs its runs that reached the target needed."""
    success_epoch_s: Mapping[int, float] = field(default_factory=dict)
    """Per batch size, the mean seconds an epoch of its runs that reached the target took
    (each run's time over its epochs): whether a probe capped at an epoch can be priced."""
    fixed_limit_steps: tuple[StepsAtLimit, ...] = ()
    """The job's tries on this GPU setup that trained at a limit nobody moved (measure mode,
    or limits that could not be changed), per batch size and limit: every try with steps,
    stopped ones included."""


@dataclass(frozen=True)
class BudgetStatus:
    """Where the budget stands at a decision (``budget.budget_status``). Costs in the job's
    cost units."""

    default_total: float
    """The Default configuration's cost over the recurrences begun, the current one
    included: known where the default batch size ran to its end, else estimated low
    (``budget.unknown_default_bound``)."""
    default_total_before: float
    """The same without the current recurrence: what a recurrence that ends with the
    default batch size (which prices its own Default) adds to."""
    spent: float
    """What the job had spent, the current recurrence's earlier tries included."""
    default_cost: float
    """The Default configuration's mean cost of one recurrence: the unit of ``left_runs``."""
    fraction: float
    """``exploration_budget``: the allowance is ``1 + fraction`` times Default's cost."""
    exploring_fraction: float
    """The part of it exploration may spend now: none in the job's first week
    (``budget.FIRST_WEEK``), all of it after."""
    ledger: BudgetLedger = field(default_factory=BudgetLedger, compare=False, repr=False)
    """The books it was worked out from."""
    cost_ratio: float = 1.0
    """How much costs moved since a change drift detection found (new over old)."""
    savings_only: bool = False
    """The job is too short to price a size (``exploring._too_short_to_price``): exploring and
    profiling power limits alike spend only what it saved, never the budget."""

    @property
    def allowance(self) -> float:
        """What the job may have spent by the end of the current recurrence."""
        return (1.0 + self.fraction) * self.default_total

    def left_runs(self) -> float:
        """The budget left, in Default runs (negative: over budget): the allowance of the
        recurrences begun, the current one's included, less what was spent. After a
        recurrence, what it left; the one figure the summary, the XComs, the store and the
        UI show."""
        return (self.allowance - self.spent) / self.default_cost

    def left_before_runs(self) -> float:
        """The budget left before the current recurrence's share (its earlier tries'
        spending included), in Default runs: what the previous recurrence left."""
        before = (1.0 + self.fraction) * self.default_total_before
        return (before - self.spent) / self.default_cost

    def room(self, before: bool = False) -> float:
        """What exploration may still spend: the allowance at ``exploring_fraction`` (of
        the recurrences before the current one with ``before``) less what was spent."""
        total = self.default_total_before if before else self.default_total
        return (1.0 + self.exploring_fraction) * total - self.spent


@dataclass(frozen=True)
class SizeEvidence:
    """What the job's finished trials say about a size that failed an exploration step."""

    last_success_seq: int | None = None
    """Decision number of its latest try that reached the target, in any phase."""
    max_stop_bound: float | None = None
    """The highest early-stop bound it was stopped by, in any phase."""


@dataclass(frozen=True)
class DriftFound:
    """A change drift detection found in the job's costs (``core/decide/drift.py``)."""

    since: int
    """Decision number from which the data is new (the earliest change point found)."""
    cost_ratio: float
    """How much the changed arms' costs moved: new mean over old (geometric mean over them)."""
    stale_mean: Mapping[int, float] = field(default_factory=dict)
    """For the arms with no cost since the change (none in the observations): their old mean
    cost moved as the nearest arms with costs on both sides of the change moved (by
    ``cost_ratio`` when none has any: ``core/decide/drift.py``, ``local_ratio``)."""
    stale_spread: float = 0.0
    """The relative spread of a belief built on a stale mean: how far the drift may have
    moved arms apart (Normal(m, (stale_spread x m)^2) for a stale mean m)."""


@dataclass(frozen=True)
class JobSnapshot:
    """What a decision may read: exploration history, in-flight exploration, arm windows."""

    config: JobConfig
    exploration: tuple[ExplorationStep, ...] = ()
    deferred: tuple[ExplorationStep, ...] = ()
    """Steps of the walk stopped at the exploration budget's cap (censored), in decision
    order: the walk deferred their size there (``walk.pruning_state``)."""
    in_flight: tuple[int, ...] = ()
    """Batch sizes of exploration trials other workers are running now."""
    observations: Mapping[int, ArmStats] = field(default_factory=dict)
    """Per batch size, statistics of its most recent ``window_size`` observed costs."""
    success_mean_cost: Mapping[int, float] = field(default_factory=dict)
    """Per batch size, the mean cost of its runs that reached the target, within its window;
    the lowest sets the early-stop bound."""
    evidence: Mapping[int, SizeEvidence] = field(default_factory=dict)
    """For each size with a failed exploration step: whether it earned another try."""
    excluded: frozenset[int] = frozenset()
    """Batch sizes that already failed in the current recurrence."""
    power_limits_w: tuple[int, ...] = ()
    """The device's candidate limits, highest first (only the grid baseline uses them)."""
    foreign_costs: Mapping[int, float] = field(default_factory=dict)
    """Mean cost per size on other GPU models, for sizes with no observation on this one:
    which to calibrate first."""
    drift: DriftFound | None = None
    """With drift detection, a change found in the job's costs; the observations and success
    means above then hold only what still describes the data."""
    missed: frozenset[int] = frozenset()
    """Of ``excluded``, the sizes that missed the target within max epochs (or returned
    without reaching it) in this recurrence: run again on the same data, they would miss again."""
    ledger: BudgetLedger = field(default_factory=BudgetLedger)
    """The exploration budget's books (``config.exploration_budget``)."""
    sample_costs: Mapping[int, float] = field(default_factory=dict)
    """Per batch size whose power profile on this GPU setup measured the limit sizes are
    priced at (``translation.pricing_cost_per_step``): its cost per training sample there
    (job cost units)."""
    run_sample_costs: Mapping[int, float] = field(default_factory=dict)
    """Where limits cannot move: per batch size that trained at the job's common limit, its
    cost per training sample there from its own tries' steps, a probe's stopped ones
    included (``snapshot.run_sample_costs``); a unit of its own, never mixed with
    ``sample_costs`` (a profile's slice leaves out what a whole try pays besides its steps)."""
    run_since_walk: frozenset[int] = frozenset()
    """With drift detection: the sizes with a cost observed after the pruning walk's last
    step (sampled, or run as the best known size, once the walk was over)."""
    gpu_limits_fixed: bool = False
    """The task cannot change its GPUs' limits (``DeviceInfo.limits_fixed``), whatever the
    job's ``power_limit_mode``."""

    @property
    def limits_fixed(self) -> bool:
        """The run decided for trains at limits nobody moves: ``power_limit_mode="measure"``,
        or GPUs whose limits the task cannot change."""
        return self.config.profiler.mode == "measure" or self.gpu_limits_fixed


@dataclass(frozen=True)
class Decision:
    batch_size: int
    phase: Phase
    power_limit_w: int | None = None
    """A fixed limit (baselines); None lets the profiler choose."""
    early_stop_cost: float | None = None
    keep_power_limit: bool = False
    """Train at the GPUs' current limits and change no setting (``fallback``)."""
    final: bool = False
    """The recurrence's last try whatever it reaches: no other size is left for it."""
    reason: str | None = None
    """Why, for the log, when the decision is not the usual one (``fallback``)."""
    budget_cap: BudgetCap | None = None
    """Set when ``early_stop_cost`` is the cap the exploration budget can pay for, below the
    size's early-stop bound: a stop there is censored (``budget_cap``), not a verdict."""
    budget: BudgetStatus | None = field(default=None, compare=False)
    """The exploration budget when it was decided (None: the job has no budget, or no
    estimate of the Default configuration's cost yet)."""
    books: BudgetLedger | None = field(default=None, compare=False, repr=False)
    """The budget's books the decision read, when the job has a budget but ``budget`` is
    None (before Default's cost is known: the job's first run). The try opens them: a run of
    the default size that ran to its end prices Default, and the budget left after it is
    known, as the next decision reads it (issue 47)."""

"""What a decision reads (the job's snapshot) and what it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zeus_airflow.core.config import JobConfig
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
class BudgetLedger:
    """The exploration budget's books for one job on one GPU setup (``core/budget.py``).
    Costs in the job's cost units."""

    spent_cost: float = 0.0
    """Cost of every try so far, the current recurrence's included."""
    recurrences: int = 0
    """Recurrences begun, the current one included."""
    default_costs: tuple[float, ...] = ()
    """What the default batch size's latest complete runs (to the target or to max epochs)
    would have cost at the GPUs' maximum power limit, oldest first: samples of what a
    recurrence costs the Default configuration."""
    known_default_cost: float = 0.0
    """Default's cost of the recurrences in which the default batch size ran to its end: it
    trained on the same data, so what it would have cost at the maximum limit is known."""
    known_recurrences: int = 0
    """How many recurrences ``known_default_cost`` covers."""


@dataclass(frozen=True)
class BudgetStatus:
    """Where the budget stood when a decision was made. Costs in the job's cost units."""

    allowance: float
    """(1 + exploration_budget) x the Default configuration's estimated cost (its lower
    bound) over the recurrences begun, the current one included."""
    spent: float
    """What the job had spent, the current recurrence's earlier tries included."""
    default_cost: float
    """The Default configuration's estimated cost of one recurrence (its lower bound)."""

    def left_runs(self, also_spent: float = 0.0) -> float:
        """The budget left after ``also_spent`` more, in Default runs' worth (negative: over
        budget)."""
        return (self.allowance - self.spent - also_spent) / self.default_cost


@dataclass(frozen=True)
class SizeEvidence:
    """What the job's finished trials say about a size that failed an exploration step."""

    last_success_seq: int | None = None
    """Decision number of its latest try that reached the target, in any phase."""
    max_stop_bound: float | None = None
    """The highest early-stop bound it was stopped by, in any phase."""


@dataclass(frozen=True)
class DriftFound:
    """A change drift detection found in the job's costs (``core/drift.py``)."""

    since: int
    """Decision number from which the data is new (the earliest change point found)."""
    cost_ratio: float
    """How much the changed arms' costs moved: new mean over old (geometric mean over them)."""
    stale_mean: Mapping[int, float] = field(default_factory=dict)
    """For the arms with no cost since the change (none in the observations): their old mean
    cost moved as the nearest arms with costs on both sides of the change moved (by
    ``cost_ratio`` when none has any: ``core/drift.py``, ``local_ratio``)."""
    stale_spread: float = 0.0
    """The relative spread of a belief built on a stale mean: how far the drift may have
    moved arms apart (Normal(m, (stale_spread x m)^2) for a stale mean m)."""


@dataclass(frozen=True)
class JobSnapshot:
    """What a decision may read: exploration history, in-flight exploration, arm windows."""

    config: JobConfig
    exploration: tuple[ExplorationStep, ...] = ()
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
    budget: BudgetStatus | None = field(default=None, compare=False)
    """The exploration budget when it was decided (None: the job has no budget, or no
    estimate of the Default configuration's cost yet)."""

"""The records the reports hand out. Energy in J, time in s, power in W, cost in the paper's
J-equivalents (``eta * energy_j + (1 - eta) * max_power_w * time_s``)."""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from zeus_airflow.core.devices.base import MeasurementKind
from zeus_airflow.core.domain import TrainingFigures, TrialStatus, Version, run_batch_size


def attribute_docstrings(cls: type) -> dict[str, str]:
    """The docstrings under ``cls``'s own annotated attributes, by attribute name."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for field, after in itertools.pairwise(body.body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _document_inherited(schema: dict[str, Any], cls: type) -> None:
    """Pydantic reads the attribute docstrings of the class itself only: a record's
    inherited fields (``TrainingFigures``') take theirs from the class that declares them."""
    properties = schema.get("properties", {})
    for base in cls.__mro__[1:-1]:
        for name, doc in attribute_docstrings(base).items():
            if name in properties:
                properties[name].setdefault("description", doc)


DOCUMENTED: dict[str, Any] = {
    "use_attribute_docstrings": True,
    "json_schema_extra": _document_inherited,
}
"""Records the UI's JSON API returns as they are: pydantic (which this package does not
import) documents their fields from the attribute docstrings."""


@dataclass(frozen=True)
class DefaultEstimate:
    """What one run of the Default configuration (b0 at the maximum power limit) costs,
    estimated from this job's runs of b0 that ran to their end (``store.state.RAN_TO_ITS_END``:
    the target, or max_epochs), scaled to the maximum limit with b0's
    power profile where it has both limits (``scaled_runs`` of ``runs``)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    batch_size: int
    power_limit_w: int | None
    """The maximum limit of b0's profile; None without a profile."""
    energy_j: float
    """Per run."""
    time_s: float
    """Per run."""
    runs: int
    """Runs of b0 averaged: those that ran to their end."""
    scaled_runs: int
    """Of those, the runs scaled to the maximum limit (the others count as measured)."""
    cost: float | None = None
    """Per run, in cost units: the job's cost formula on this energy and time
    (``eta * energy_j + (1 - eta) * max_power_w * time_s``, the host's energy too where the
    job counts it): the same Default as the energy and the time."""
    untrusted_profile: str | None = None
    """Why b0's power profile was not used to scale (its runs are then taken as measured):
    it contradicts physics, a lower limit measured faster than a higher one
    (``domain.physics``); None when it was trusted, or there is none."""
    energy_cv: float | None = None
    """The runs' own spread: the coefficient of variation of the energy of runs alike (one
    batch size, limit and GPU setup, each run to its end), pooled over the job's sets of such
    runs; None without two runs alike. What the savings' intervals are worked out from."""
    time_cv: float | None = None
    """As ``energy_cv``, of the time."""
    cost_cv: float | None = None
    """As ``energy_cv``, of the cost."""


@dataclass(frozen=True)
class JobTotals:
    """A job version's figures summed, beside Default's estimate for the same runs: what the
    job page's cards, the fleet page and ``zeus-airflow report`` compare. ``energy_j``,
    ``time_s`` and ``cost`` sum every live try."""

    version: Version
    tasks: tuple[tuple[str, str], ...]
    """(dag_id, task_id) pairs that ran the job; ("", "") for runs outside Airflow."""
    runs: int
    finished_runs: int
    """Runs with at least one finished try (the ones with energy figures)."""
    energy_j: float
    time_s: float
    cost: float
    """Cost units."""
    measurements: tuple[MeasurementKind, ...]
    """measured / replayed / simulated: where the figures come from."""
    default: DefaultEstimate | None

    @property
    def job_id(self) -> str:
        return self.version.job_id

    @property
    def dags(self) -> tuple[str, ...]:
        return tuple(sorted({dag for dag, _ in self.tasks if dag}))

    @property
    def default_energy_j(self) -> float | None:
        """Estimated energy of the finished runs, had they all run the Default way."""
        return None if self.default is None else self.default.energy_j * self.finished_runs

    @property
    def energy_saved_j(self) -> float | None:
        estimate = self.default_energy_j
        return None if estimate is None else estimate - self.energy_j

    @property
    def default_time_s(self) -> float | None:
        return None if self.default is None else self.default.time_s * self.finished_runs

    @property
    def default_cost(self) -> float | None:
        if self.default is None or self.default.cost is None:
            return None
        return self.default.cost * self.finished_runs

    @property
    def saved_energy_fraction(self) -> float | None:
        return saved_fraction(self.energy_j, self.default_energy_j)

    @property
    def saved_time_fraction(self) -> float | None:
        return saved_fraction(self.time_s, self.default_time_s)

    @property
    def saved_cost_fraction(self) -> float | None:
        return saved_fraction(self.cost, self.default_cost)

    @property
    def saved_energy_margin(self) -> float | None:
        return self._margin(self.saved_energy_fraction, "energy_cv")

    @property
    def saved_time_margin(self) -> float | None:
        return self._margin(self.saved_time_fraction, "time_cv")

    @property
    def saved_cost_margin(self) -> float | None:
        return self._margin(self.saved_cost_fraction, "cost_cv")

    def _margin(self, fraction: float | None, spread: str) -> float | None:
        default = self.default
        if default is None:
            return None
        return saved_margin(fraction, getattr(default, spread), self.finished_runs, default.runs)


@dataclass(frozen=True)
class JobSummary(JobTotals):
    """A job version at a glance: its totals, and the policy's view of it."""

    versions: tuple[int, ...]
    phase: str
    """pruning, sampling, infeasible (no size left in play: runs fall back to the best known
    size, as without Zeus), as the policy recorded it after the latest try; the last
    decision's phase for other policies and older stores (``LatestTry.shown_phase``)."""
    best_batch_size: int | None
    best_power_limit_w: int | None
    observed: TrainingFigures | None = None
    """Observe mode: the figures of the tries that trained in it, summed (what training at
    the optimum would have saved, and their energy, what that is a share of); None when
    none did."""


Z_95 = 1.96
"""Standard deviations either side of a saving that hold 95 % of its noise."""


def saved_margin(
    fraction: float | None, cv: float | None, runs: int, default_runs: int
) -> float | None:
    """The half-width of the 95 % interval of a saved ``fraction`` of Default's figure over
    ``runs`` runs, from the runs' own spread (``cv``, the coefficient of variation of runs
    alike): what the job used is measured; Default's figure for those runs is estimated from
    ``default_runs`` runs of b0, so it is uncertain twice over: each of its runs would have
    drawn its own figure, and the mean it is estimated by is itself uncertain (the spread of
    its total is ``cv * mean * sqrt(runs + runs**2 / default_runs)``, as the exploration
    budget reckons Default's unknown days). None without a spread or a fraction."""
    if fraction is None or cv is None or runs <= 0 or default_runs <= 0:
        return None
    return Z_95 * abs(1.0 - fraction) * cv * math.sqrt(1.0 / runs + 1.0 / default_runs)


def saved_fraction(used: float | None, default: float | None) -> float | None:
    """The share of Default's figure that was saved (negative: spent more than Default);
    None without a Default figure to compare with."""
    if used is None or not default:
        return None
    return (default - used) / default


@dataclass(frozen=True, kw_only=True)
class RunRecord(TrainingFigures):
    """One run: the tries of one Airflow task instance. Its fields are the trial's
    (:class:`~zeus_airflow.core.domain.TrialRecord`, a test checks names and types), listed
    here because the JSON API documents them: its figures (``TrainingFigures``) come from its
    tries' by each one's declared rule (``domain.run_of``: most sum its finished tries, None
    while none has finished); batch size, phase and status are the last try's."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    index: int
    """1-based position among the version's runs, in decision order."""
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    """Airflow's try number of the task instance."""
    batch_sizes: tuple[int, ...]
    """Batch size of each try, in order; the last is the run's."""
    capped_sizes: tuple[int, ...] = ()
    """Of the earlier tries, those stopped at the exploration budget's cap, in order: stopped
    on purpose, with no verdict on their size (not failed tries)."""
    status: TrialStatus
    """The last try's: running, succeeded, failed (target missed), error (the train function
    raised), invalid (it broke its contract), expired."""
    phase: str
    """The decision's: pruning, sampling, concurrent (pruning was busy elsewhere), calibrate
    (a size's first run on another GPU model), exploit (exploring would have gone over the
    exploration budget: the best known size ran) or fallback (no size left in play: trained
    as without Zeus)."""
    job_phase: str | None = None
    """Where the job stood after the run, as its policy reckons it: pruning, sampling or
    infeasible (``domain.phases.shown_job_phase``: the latest run's is the job's phase on
    every surface); None for other policies, older stores, and a try taken late."""
    measurement: MeasurementKind
    """measured (a real GPU), replayed (the paper's traces) or simulated (a power model)."""
    gpu_model: str
    started_at: datetime
    finished_at: datetime | None
    recorded_late_at: datetime | None = None
    """When a try's result reached the store from the outbox, the store having failed at the
    end of its training (the latest such try's); None: every result recorded on time."""

    @property
    def batch_size(self) -> int:
        """The run's (``domain.run_batch_size``: its last try's)."""
        return run_batch_size(self.batch_sizes)

    @property
    def tries(self) -> int:
        return len(self.batch_sizes)


@dataclass(frozen=True)
class BudgetBooks:
    """The exploration budget as a job's runs left it, in Default runs' worth (each run's
    figure, its summary line's and XComs': ``RunRecord.budget_left_runs``)."""

    left_runs: float | None
    """After the latest run (negative: over budget); None without a budget, or before a run
    of the default size ran to its end (Default's cost is not known yet)."""
    over_after: tuple[int, ...]
    """The runs (``RunRecord.index``) after which the job was over its budget, its first
    included: an overrun stays in the books after the budget has recovered."""
    lowest_left_runs: float | None
    """The least the budget held after any run."""

    @classmethod
    def of(cls, runs: Sequence[RunRecord]) -> BudgetBooks:
        known = [(r.index, r.budget_left_runs) for r in runs if r.budget_left_runs is not None]
        return cls(
            runs[-1].budget_left_runs if runs else None,
            tuple(index for index, left in known if left < 0),
            min((left for _, left in known), default=None),
        )


@dataclass(frozen=True)
class Arm:
    """One batch size as the policy sees it: its windowed observations and the posterior of
    its mean cost (``posterior_sd`` is the spread Thompson sampling draws from)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    batch_size: int
    observations: int
    """Observed costs in the arm's window."""
    mean_cost: float | None
    """J-equivalents, as ``cost`` of a run."""
    posterior_mean: float | None
    posterior_sd: float | None
    pruned: bool
    """Dropped by pruning: no longer sampled."""
    reason: str | None = None
    """Why a pruned size is out of play (and what would bring it back)."""


@dataclass(frozen=True)
class ProfilePoint:
    """Power and speed measured at one limit for one batch size and GPU setup."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    batch_size: int
    gpu_model: str
    gpu_count: int
    power_limit_w: int
    avg_power_w: float
    """Summed over the GPUs."""
    steps_per_s: float
    """Training steps per second; samples per second are steps_per_s * batch_size."""

    @property
    def samples_per_s(self) -> float:
        return self.steps_per_s * self.batch_size


@dataclass(frozen=True)
class JobDetail:
    summary: JobSummary
    runs: tuple[RunRecord, ...]
    arms: tuple[Arm, ...]
    profile: tuple[ProfilePoint, ...]

    @property
    def budget(self) -> BudgetBooks:
        """The job page's budget card."""
        return BudgetBooks.of(self.runs)

"""What one try measured, and what a power profile holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement, choose_power_limit
from zeus_airflow.core.common.limit_search import LimitObjective, next_limit_w

StopReason = Literal[
    "target", "max_epochs", "early_stop", "budget_cap", "cannot_win", "returned", "no_steps"
]
"""Why a try stopped: ``target``; ``max_epochs``; ``early_stop``, at the early-stop bound
(``beta`` times the best mean cost: a verdict on the size); ``budget_cap``, at the cap the
exploration budget could pay for (below that bound: a censored observation, "costs more
than the cap", never a verdict, ``core/decide/budget.py``); ``cannot_win``, a try under such a cap
priced, from its cost per sample or its epochs, as unable to win (a verdict: the size is
dropped as dominated); ``returned``, the train function returned from inside
``run.epochs()``; ``no_steps``: it trained no step at all (an empty DataLoader: the data
holds fewer samples than the batch size with ``drop_last``): the size is unusable for the
job's data, a failure of it whatever metric was reported (``run.TrainingRun``)."""

BUDGET_STOPS: tuple[StopReason, ...] = ("budget_cap", "cannot_win")
"""Stops the exploration budget decided (``core/decide/exploring.py``, ``BudgetCap``): a framework's
callback ends training at once, inside an epoch."""
STOPPED_REASONS: tuple[StopReason, ...] = ("early_stop", *BUDGET_STOPS)
"""Stops the job decided, not the data: the size did not miss its target on this data."""


@dataclass(frozen=True)
class ObserverReport:
    """Observe mode (``power_limit_mode="observe"``): what training at the optimum instead of
    the limit trained at would have saved over the steps trained after profiling, from the
    profile's per-step ratios. Negative: the optimum would have cost more of it (an optimum
    that saves energy is often slower)."""

    would_save_energy_j: float
    would_save_time_s: float


@dataclass(frozen=True)
class RunOutcome:
    """What one try measured (a try, not a run: see ``domain/runs.py``). Energy in J, time in
    s. Its figures are the declared ones of a try (``domain.figures.TRY_FIGURES``), under the
    same names: the store writes them as they are, and ``domain.run_of`` adds them up into a
    run."""

    batch_size: int
    power_limit_w: int
    """The limit training ran at after profiling (the GPUs' own limit in ``measure`` mode or
    a fallback; the maximum in ``observe`` mode); with ``profile_unfinished``, the limit it
    ended at, never an optimum."""
    energy_j: float
    time_s: float
    cost: float
    epochs: int
    reached_target: bool
    stop_reason: StopReason
    last_metric: float | None
    setup_energy_j: float = 0.0
    """Energy before training started (imports, data, model building): reported, not cost."""
    setup_time_s: float = 0.0
    early_stop_cost: float | None = None
    """The bound the try ran under (None: unbounded)."""
    optimal_power_limit_w: int | None = None
    """The optimum the profile gives (None while it is incomplete, or in ``measure`` mode);
    ``power_limit_w`` in ``optimize`` mode."""
    observer: ObserverReport | None = None
    """Observe mode with a complete profile: what the optimum would have saved."""
    profile_unfinished: bool = False
    """The try ended before its size's power profile was complete, so it trained at the
    limits being profiled (``power_limit_w``: the one it ended at), in observe mode too; the
    profile goes on in the size's next run."""
    cpu_energy_j: float | None = None
    """The host's CPU package energy over the same training (RAPL), J; None: not measured.
    In the cost only when the job sets ``cost_includes_cpu``."""
    dram_energy_j: float | None = None
    """The host's DRAM energy over the same training (RAPL), J; None: not measured."""
    default_cost: float | None = None
    """What the same training steps would have cost at the GPUs' maximum power limit, the
    Default configuration's (job cost units), priced from the size's power profile; the
    measured cost where no limit was changed. For a try of the default batch size that ran
    to its end, what the recurrence would have cost without Zeus."""
    power_control: str | None = None
    """How the limits could be changed: ``zeusd``, ``nvml`` or ``none`` (measured at the
    limits found); None on a replayed or simulated GPU (``devices.base.power_control``)."""
    steps: int | None = None
    """Training steps it ran (``TrainingRun.steps_trained``), profiled ones included."""
    budget_left_runs: float | None = None
    """The exploration budget left after the try, in Default runs (set by the engine from
    the budget's books, ``budget.budget_after``); None without a budget."""

    @property
    def would_save_energy_j(self) -> float | None:
        """Observe mode: the observer's estimate (J); None without one."""
        return None if self.observer is None else self.observer.would_save_energy_j

    @property
    def would_save_time_s(self) -> float | None:
        return None if self.observer is None else self.observer.would_save_time_s


@dataclass(frozen=True)
class SliceInProgress:
    """The measured part of a slice a run ended in (or an epoch paused): what the next run of
    the same size continues, after its own warm-up. Never a measurement: no optimum, search,
    fleet translation or report reads it until the slice is complete."""

    power_limit_w: int
    steps: int
    time_s: float
    """Seconds measured so far (device clock)."""
    energy_j: float
    """Energy measured so far (J, summed over the group's GPUs)."""


@dataclass
class PowerProfile:
    """Measured power and speed per power limit for one (batch size, GPU model, GPU count)."""

    batch_size: int
    gpu_model: str
    gpu_count: int
    candidates_w: tuple[int, ...]
    """Limits the search may measure, highest first."""
    measurements: dict[int, LimitMeasurement] = field(default_factory=dict)
    partial: SliceInProgress | None = None
    """The slice in progress, at a limit not in ``measurements``; None: none."""
    search: LimitObjective | None = field(default=None, compare=False, repr=False)
    """What the profiler driving this profile searches on (it sets it; never stored). None:
    not known, so only a profile with every candidate measured counts as complete."""

    @property
    def complete(self) -> bool:
        """Whether the search over the limits has converged (not: every candidate measured;
        every candidate measured always counts as converged)."""
        if self.search is None:
            return not self.pending_w
        return self.converged(self.search)

    def converged(self, objective: LimitObjective) -> bool:
        """Whether the search on ``objective`` has nothing left to measure."""
        return self.next_w(objective) is None

    def next_w(self, objective: LimitObjective) -> int | None:
        """The limit the search on ``objective`` measures next (W); None once converged."""
        return next_limit_w(self.candidates_w, self.measurements, objective)

    @property
    def pending_w(self) -> list[int]:
        """Candidates not measured yet, highest first (a converged search leaves some)."""
        return [limit for limit in self.candidates_w if limit not in self.measurements]

    def optimum_w(self, config: ProfilerConfig, eta: float, max_power: float) -> int:
        return choose_power_limit(
            self.measurements, config.selector, eta, max_power, config.max_slowdown
        )

"""The results at a glance (``zeus-airflow report``): per job, what it did, what Default
would have done and what the next run will do; and the fleet's totals.

Built on the job summaries (``summaries``: one source for the figures and the savings the
UI shows too); what a summary lacks (the next run, the budget, the emissions against
Default) comes from the job's runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol

from zeus_airflow.core.carbon.accounting import ShiftSaving, shift_savings
from zeus_airflow.core.domain.phases import falls_back
from zeus_airflow.core.reports.arms import upcoming_batch_size
from zeus_airflow.core.reports.default import default_emissions_g
from zeus_airflow.core.reports.jobs import current, summaries
from zeus_airflow.core.reports.records import (
    DOCUMENTED,
    Z_95,
    BudgetBooks,
    DefaultEstimate,
    JobSummary,
    RunRecord,
    saved_fraction,
)
from zeus_airflow.core.reports.runs import runs
from zeus_airflow.core.store.clock import as_utc
from zeus_airflow.core.store.reads import Reader


@dataclass(frozen=True)
class Emissions:
    """gCO2e of the runs with carbon figures, and of Default over the same runs (None
    where there is no Default estimate yet); what their carbon-aware starts saved by
    shifting (None without one)."""

    emissions_g: float | None
    default_emissions_g: float | None
    shift: ShiftSaving | None = None

    @classmethod
    def of(cls, default: DefaultEstimate | None, shown: Sequence[RunRecord]) -> Emissions:
        pairs = [(e, d) for _, e, d in emitted(default, shown)]
        if not pairs:
            return cls(None, None)
        known = [d for _, d in pairs if d is not None]
        return cls(
            sum(e for e, _ in pairs),
            sum(known) if len(known) == len(pairs) else None,
            shift_savings(shown),
        )


def emitted(
    default: DefaultEstimate | None, runs: Sequence[RunRecord]
) -> list[tuple[RunRecord, float, float | None]]:
    """The runs with carbon figures, each with its gCO2e and what Default would have
    emitted instead (``default.default_emissions_g``; None before there is an estimate)."""
    defaults = default_emissions_g(default, runs)
    return [
        (r, r.emissions_g, d)
        for r, d in zip(runs, defaults, strict=True)
        if r.emissions_g is not None
    ]


@dataclass(frozen=True)
class JobReport:
    """One job (its current version) at a glance, against Default. Energy in J, time in s,
    cost in the paper's J-equivalents, emissions in gCO2e; each ``saved_*_fraction`` is
    ``(default - used) / default`` (negative: spent more; None without a Default figure)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    job_id: str
    version: int
    dags: tuple[str, ...]
    """The DAGs whose tasks ran the job (none for runs outside Airflow)."""
    runs: int
    finished_runs: int
    """Runs with a finished try: the runs Default is counted for."""
    phase: str
    """pruning, sampling or infeasible (no size left in play: runs fall back to the best
    known size), as the policy recorded it after the latest try (``domain.phases.
    shown_job_phase``: the fleet page and the job page show the same); the last decision's
    phase for other policies and older stores; pruning before any try."""
    next_phase: str
    """What the next run most likely does: pruning (the walk's next size), exploit (the
    best known size, as that step would not fit in the exploration budget), sampling, or
    the fallback's phase."""
    next_batch_size: int | None
    best_batch_size: int | None
    best_power_limit_w: int | None
    last_run_at: datetime | None
    last_status: str | None
    """The latest run's last try: running, succeeded, failed (target missed), error,
    invalid or expired."""
    fallback: bool
    """No size is left in play, or the latest run fell back to the best known one."""
    energy_j: float
    """Every live try."""
    default_energy_j: float | None
    """Default's estimate per run times ``finished_runs``."""
    saved_energy_fraction: float | None
    saved_energy_margin: float | None
    """The half-width of the 95 % interval of ``saved_energy_fraction``, from the runs' own
    spread (``records.saved_margin``): a saving within it is not distinguishable from 0. None
    without two runs alike to measure the spread by."""
    time_s: float
    default_time_s: float | None
    saved_time_fraction: float | None
    saved_time_margin: float | None
    """As ``saved_energy_margin``, of ``saved_time_fraction``."""
    cost: float
    default_cost: float | None
    """Default's cost per run, the job's cost formula on Default's energy and time (one
    Default for every figure), times ``finished_runs``. Not the sum of the tries'
    ``default_cost`` (``runs``), which prices each try's own steps for the budget's books."""
    saved_cost_fraction: float | None
    saved_cost_margin: float | None
    """As ``saved_energy_margin``, of ``saved_cost_fraction``."""
    emissions_g: float | None
    """The runs with carbon figures; None when none has them (no carbon_zone)."""
    default_emissions_g: float | None
    """Default over the same runs, started on schedule: against it, a run saves by its
    configuration and by shifting its start together."""
    saved_emissions_fraction: float | None
    unshifted_emissions_g: float | None
    """The runs with a carbon-aware start, had each started at once (its energy at the
    intensity forecast for its planned slot); None without such a run."""
    shift_saved_emissions_g: float | None
    """gCO2e their starts saved by shifting: ``unshifted_emissions_g`` minus what they
    emitted (``core/carbon/accounting.shift_saving``)."""
    shift_saved_emissions_fraction: float | None
    budget_left_runs: float | None
    """The exploration budget left after the latest run, in Default runs' worth (the
    figure of its summary and XComs; negative: over budget); None without a budget."""
    over_budget_runs: tuple[int, ...]
    """The runs (1-based, in decision order) after which the job was over its exploration
    budget, its first run included; empty when it never was."""
    lowest_budget_left_runs: float | None
    """The least the budget held after any run, in Default runs' worth."""
    measurement: str
    """measured (a real GPU), replayed (the paper's traces) or simulated (a power model),
    ``+``-joined when mixed: a replayed or simulated figure is not a measurement."""
    untrusted_profile: str | None
    """Why b0's power profile was not used to scale Default (it contradicts physics: a lower
    limit measured faster than a higher one; ``DefaultEstimate.untrusted_profile``); no
    saving is claimed from its ratios. None when it was trusted, or there is none."""

    @classmethod
    def of(
        cls,
        s: JobSummary,
        upcoming: tuple[str, int | None],
        every: Sequence[RunRecord],
        e: Emissions,
    ) -> JobReport:
        last = every[-1] if every else None
        books = BudgetBooks.of(every)
        return cls(
            job_id=s.job_id,
            version=s.version.version,
            dags=tuple(sorted({dag for dag, _ in s.tasks if dag})),
            runs=s.runs,
            finished_runs=s.finished_runs,
            phase=s.phase,
            next_phase=upcoming[0],
            next_batch_size=upcoming[1],
            best_batch_size=s.best_batch_size,
            best_power_limit_w=s.best_power_limit_w,
            last_run_at=last.started_at if last else None,
            last_status=last.status if last else None,
            fallback=falls_back(s.phase, last.phase if last else None),
            energy_j=s.energy_j,
            default_energy_j=s.default_energy_j,
            saved_energy_fraction=s.saved_energy_fraction,
            saved_energy_margin=s.saved_energy_margin,
            time_s=s.time_s,
            default_time_s=s.default_time_s,
            saved_time_fraction=s.saved_time_fraction,
            saved_time_margin=s.saved_time_margin,
            cost=s.cost,
            default_cost=s.default_cost,
            saved_cost_fraction=s.saved_cost_fraction,
            saved_cost_margin=s.saved_cost_margin,
            emissions_g=e.emissions_g,
            default_emissions_g=e.default_emissions_g,
            saved_emissions_fraction=saved_fraction(e.emissions_g, e.default_emissions_g),
            **shifted(e.shift),
            budget_left_runs=books.left_runs,
            over_budget_runs=books.over_after,
            lowest_budget_left_runs=books.lowest_left_runs,
            measurement=measurement_label(s.measurements),
            untrusted_profile=s.default.untrusted_profile if s.default else None,
        )


@dataclass(frozen=True)
class FleetTotals:
    """The jobs' figures summed. Default's are summed over the jobs that have a Default
    figure, and the fraction saved compares them with those jobs' own figures
    (``compared_*``): like with like."""

    __pydantic_config__: ClassVar[dict[str, Any]] = DOCUMENTED

    jobs: int
    runs: int
    learning_jobs: int
    """Jobs still pruning (trying batch sizes)."""
    falling_back_jobs: int
    measurement: str
    energy_j: float
    compared_energy_j: float | None
    default_energy_j: float | None
    saved_energy_fraction: float | None
    saved_energy_margin: float | None
    """The half-width of the 95 % interval of ``saved_energy_fraction``: the jobs' Default
    figures' uncertainties added (``JobReport.saved_energy_margin``); None when a compared
    job has none."""
    time_s: float
    compared_time_s: float | None
    default_time_s: float | None
    saved_time_fraction: float | None
    saved_time_margin: float | None
    cost: float
    compared_cost: float | None
    default_cost: float | None
    saved_cost_fraction: float | None
    saved_cost_margin: float | None
    emissions_g: float | None
    """None when no job has carbon figures."""
    compared_emissions_g: float | None
    default_emissions_g: float | None
    saved_emissions_fraction: float | None
    unshifted_emissions_g: float | None
    """Over the jobs' runs with a carbon-aware start (``JobReport``'s)."""
    shift_saved_emissions_g: float | None
    shift_saved_emissions_fraction: float | None


SHIFT_FIGURES = (
    "unshifted_emissions_g",
    "shift_saved_emissions_g",
    "shift_saved_emissions_fraction",
)
"""The time-shift figures of a report (``JobReport``, ``FleetTotals``, a fleet page's row)."""


def shifted(shift: ShiftSaving | None) -> dict[str, Any]:
    """The time-shift figures (``SHIFT_FIGURES``), by name; None without a shift."""
    values = (
        (None, None, None)
        if shift is None
        else (shift.unshifted_emissions_g, shift.saved_g, shift.saved_fraction)
    )
    return dict(zip(SHIFT_FIGURES, values, strict=True))


def measurement_label(kinds: Sequence[str]) -> str:
    """measured, replayed or simulated (``+``-joined when mixed), so that a simulated figure
    is never read as measured; "" before any run."""
    return "+".join(sorted(set(kinds)))


@dataclass(frozen=True)
class Saving:
    """A figure compared with Default's, as the reports name them: ``figure``, Default's
    (``default_<figure>``), the fraction saved (``saved_<what>_fraction``) and, in the fleet's
    totals, the jobs' own figure over those with a Default figure (``compared_<figure>``)."""

    what: str
    """energy, time, cost or emissions: also how the pages show it."""
    figure: str

    @property
    def default(self) -> str:
        return f"default_{self.figure}"

    @property
    def saved(self) -> str:
        return f"saved_{self.what}_fraction"

    @property
    def compared(self) -> str:
        return f"compared_{self.figure}"

    @property
    def margin(self) -> str:
        """The half-width of the saved fraction's 95 % interval (energy, time and cost)."""
        return f"saved_{self.what}_margin"


SAVINGS = (
    Saving("energy", "energy_j"),
    Saving("time", "time_s"),
    Saving("cost", "cost"),
    Saving("emissions", "emissions_g"),
)
"""Each figure the reports compare with Default's (``JobReport``, ``FleetTotals``), as the
fleet page's cards and ``zeus-airflow report``'s table read them."""


class Compared(Protocol):
    """What the fleet's totals read of a job (a :class:`JobReport`, a fleet page's row)."""

    @property
    def runs(self) -> int: ...
    @property
    def phase(self) -> str: ...
    @property
    def fallback(self) -> bool: ...
    @property
    def measurement(self) -> str: ...


def fleet_totals(jobs: Sequence[Compared]) -> FleetTotals:
    """The fleet's totals from its jobs' figures (each of ``SAVINGS`` read by name)."""
    figures: dict[str, Any] = {}
    for s in SAVINGS:
        known = [j for j in jobs if getattr(j, s.figure) is not None]
        compared = [j for j in known if getattr(j, s.default) is not None]
        used = _total(compared, s.figure)
        figures.update(
            {
                s.figure: _total(known, s.figure),
                s.compared: used,
                s.default: _total(compared, s.default),
            }
        )
        figures[s.saved] = saved_fraction(used, figures[s.default])
        if s.what != "emissions":
            figures[s.margin] = _fleet_margin(compared, s, figures[s.saved])
    return FleetTotals(
        jobs=len(jobs),
        runs=sum(j.runs for j in jobs),
        learning_jobs=sum(j.phase == "pruning" for j in jobs),
        falling_back_jobs=sum(j.fallback for j in jobs),
        measurement=measurement_label([k for j in jobs for k in j.measurement.split("+") if k]),
        **figures,
        **shifted(_shift_total(jobs)),
    )


def _fleet_margin(jobs: Sequence[Compared], s: Saving, fraction: float | None) -> float | None:
    """The fleet's margin for ``s``: each job's Default total is uncertain by its own
    spread (``margin / Z_95`` of its fraction, times its Default figure squared over its
    own), independently of the others'; their uncertainties add in quadrature."""
    if fraction is None or not jobs:
        return None
    variance = 0.0
    for j in jobs:
        margin, used, default = (
            getattr(j, s.margin, None),
            getattr(j, s.figure),
            getattr(j, s.default),
        )
        if margin is None or not used:
            return None
        variance += (margin / Z_95 * default * default / used) ** 2
    default_total = sum(getattr(j, s.default) for j in jobs)
    return Z_95 * abs(1.0 - fraction) * math.sqrt(variance) / default_total


def _shift_total(jobs: Sequence[Compared]) -> ShiftSaving | None:
    """The jobs' time-shift savings summed (of the jobs that report one: a fleet page's row
    that does not reads as none); None when no job has one."""
    unshifted, saved = "unshifted_emissions_g", "shift_saved_emissions_g"
    known = [j for j in jobs if getattr(j, unshifted, None) is not None]
    if not known:
        return None
    return ShiftSaving(sum(getattr(j, unshifted) for j in known), _total(known, saved))


def _total(jobs: Sequence[Compared], figure: str) -> Any:
    """The sum of ``figure`` over ``jobs``; None for no jobs (0.0 for energy, time, cost)."""
    if not jobs:
        return 0.0 if figure in ("energy_j", "time_s", "cost") else None
    return sum(getattr(j, figure) for j in jobs)


def report(
    reader: Reader, job_ids: Sequence[str], since: datetime | None = None
) -> list[JobReport]:
    """The current version of each of ``job_ids`` (in that order); with ``since`` (UTC
    unless it says), of the tries started at or after it."""
    if since is not None:  # the store compares UTC; SQLite compares the text as written
        since = as_utc(since).astimezone(UTC)
    ids = list(job_ids)
    history = reader.versions(ids)
    chosen = [current(history[j]) for j in ids]
    result = []
    for summary in summaries(reader, chosen, history, since):
        every = runs(reader, summary.version.pk)
        shown = [r for r in every if since is None or r.started_at >= since]
        phase, size = upcoming_batch_size(reader, summary.version)
        result.append(
            JobReport.of(summary, (phase, size), every, Emissions.of(summary.default, shown))
        )
    return result

"""How much a carbon-aware start saves, with and without Zeus: a replayed experiment.

Sixty daily runs of one paper workload on the replay GPU, each scheduled at the same hour
and due ``deadline_h`` later, on an hourly carbon-intensity trace. Four ways to run it:

- ``default``: b0 at the maximum power limit (the job without Zeus), started on schedule;
- ``zeus``: Zeus's choices (the real engine, policy and store), started on schedule;
- ``carbon``: b0 at the maximum limit, started when the planner expects the least emissions
  for the duration the user guessed (what carbon-aware schedulers do today);
- ``both``: Zeus's choices, started when the planner expects the least emissions for the
  duration and energy the job has learned (``core/carbon/expected.py`` on Zeus's store);
- ``both_guess``: Zeus's choices started for the user's guess instead, to isolate what the
  learned duration adds.

The planner sees a forecast (the trace with multiplicative noise, ``forecast_error``); the
emissions are those of the trace itself over each run's replayed span. Planning and
emissions are the carbon service's (``core/carbon/service.py``), as in the operator. Every figure is
**replayed**: energy and time from the paper's traces, not measured. The trace is
synthetic unless a real one is given (``synthetic_intensity`` says how it is made).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from zeus_airflow.core.carbon.accounting import shift_saving
from zeus_airflow.core.carbon.planner import ExpectedRun
from zeus_airflow.core.carbon.service import emissions, expected_run, plan_start
from zeus_airflow.core.carbon.signal import GridPoint
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.common.units import J_PER_KWH
from zeus_airflow.core.decide.policy import DefaultPolicy, ZeusPolicy
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey, TrainingFigures
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.sim.simulator import SimulationSpec, job_config

ARMS = ("default", "zeus", "carbon", "both_guess", "both")
ARM_NAMES = {
    "default": "Default (b0, max power, on schedule)",
    "zeus": "Zeus alone (on schedule)",
    "carbon": "Carbon-aware start alone (b0, guessed duration)",
    "both_guess": "Zeus + carbon-aware start (guessed duration)",
    "both": "Zeus + carbon-aware start (learned duration)",
}
HOUR = timedelta(hours=1)
TRACE_ZONE = "trace"
"""The zone the experiment's figures name: its intensity trace's."""
EPOCH = datetime(2026, 3, 2, tzinfo=UTC)
"""The synthetic trace's first day (a Monday)."""


def synthetic_intensity(
    days: int, seed: int, start: datetime = EPOCH, base_g: float = 380.0
) -> list[GridPoint]:
    """An hourly trace, in gCO2e/kWh, shaped like a solar-heavy grid's; SYNTHETIC.

    Per hour: ``base_g`` times a daily shape (a midday solar dip of up to -45 % centred on
    13:00 UTC with a 2.5 h spread, an evening peak of +20 % at 19:00, a night plateau),
    times a weather factor that drifts from day to day (AR(1), sunny days dip deeper), times
    5 % hourly noise; weekends 8 % lower. Price per MWh follows the same shape (higher when
    gas sets it): ``30 + 0.17 x intensity`` plus noise. Not a measurement of any grid.
    """
    rng = np.random.default_rng(seed)
    points, sun = [], 1.0
    for day in range(days):
        sun = 0.6 * sun + 0.4 * float(rng.uniform(0.3, 1.3))
        weekend = 0.92 if (start + day * 24 * HOUR).weekday() >= 5 else 1.0
        for hour in range(24):
            solar = -0.45 * min(sun, 1.0) * math.exp(-(((hour - 13) / 2.5) ** 2) / 2)
            evening = 0.20 * math.exp(-(((hour - 19) / 1.8) ** 2) / 2)
            g = base_g * (1 + solar + evening) * weekend * float(rng.normal(1.0, 0.05))
            price = 30 + 0.17 * g + float(rng.normal(0, 4))
            moment = start + (24 * day + hour) * HOUR
            points.append(GridPoint(moment, moment + HOUR, g, "file", max(price, 0.0)))
    return points


@dataclass(frozen=True)
class CarbonExperimentSpec:
    gpu: str
    workload: str
    traces_dir: str
    seed: int = 1
    days: int = 60
    schedule_hour: int = 0
    """UTC hour each run is scheduled (the end of its data interval)."""
    deadline_h: float = 20.0
    """The run must finish this many hours after it is scheduled."""
    guess_s: float = 2 * 3600.0
    """The duration the user guesses for the carbon-aware start alone."""
    forecast_error: float = 0.10
    """Relative sd of the forecast's hourly error."""


@dataclass
class ArmResult:
    arm: str
    emissions_g: list[float] = field(default_factory=list)
    energy_j: list[float] = field(default_factory=list)
    delay_s: list[float] = field(default_factory=list)
    late_days: list[int] = field(default_factory=list)
    """Days whose run finished after its deadline."""
    shift_saved_g: list[float] = field(default_factory=list)
    """gCO2e each day's start saved by shifting, against the same run started on schedule
    (``accounting.shift_saving``; 0 for a run that did not wait)."""
    unshifted_g: list[float] = field(default_factory=list)
    """gCO2e each day's run would have emitted started on schedule."""

    @property
    def late(self) -> int:
        return len(self.late_days)

    @property
    def total_g(self) -> float:
        """gCO2e over every day."""
        return sum(self.emissions_g)

    def cumulative_g(self) -> np.ndarray:
        """gCO2e emitted by the end of each day."""
        return np.cumsum(self.emissions_g)


@dataclass
class CarbonExperimentResult:
    spec: CarbonExperimentSpec
    trace_label: str
    arms: dict[str, ArmResult]
    mean_shape_g: list[float]
    """The trace's mean intensity per UTC hour."""


def _window(points: Sequence[GridPoint], start: datetime, end: datetime) -> list[GridPoint]:
    return [p for p in points if p.end > start and p.start < end]


def _forecast(
    points: Sequence[GridPoint], error: float, rng: np.random.Generator
) -> list[GridPoint]:
    return [
        GridPoint(
            p.start,
            p.end,
            p.intensity_g_per_kwh * max(0.05, float(rng.normal(1.0, error))),
            "forecast",
            p.price_per_mwh,
        )
        for p in points
    ]


def run_carbon_experiment(
    spec: CarbonExperimentSpec, grid: Sequence[GridPoint] | None = None, trace_label: str = ""
) -> CarbonExperimentResult:
    """The four arms over ``spec.days`` days of ``grid`` (default: the synthetic trace)."""
    trace = load_workload_trace(Path(spec.traces_dir), spec.gpu, spec.workload)
    if grid is None:
        grid = synthetic_intensity(spec.days + 2, spec.seed)
        trace_label = trace_label or "synthetic (see synthetic_intensity)"
    day0 = _first_schedule(grid, spec.schedule_hour)
    sim = SimulationSpec("zeus", spec.gpu, spec.workload, spec.seed, spec.traces_dir)
    engines = _engines(spec, trace, sim)
    arms = {arm: ArmResult(arm) for arm in ARMS}
    rng = np.random.default_rng(spec.seed + 1000)
    job_id = job_config(trace, sim).job_id
    for day in range(spec.days):
        scheduled = day0 + day * 24 * HOUR
        deadline = scheduled + timedelta(hours=spec.deadline_h)
        forecast = _forecast(_window(grid, scheduled, deadline), spec.forecast_error, rng)
        # The learned expectation is read before today's run, as the operator does.
        learned = expected_run(engines["zeus"][2], job_id, spec.guess_s)
        guessed = ExpectedRun(spec.guess_s, None, "the user's guess")
        runs: dict[str, RecurrenceResult] = {}
        for name, (engine, train, _) in engines.items():
            train.recurrence = day
            runs[name] = engine.run_recurrence(train, RecurrenceKey(run_id=f"day-{day}"))
        starts = {
            "default": scheduled,
            "zeus": scheduled,
            "carbon": plan_start(scheduled, deadline, guessed, forecast).start_at,
            "both": plan_start(scheduled, deadline, learned or guessed, forecast).start_at,
        }
        starts["both_guess"] = starts["carbon"]
        _account_day(arms, runs, starts, grid, day, scheduled, deadline)
    return CarbonExperimentResult(spec, trace_label, arms, _hourly_mean(grid))


def _first_schedule(grid: Sequence[GridPoint], hour: int) -> datetime:
    """The first day's scheduled start: ``hour`` UTC on the grid's first day, else the next."""
    first = min(p.start for p in grid)
    day0 = first.replace(hour=hour, minute=0, second=0, microsecond=0)
    if day0 < first:
        day0 += 24 * HOUR
    return day0


_Engines = dict[str, tuple[Engine, ReplayTraining, SQLStore]]


def _engines(spec: CarbonExperimentSpec, trace: WorkloadTrace, sim: SimulationSpec) -> _Engines:
    """Default's and Zeus's engines, each on its own replay GPU and in-memory store."""
    quiet = logging.getLogger("zeus_airflow.sim.carbon")
    quiet.setLevel(logging.ERROR)
    engines: _Engines = {}
    for name, policy in (("default", DefaultPolicy()), ("zeus", ZeusPolicy())):
        gpu = ReplayGPU(trace)
        store = SQLStore.in_memory()
        engines[name] = (
            Engine(
                store,
                gpu,
                job_config(trace, sim),
                policy,
                seed=spec.seed,
                heartbeat_s=None,
                log=quiet,
            ),
            ReplayTraining(gpu, seed=spec.seed),
            store,
        )
    return engines


def _account_day(
    arms: dict[str, ArmResult],
    runs: dict[str, RecurrenceResult],
    starts: dict[str, datetime],
    grid: Sequence[GridPoint],
    day: int,
    scheduled: datetime,
    deadline: datetime,
) -> None:
    """Each arm's day: its run (Default's or Zeus's) started at its start, its emissions over
    the trace's span of it, its delay, and whether it finished past the deadline."""
    for arm in ARMS:
        run = runs["default" if arm in ("default", "carbon") else "zeus"]
        begin = starts[arm]
        end = begin + timedelta(seconds=run.time_s)
        result = arms[arm]
        result.energy_j.append(run.energy_j)
        span = emissions(TRACE_ZONE, run.energy_j, begin, end, _window(grid, begin, end))
        result.emissions_g.append(span.emissions_g)
        result.delay_s.append((begin - scheduled).total_seconds())
        _account_shift(result, run, span.emissions_g, scheduled, begin, grid)
        if end > deadline:
            result.late_days.append(day)


def _account_shift(
    result: ArmResult,
    run: RecurrenceResult,
    emitted_g: float,
    scheduled: datetime,
    begin: datetime,
    grid: Sequence[GridPoint],
) -> None:
    """The day's time-shift saving by the one formula (``accounting.shift_saving``), the
    unshifted intensity being the trace's over the run's span had it started on schedule."""
    end = scheduled + timedelta(seconds=run.time_s)
    on_schedule = emissions(TRACE_ZONE, run.energy_j, scheduled, end, _window(grid, scheduled, end))
    figures = TrainingFigures(
        energy_j=run.energy_j,
        emissions_g=emitted_g,
        start_delay_s=(begin - scheduled).total_seconds(),
        unshifted_intensity_g_per_kwh=on_schedule.intensity_g_per_kwh,
    )
    saving = shift_saving(figures)
    result.shift_saved_g.append(saving.saved_g if saving else 0.0)
    result.unshifted_g.append(saving.unshifted_emissions_g if saving else emitted_g)


def _hourly_mean(grid: Sequence[GridPoint]) -> list[float]:
    """The trace's mean intensity per UTC hour, gCO2e/kWh."""
    shape = [0.0] * 24
    counts = [0] * 24
    for p in grid:
        shape[p.start.hour] += p.intensity_g_per_kwh
        counts[p.start.hour] += 1
    return [s / max(c, 1) for s, c in zip(shape, counts, strict=True)]


def _shifted(r: ArmResult) -> str:
    """What the arm's starts saved by shifting, and its share of what starting on schedule
    would have emitted: apart from what its configuration saved against Default."""
    saved, unshifted = sum(r.shift_saved_g), sum(r.unshifted_g)
    share = f" ({100 * saved / unshifted:.1f} %)" if unshifted else ""
    return f"{saved / 1000:.2f}{share}"


def table(result: CarbonExperimentResult) -> str:
    """A Markdown table of the arms: total emissions against Default, energy, delays."""
    default = result.arms["default"].total_g
    lines = [
        "| arm | emissions (kgCO2e, replayed) | vs Default | energy (kWh, replayed) | "
        "mean start delay (h) | runs past deadline | saved by shifting (kgCO2e) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        r = result.arms[arm]
        total = r.total_g
        change = 100 * (total / default - 1)
        lines.append(
            f"| {ARM_NAMES[arm]} | {total / 1000:.2f} | {change:+.1f} %"
            f" | {sum(r.energy_j) / J_PER_KWH:.1f} | "
            f"{sum(r.delay_s) / len(r.delay_s) / 3600:.1f} | {r.late} | {_shifted(r)} |"
        )
    return "\n".join(lines)

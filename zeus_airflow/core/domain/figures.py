"""A try's and a run's figures, declared once: each one's unit, how a run's value comes from
its tries', where it is stored, and where it goes (XComs, Airflow metrics, the CLI's and the
job page's runs tables).

``TrainingFigures`` is the declaration: one field per figure, with its :class:`Figure` in the
field's metadata and its meaning in the docstring under it (the JSON API documents a run's
fields from them). Everything else is derived from it: the ``zeus_trials`` columns
(``core/store/tables.py``; the migrations are still written, and a test compares them), what
the store writes when a try finishes (``core/store/sql.py``), ``domain.runs.run_of``, the one
rule that adds tries up into a run (the engine's ``RecurrenceResult``, the reports' runs and
planning's past runs), the XCom keys and the metrics (``operators/``), and the runs tables'
figure columns (``cli/views.py``, the plugin's ``job.html``). ``RUN_FACTS`` declares the few
things a run publishes that are not a try's figure (its batch size, its number of tries, ...).

Adding a figure: a field here, the measurement that produces it (``RunOutcome``, or the carbon
code for a run-level one) and a migration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from zeus_airflow.core.common.config import short_repr

Adds = Literal["sum", "sum_known", "last"]
"""How a run's value comes from its tries': ``sum``: the sum over its finished tries, None
while none has finished or when one of them lacks it (a partial sum would read as the whole);
``sum_known``: the sum over the finished tries that have one, None when none does; ``last``:
the last try's."""
Stored = Literal["try", "run"]
"""``try``: a column of ``zeus_trials`` that the store writes from the try's ``RunOutcome``
when it ends; ``run``: a column of ``zeus_run_carbon``, a run's carbon figure, computed by the
carbon code (``core/carbon/``), not by the engine, and written by ``Store.record_carbon``."""
SQLType = Literal["float", "int", "bool", "code", "zone", "text"]
"""The column's type: REAL, INTEGER, BOOLEAN, a short code (VARCHAR(16)), a grid zone
(VARCHAR(64)) or a text (TEXT)."""
Format = Literal[
    "watts",
    "energy",
    "time",
    "emissions",
    "joules",
    "kwh",
    "joules_sum",
    "cost",
    "count",
    "yes_no",
    "limit",
    "footprint",
]
"""How a column shows a figure: ``watts`` (``175 W``), ``energy`` (``812 kJ``), ``time``
(``1.9 min``), ``emissions`` (``38.1 gCO2e``), ``cost`` (``812 kJ-eq.``): in the unit that fits
(``core/common/units.py``); ``joules``: whole joules with thousands separators; ``kwh``: the
energy in kWh; ``joules_sum``: the sum of ``parts`` in joules, each part in the cell's tooltip;
``count``: a whole number; ``yes_no``; ``limit``: the power limit with how it was set and the
observe-mode optimum; ``footprint``: the emissions with the intensity's provenance and zone."""


@dataclass(frozen=True)
class Shown:
    """One column of a runs table that shows a figure."""

    label: str
    format: Format
    title: str = ""
    """The column header's tooltip."""
    shown_with: str | None = None
    """Shown only once a listed row has this figure (e.g. the carbon columns); None: always."""
    parts: tuple[tuple[str, str], ...] = ()
    """``joules_sum``: (label, figure) of each figure the cell adds up."""
    note: str | None = None
    """The job page: a figure (a text) shown as the cell's tooltip when it has one."""
    last: bool = False
    """The CLI: after the columns that say where the figures come from (a note on the row)."""


@dataclass(frozen=True)
class Figure:
    """What is declared about one figure (see the module's doc)."""

    name: str
    unit: str
    """SI unit (``J``, ``s``, ``W``, ``gCO2e``, ``gCO2e/kWh``), ``J-eq.`` for the cost,
    ``currency``, or "" for a count, a flag or a text."""
    adds: Adds = "last"
    stored: Stored = "try"
    sql: SQLType = "float"
    comment: str | None = None
    """The column's comment in the schema (the migration that added it says the same)."""
    xcom: bool = False
    """Pushed as an XCom of the same name by every run (a ``run`` figure: by every run with a
    ``carbon_zone``)."""
    metric: str | None = None
    """Sent as the Airflow metric ``zeus.run.<name>`` (``operators/metrics.py``), with this
    description; None: not a metric."""
    cli: Shown | None = None
    """Its column in ``zeus-airflow runs`` (``cli/views.py``)."""
    page: tuple[Shown, ...] = ()
    """Its columns in the job page's runs table, in order."""
    doc: str = ""
    """What it means, for a figure with no attribute docstring to say it (``RUN_FACTS``,
    ``SAVED_VS_DEFAULT``): the published schemas' descriptions (``integrations/published.py``)."""
    bounds: tuple[float, float] | None = None
    """A try's plausible values (``low, high``, in ``unit``): outside them a figure is a unit
    error or garbage (1e308 J, a negative cost, NaN). An outbox entry holding one is refused
    (``core/domain/outbox.py``); a stored one reads as missing (``store/state.py``).
    None: no numeric range (a flag, a code, a run's carbon figure)."""
    per_second_of: str | None = None
    """The try's time figure (``time_s``, ``setup_time_s``) whose seconds bound this energy
    or cost: at most that time times its devices' maximum power (:func:`power_bound`), for
    no GPU and host draws more. A figure above it reads as missing, as one outside
    ``bounds`` does (issue 48: one forged row of 1e15 J must not poison a job's books)."""
    within_wall_clock: bool = False
    """A time figure that a measured try cannot exceed its own wall clock by: its row's
    start to its finish, on the database's clock, plus :data:`WALL_CLOCK_SLACK_S`
    (``store/state.py``). Replayed and simulated tries carry virtual time (a traced epoch
    of an hour replays in a millisecond), so the bound holds for measured ones only."""


_FIGURE = "zeus_figure"

MAX_ENERGY_J = 1e15
"""A try's energy cannot exceed this (J): 280 GWh, more than the largest training run."""
MAX_TIME_S = 1e9
"""A try's time cannot exceed this (s): 32 years."""
MAX_COST = 1e18
"""A try's cost cannot exceed this (J-equivalents): the energy bound plus the time bound at
a megawatt's worth of GPUs, with room for ``beta`` times it as an early-stop bound."""
MAX_GPU_POWER_W = 3000.0
"""No GPU draws more than this (W): the largest boards' limits are 1-1.4 kW (B200, MI355X)."""
MAX_HOST_POWER_W = 5000.0
"""No host's CPUs and DRAM draw more than this (W) besides its GPUs: a cost with
``cost_includes_cpu`` adds their energy."""
POWER_BOUND_SLACK_S = 1.0
"""Seconds added to a try's time before it bounds an energy: counters tick apart from the
clock, and a try of a few milliseconds still reads a counter's last update."""
WALL_CLOCK_SLACK_S = 600.0
"""Seconds a measured try's time may exceed its row's start-to-finish span: the span is read
on the database's clock, a record the outbox delivers late carries the worker's finish time,
and two hosts' clocks may differ by minutes where nothing keeps them in step. A figure beyond
it is garbage (a counter's clock that jumped, a forged row), never a slow run."""
MAX_COUNT = 2**31 - 1
"""A count (epochs, steps, watts) fits the store's integer columns (``config.DB_INT_MAX``)."""
MAX_RUNS = 1e9
"""A budget cannot hold more runs' worth than this, either way: a billion runs of the job."""
ENERGY = (0.0, MAX_ENERGY_J)
TIME = (0.0, MAX_TIME_S)
COST = (0.0, MAX_COST)
COUNT = (0.0, float(MAX_COUNT))

ACCOUNTED = "emissions_g"
"""A run has carbon figures once it has this one (its emissions could be accounted): the
runs tables show their carbon columns from it (``shown_with``), the pages and the reports its
emissions (``TrainingFigures.has_carbon``, the store's versions with emissions)."""


def _figure(unit: str, **declared: Any) -> Any:
    """A field of :class:`TrainingFigures`: None until measured, its :class:`Figure` in the
    field's metadata (named after the field by :data:`FIGURES`)."""
    return field(default=None, metadata={_FIGURE: Figure("", unit, **declared)})


@dataclass(frozen=True, kw_only=True)
class TrainingFigures:
    """What training measured: a try's own figures, or a run's from its tries' (each field's
    ``adds``). Energy in J, time in s, power in W; None until measured."""

    # --- what training used -------------------------------------------------------------------
    power_limit_w: int | None = _figure(
        "W",
        bounds=COUNT,
        sql="int",
        comment="the limit it trained at after profiling",
        xcom=True,
        metric="power limit the last try trained at (W)",
        cli=Shown("limit", "watts"),
        page=(Shown("Power limit", "limit"),),
    )
    """The limit it trained at (a run's: its last try's)."""
    energy_j: float | None = _figure(
        "J",
        per_second_of="time_s",
        bounds=ENERGY,
        adds="sum",
        xcom=True,
        metric="training energy of the run, every try (J)",
        cli=Shown("energy", "energy"),
        page=(Shown("Energy (J)", "joules"), Shown("Energy (kWh)", "kwh")),
    )
    cpu_energy_j: float | None = _figure(
        "J",
        per_second_of="time_s",
        bounds=ENERGY,
        adds="sum",
        comment="host CPU package energy (RAPL) over training; NULL: not measured",
        xcom=True,
        page=(
            Shown(
                "CPU+DRAM (J)",
                "joules_sum",
                title="the host's CPU package and DRAM (RAPL) over the same training, beside "
                "the GPUs' energy; not in the cost unless cost_includes_cpu",
                parts=(("CPU", "cpu_energy_j"), ("DRAM", "dram_energy_j")),
            ),
        ),
    )
    """J, the host's CPU package (RAPL) over training (a run's: every try's), beside
    ``energy_j``; not part of ``cost`` unless the job sets cost_includes_cpu. None: not
    measured."""
    dram_energy_j: float | None = _figure(
        "J",
        per_second_of="time_s",
        bounds=ENERGY,
        adds="sum",
        comment="host DRAM energy (RAPL) over training; NULL: not measured",
        xcom=True,
    )
    """J, the host's DRAM (RAPL) over training (a run's: every try's). None: not measured."""
    time_s: float | None = _figure(
        "s",
        bounds=TIME,
        within_wall_clock=True,
        adds="sum",
        xcom=True,
        metric="training time of the run, every try (s)",
        cli=Shown("time", "time"),
        page=(Shown("Time", "time"),),
    )
    setup_energy_j: float | None = _figure(
        "J",
        per_second_of="setup_time_s",
        bounds=ENERGY,
        adds="sum",
        comment="energy before training started; not in the cost",
        xcom=True,
        metric="energy before training, every try (J; not in the cost)",
    )
    """J before training started (a run's: every try's): measured, not part of ``cost``."""
    setup_time_s: float | None = _figure(
        "s",
        bounds=TIME,
        within_wall_clock=True,
        adds="sum",
        xcom=True,
        metric="time before training, every try (s)",
        page=(Shown("Setup", "time", title="before training started: measured, not in the cost"),),
    )
    cost: float | None = _figure(
        "J-eq.",
        per_second_of="time_s",
        bounds=COST,
        adds="sum",
        xcom=True,
        metric="Zeus cost of the run (J-equivalents)",
        page=(Shown("Cost", "cost"),),
    )
    """J-equivalents: eta * energy_j + (1 - eta) * max power * time_s."""
    default_cost: float | None = _figure(
        "J-eq.",
        per_second_of="time_s",
        bounds=COST,
        adds="sum",
        comment="what the try's training steps would have cost at the maximum power limit",
        xcom=True,
    )
    """What its training steps (a run's: every try's) would have cost at the maximum power
    limit (cost units): for a run of the default batch size that ran to its end, its cost
    without Zeus. For any other try it prices that try's own steps, not a Default run: an
    early-stopped try's few steps, another batch size's steps. Summed over a job's tries it is
    therefore not Default's cost; ``report``'s ``default_cost`` is (the mean of this figure
    over the b0 runs that ran to their end, times the finished runs)."""
    budget_left_runs: float | None = _figure(
        "",
        bounds=(-MAX_RUNS, MAX_RUNS),
        comment="exploration budget left after the try, in Default runs",
        xcom=True,
    )
    """The exploration budget left after the try (a run's: after its last), in runs of the
    Default configuration: the job's allowance less what it spent, as the budget's books
    reckon it (``core/decide/budget.py``); negative: over budget; None without a budget or before
    Default's cost is known."""
    # --- a run's carbon figures (computed and stored by core/carbon/) --------------------------
    carbon_zone: str | None = _figure(
        "", stored="run", sql="zone", xcom=True, comment="grid zone of the carbon figures"
    )
    """Grid zone of the carbon figures; None: the task had no carbon_zone."""
    emissions_g: float | None = _figure(
        "gCO2e",
        adds="sum",
        stored="run",
        xcom=True,
        comment="gCO2e of the training and setup energy of every try, each over its own span",
        cli=Shown("CO2e", "emissions", shown_with=ACCOUNTED),
        page=(
            Shown(
                "Emissions",
                "footprint",
                title="gCO2e of the run's training and setup energy; where the grid's "
                "intensity came from",
                shown_with=ACCOUNTED,
            ),
        ),
    )
    """gCO2e of the training and setup energy (a run's: every try's, each over its own
    span)."""
    energy_cost: float | None = _figure(
        "currency",
        adds="sum",
        stored="run",
        xcom=True,
        comment="energy cost of every try in the price's currency",
    )
    """In the price's currency (a run's: every try's); None without a price."""
    carbon_intensity_g_per_kwh: float | None = _figure(
        "gCO2e/kWh",
        stored="run",
        xcom=True,
        comment="mean gCO2e/kWh over the span of the run's last try",
    )
    """Mean gCO2e/kWh over the (last) try's span."""
    carbon_provenance: str | None = _figure(
        "",
        stored="run",
        sql="code",
        xcom=True,
        comment="live, forecast, file, fixed or fallback: the last try's intensity's",
    )
    """live, forecast, file, fixed or fallback: where the intensity came from (the least direct
    figure used)."""
    carbon_note: str | None = _figure(
        "", stored="run", sql="text", comment="why the last try's intensity fell back"
    )
    """Why the intensity fell back."""
    start_delay_s: float | None = _figure(
        "s",
        stored="run",
        xcom=True,
        comment="the carbon-aware start's delay",
        page=(
            Shown(
                "Start delay",
                "time",
                title="how long the carbon-aware start waited",
                shown_with=ACCOUNTED,
                note="start_reason",
            ),
        ),
    )
    """How long the carbon-aware start waited (None: no start_deadline)."""
    expected_emissions_g: float | None = _figure(
        "gCO2e", stored="run", xcom=True, comment="gCO2e the start plan expected"
    )
    """gCO2e the start plan expected (None without an expected energy)."""
    unshifted_intensity_g_per_kwh: float | None = _figure(
        "gCO2e/kWh",
        stored="run",
        comment="forecast gCO2e/kWh had the run started when planned",
    )
    """Forecast gCO2e/kWh over the run's expected span had it started when planned."""
    start_reason: str | None = _figure(
        "", stored="run", sql="text", xcom=True, comment="why the start was chosen"
    )
    """Why the start was chosen."""

    # --- how training ended, and what observe mode found ---------------------------------------
    epochs: int | None = _figure(
        "",
        bounds=COUNT,
        adds="sum",
        sql="int",
        xcom=True,
        metric="epochs over every try",
        page=(Shown("Epochs", "count"),),
    )
    reached_target: bool | None = _figure(
        "",
        sql="bool",
        xcom=True,
        metric="1 if the last try reached the target, else 0",
        page=(Shown("Reached", "yes_no"),),
    )
    stop_reason: str | None = _figure("", sql="code")
    """target, max_epochs, early_stop or returned (a run's: its last try's)."""
    early_stop_cost: float | None = _figure(
        "J-eq.", bounds=COST, comment="the early-stop bound the try ran under"
    )
    """The early-stop bound the try ran under (None: unbounded)."""
    optimal_power_limit_w: int | None = _figure(
        "W", bounds=COUNT, sql="int", comment="the optimum its profile gives", xcom=True
    )
    """W, the optimum its profile gives (a run's: its last try's); ``power_limit_w`` unless
    in observe mode."""
    would_save_energy_j: float | None = _figure(
        "J",
        bounds=(-MAX_ENERGY_J, MAX_ENERGY_J),
        adds="sum_known",
        comment="observe mode: energy training at the optimum would have saved",
        xcom=True,
        cli=Shown("would save", "energy", shown_with="would_save_energy_j", last=True),
    )
    """Observe mode: J training at the optimum would have saved (a run's: every try that
    reported it; negative: it would have cost more); None outside observe mode."""
    would_save_time_s: float | None = _figure(
        "s", bounds=(-MAX_TIME_S, MAX_TIME_S), adds="sum_known", xcom=True
    )
    """Observe mode: s training at the optimum would have saved (negative: it would have
    taken longer); None outside observe mode."""
    power_control: str | None = _figure(
        "",
        sql="code",
        comment="how the limits could be changed: zeusd, nvml or none; NULL: a replayed or "
        "simulated GPU, or recorded before revision 0009",
        xcom=True,
    )
    """How its GPUs' limits could be changed: ``zeusd``, ``nvml``, ``amdsmi`` or ``none``;
    None on a replayed or simulated GPU (a run's: its last try's)."""
    steps: int | None = _figure(
        "",
        bounds=COUNT,
        adds="sum",
        sql="int",
        comment="training steps the try ran; NULL: recorded before revision 0011",
    )
    """Training steps it ran (a run's: over its tries), profiled ones included."""

    @property
    def host_energy_j(self) -> float | None:
        """The host's CPU package and DRAM energy together (J); None when neither was
        measured."""
        cpu, dram = self.cpu_energy_j, self.dram_energy_j
        return None if cpu is None and dram is None else (cpu or 0.0) + (dram or 0.0)

    @property
    def has_carbon(self) -> bool:
        """Whether its carbon was accounted (:data:`ACCOUNTED`)."""
        return self.emissions_g is not None

    @property
    def on_schedule_intensity_g_per_kwh(self) -> float | None:
        """gCO2e/kWh had it started on schedule: the forecast for its slot had it not waited,
        else the intensity it ran at; None without carbon figures."""
        if not self.has_carbon:
            return None
        waited = self.unshifted_intensity_g_per_kwh if self.start_delay_s else None
        return waited if waited is not None else self.carbon_intensity_g_per_kwh


FIGURES: Mapping[str, Figure] = {
    f.name: replace(f.metadata[_FIGURE], name=f.name) for f in fields(TrainingFigures)
}
"""Every figure of a try and a run, by name, in declaration order."""
TRY_FIGURES: tuple[str, ...] = tuple(n for n, f in FIGURES.items() if f.stored == "try")
"""What a try measures: the ``zeus_trials`` columns the store writes when it ends, which a
``RunOutcome`` carries under the same names."""

RUN_FIGURES: tuple[str, ...] = tuple(n for n, f in FIGURES.items() if f.stored == "run")
"""A run's carbon figures: the ``zeus_run_carbon`` columns ``Store.record_carbon`` writes,
one row per run, which a ``RunCarbon`` carries."""

RUN_FACTS: tuple[Figure, ...] = (
    Figure(
        "batch_size",
        "",
        sql="int",
        xcom=True,
        metric="batch size of the last try",
        doc="the batch size the run's last try trained with",
    ),
    Figure(
        "tries",
        "",
        sql="int",
        xcom=True,
        metric="batch sizes tried in the run",
        doc="how many tries (batch sizes) the run made",
    ),
    Figure(
        "phase",
        "",
        sql="code",
        xcom=True,
        doc="the last try's decision: pruning, sampling, concurrent, calibrate, exploit or "
        "fallback",
    ),
    Figure(
        "job_phase",
        "",
        sql="code",
        xcom=True,
        doc="where the job stands after the run, as its policy reckons it: pruning, sampling "
        "or infeasible (no batch size in play: runs fall back); the phase the fleet page, the "
        "job page and `zeus-airflow report` show; null for a policy without one",
    ),
    Figure(
        "measurement",
        "",
        sql="code",
        xcom=True,
        doc="where the figures come from: measured (a real GPU), replayed (the paper's "
        "traces) or simulated (a power model)",
    ),
)
"""What a run publishes besides its figures: its last try's batch size, how many tries it
made, its last decision's phase, the job's phase after it and where its figures come from
(measured, replayed, simulated)."""


XCOM_KEYS: tuple[str, ...] = tuple(
    f.name for f in (*FIGURES.values(), *RUN_FACTS) if f.xcom and f.stored == "try"
)
"""Keys the operator pushes for every run, besides ``return_value``."""
CARBON_XCOM_KEYS: tuple[str, ...] = tuple(
    f.name for f in FIGURES.values() if f.xcom and f.stored == "run"
)
"""Keys pushed besides those when the task has a ``carbon_zone``."""


SAVED_VS_DEFAULT: tuple[Figure, ...] = (
    Figure(
        "saved_energy_j",
        "J",
        doc="J saved against one run of the Default configuration (the default batch size at "
        "the maximum power limit, the job's estimate: the job page's and `zeus-airflow "
        "report`'s): Default's estimated energy minus this run's (negative: it spent more); "
        "None until the job has an estimate",
    ),
    Figure(
        "saved_time_s",
        "s",
        doc="s saved against Default's estimate per run (negative: it took longer)",
    ),
    Figure(
        "saved_cost",
        "J-eq.",
        doc="cost saved against Default's estimate per run (negative: it cost more)",
    ),
    Figure(
        "saved_emissions_g",
        "gCO2e",
        doc="gCO2e saved against Default's estimate started on schedule (negative: it "
        "emitted more); None without carbon figures or an estimate",
    ),
)
"""What a run saved against the Default configuration, by the job's estimate of Default
(``reports.default_estimate``): published with the run's figures beside its XComs
(OpenLineage, Asset events, MLflow), never stored (the estimate moves as the job learns)."""


def figure_problem(name: str, value: object, *, required: bool) -> str | None:
    """Why ``value`` cannot be the try figure ``name`` (its declared type and ``bounds``),
    or None when it can. None is a value only where the figure is not ``required``."""
    figure = FIGURES[name]
    if value is None:
        return f"{name} is missing" if required else None
    if figure.sql == "bool":
        return None if isinstance(value, bool) else f"{name}={value!r} is not True or False"
    if figure.sql in ("code", "text", "zone"):
        return None if isinstance(value, str) else f"{name}={value!r} is not a text"
    wanted = int if figure.sql == "int" else (int, float)
    shown = short_repr(value)
    if isinstance(value, bool) or not isinstance(value, wanted):
        return f"{name}={shown} is not {'an integer' if wanted is int else 'a number'}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name}={shown} is not a finite number"
    low, high = figure.bounds or (-math.inf, math.inf)
    if not low <= value <= high:
        return f"{name}={shown} is outside [{low:g}, {high:g}] {figure.unit}".rstrip()
    return None


def power_bound(seconds: float, gpu_count: int) -> float:
    """The most energy (J) or cost (J-equivalents) a try of ``seconds`` on ``gpu_count``
    GPUs can reach: every GPU and the host at the most any draws, for that long."""
    watts = gpu_count * MAX_GPU_POWER_W + MAX_HOST_POWER_W
    return (seconds + POWER_BOUND_SLACK_S) * watts


def power_problem(values: Mapping[str, Any], gpu_count: int) -> str | None:
    """Why a try's energies and costs (``values``, by figure name) cannot be what
    ``gpu_count`` GPUs spent in its time (:func:`power_bound`); None when they can. A
    figure or a time that is missing bounds nothing here (:func:`figure_problem` judges
    each alone)."""
    for name, figure in FIGURES.items():
        value, seconds = values.get(name), values.get(figure.per_second_of or "")
        if value is None or seconds is None or not _numbers(value, seconds):
            continue
        most = power_bound(seconds, gpu_count)
        if value > most:
            return (
                f"{name}={short_repr(value)} is more than {gpu_count} GPU(s) and their host "
                f"can spend in {figure.per_second_of}={short_repr(seconds)} ({most:.3g} "
                f"{figure.unit} at {MAX_GPU_POWER_W:g} W a GPU and {MAX_HOST_POWER_W:g} W "
                "for the host)"
            )
    return None


def _numbers(*values: Any) -> bool:
    return all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )

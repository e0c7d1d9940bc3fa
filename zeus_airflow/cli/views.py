"""The default tables of ``zeus-airflow runs`` and ``jobs``: a few columns in units that
fit each figure (kJ/MJ, s/min/h, gCO2e/kgCO2e), made to fit a 120-column terminal.

``--wide`` shows every field with its SI unit in its name, and JSON and CSV carry the raw
numbers. A try's outcome is named as the UI names it (``domain.STATUS_SHOWN``): a try that
missed its target inside a task that then succeeded must not read as a failed task.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.common.naming import run_date
from zeus_airflow.core.common.units import (
    show_budget_left,
    show_emissions,
    show_energy,
    show_time,
)
from zeus_airflow.core.domain import FIGURES, STATUS_SHOWN, Shown

Row = Mapping[str, Any]
Column = tuple[str, Callable[[Row], str]]

WIDTH = 120
"""The terminal the default tables are made for. A table that would be wider (long job ids:
mapped instances, carbon columns) names each job on a line of its own above its rows, then
leaves out its spare columns, saying which (:func:`fit`)."""
INDENT = "  "
"""Rows under their job's line, when the job names a line of its own."""
TRY_NOTE = (
    "outcome: each try's own (target missed: that batch size missed the target, and "
    "the task went on to another; the Airflow task's state is in Airflow). run: the DAG "
    "run's logical date in UTC (from Airflow's database), or the date in its run id marked "
    "(id), which Airflow sets to when the run was due (its logical date with a cron "
    "schedule, its interval's end with a data-interval one), or its id; [map index]. "
    "try: Airflow's try number.Zeus's attempt within it. "
    "--wide: every column, in SI units."
)
JOB_NOTE = (
    "tries: every try of every run (task instance); a run goes on to another batch "
    "size after a try misses its target, so its task can succeed with tries that "
    "missed. --wide: every column."
)


def _or_dash(show: Callable[[float], str], value: float | None) -> str:
    return "-" if value is None else show(value)


def outcome(row: Row) -> str:
    """A try's result as people read it; early-stopped tries and tries that trained no step
    say so."""
    if row["status"] == "failed" and row["stop_reason"] in _FAILED_HOW:
        return _FAILED_HOW[row["stop_reason"]]
    return STATUS_SHOWN.get(row["status"], (row["status"], ""))[0]


_FAILED_HOW = {"early_stop": "early-stopped", "no_steps": "no step trained"}


RUN_ID_CHARS = 21
"""The run column's width: a date and its ``(id)`` mark (``naming.run_date``)."""


def run_label(row: Row) -> str:
    """A try's DAG run as the default table names it: its date as every surface names it
    (``naming.run_date``: the logical date, else the run id's date marked ``(id)``), else
    its run id cut to ``RUN_ID_CHARS`` (``--wide`` shows it whole); its map index when
    mapped."""
    run_id = str(row["run_id"])
    shown = run_date(run_id, row.get("logical_date"))
    if shown is None:
        shown = run_id if len(run_id) <= RUN_ID_CHARS else run_id[: RUN_ID_CHARS - 1] + "…"
    return shown + ("" if row["map_index"] < 0 else f"[{row['map_index']}]")


SHOW: Mapping[str, Callable[[Any], str]] = {
    "watts": lambda w: f"{w} W",
    "energy": show_energy,
    "time": show_time,
    "emissions": show_emissions,
}
"""How the default table shows a figure, by its declared ``cli`` format."""

WHICH_COLUMNS: tuple[Column, ...] = (
    ("id", lambda r: str(r["id"])),
    ("job", lambda r: str(r["job_id"])),
    ("run", run_label),
    ("try", lambda r: f"{r['try_number']}.{r['attempt']}"),
    ("outcome", outcome),
    ("phase", lambda r: str(r["phase"])),
    ("batch", lambda r: str(r["batch_size"])),
)
"""Which try (the DAG run, its map index when mapped), how it ended, at what size; then its
figures (those with a ``cli`` column in ``core/domain/figures.py``: the limit, what it used,
its emissions once a listed try has them)."""
DATA_COLUMN: Column = ("data", lambda r: str(r["measurement"]))
"""Where the figures come from (measured, replayed, simulated)."""
BUDGET_COLUMN: Column = ("budget", lambda r: _or_dash(show_budget_left, r["budget_left_runs"]))
"""After the figures once a listed try ran under an exploration budget: the budget left after
it, in Default runs' worth (the figure of the run's summary and XComs; ``over by 0.18`` where
the try took the job over its budget)."""
LATE_COLUMN: Column = (
    "late",
    lambda r: (
        "-"
        if r["recorded_late_at"] is None
        else r["recorded_late_at"].isoformat(timespec="minutes")[:16]
    ),
)
"""Last once a listed try's result reached the store late, from the outbox (the store could
not take it when the try finished): when it was recorded."""


def _figure_column(name: str, shown: Shown) -> Column:
    show = SHOW[shown.format]
    return shown.label, lambda r: _or_dash(show, r[name])


def run_columns(rows: Sequence[Row]) -> tuple[Column, ...]:
    """The default table's columns for these tries: which, the declared figures (those
    declared ``last``, e.g. observe mode's "would save", after where the figures come
    from), the budget, ``late``; a column whose figure is ``shown_with`` another only when a
    listed try has that one."""
    figures = [
        (name, shown)
        for name, figure in FIGURES.items()
        if (shown := figure.cli) is not None
        and (shown.shown_with is None or any(r[shown.shown_with] is not None for r in rows))
    ]
    budget = [BUDGET_COLUMN] if any(r["budget_left_runs"] is not None for r in rows) else []
    late = [LATE_COLUMN] if any(r["recorded_late_at"] is not None for r in rows) else []
    return (
        *WHICH_COLUMNS,
        *(_figure_column(name, shown) for name, shown in figures if not shown.last),
        *budget,
        DATA_COLUMN,
        *(_figure_column(name, shown) for name, shown in figures if shown.last),
        *late,
    )


JOB_COLUMNS: tuple[Column, ...] = (
    ("job", lambda r: str(r["job_id"])),
    ("version", lambda r: f"{r['version']}{' (active)' if r['active'] else ''}"),
    ("tries", lambda r: str(r["trials"])),
    ("running", lambda r: str(r["running"])),
    ("target reached", lambda r: str(r["succeeded"])),
    ("target missed", lambda r: str(r["failed"])),
    ("energy", lambda r: show_energy(r["energy_j"])),
    ("time", lambda r: show_time(r["time_s"])),
    ("data", lambda r: str(r["measurement"] or "-")),
)
"""Every version of every job: its tries by outcome, and the energy and time they used."""


SPARE_RUN_COLUMNS = ("phase", "budget", "late")
"""Columns of ``runs`` left out, in this order, when a table still would not fit ``WIDTH``
(``--wide`` shows them)."""


def lay_out(
    columns: Sequence[str], rows: Sequence[Mapping[str, str]], indent: str = ""
) -> list[str]:
    """A header and the rows, each cell padded to its column's width, two spaces apart."""
    lines = [list(columns)] + [[row[c] for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))).rstrip()
        for line in lines
    ]


@dataclass(frozen=True)
class Fitted:
    """A table laid out to fit ``WIDTH`` columns (:func:`fit`)."""

    lines: list[str]
    hidden: list[str]
    """The spare columns left out to fit, in the order they were."""

    def note(self) -> str | None:
        """What was left out to fit, for the notes under the table; None when nothing was."""
        if not self.hidden:
            return None
        return (
            f"not shown, to fit {WIDTH} columns: {', '.join(self.hidden)} (--wide: every column)."
        )


def fit(
    columns: Sequence[str], rows: Sequence[Mapping[str, str]], key: str, spare: Sequence[str] = ()
) -> Fitted:
    """The table as it is when it fits ``WIDTH``; else ``key`` (the job) on a line of its own
    above its rows (long ids: mapped instances), then without the ``spare`` columns, one at a
    time in their order, until it fits."""
    lines = lay_out(columns, rows)
    if max(map(len, lines)) <= WIDTH:
        return Fitted(lines, [])
    shown = [c for c in columns if c != key]
    hidden: list[str] = []
    while True:
        lines = _grouped(shown, rows, key)
        left = [c for c in spare if c in shown]
        if _widest(lines) <= WIDTH or not left:
            return Fitted(lines, hidden)
        shown.remove(left[0])
        hidden.append(left[0])


def _grouped(columns: Sequence[str], rows: Sequence[Mapping[str, str]], key: str) -> list[str]:
    """The rows indented under one line naming their ``key`` each: the rows of a key
    together, in their order, the keys in the order they first appear (tries of several jobs
    interleave in time: naming the job where it changed repeated it, 14 times for 26 tries)."""
    order = {k: i for i, k in reversed(list(enumerate(row[key] for row in rows)))}
    together = sorted(rows, key=lambda row: order[row[key]])  # stable: each job's own order
    header, *body = lay_out(columns, together, INDENT)
    lines = [header]
    for i, (row, line) in enumerate(zip(together, body, strict=True)):
        if i == 0 or together[i - 1][key] != row[key]:
            lines.append(row[key])
        lines.append(line)
    return lines


def _widest(grouped: Sequence[str]) -> int:
    """The longest of a grouped table's lines, its key lines apart (as long as a key is)."""
    return max(len(line) for line in grouped if line.startswith(INDENT))


def cells(rows: Sequence[Row], columns: Sequence[Column]) -> list[dict[str, str]]:
    """The rows as the table's cells, by column name."""
    return [{name: show(row) for name, show in columns} for row in rows]


def wrapped(text: str) -> str:
    """``text`` wrapped to :data:`WIDTH`, never at a hyphen: "MJ-eq." is one word, and a
    headline must read the same wherever it is wrapped."""
    return textwrap.fill(text, WIDTH, break_on_hyphens=False)

"""``zeus-airflow report``: what Zeus saved, per job and for the fleet, against Default.

The table is for people (units that fit, percentages; a line for the fleet); JSON and CSV
carry the raw figures in SI units (J, s, gCO2e) and cost units, under the field names
``core/reports/report.py`` gives them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from datetime import datetime
from typing import Any, TextIO

from zeus_airflow.cli import views
from zeus_airflow.cli.options import non_blank
from zeus_airflow.cli.store import (
    FORMATS,
    add_location_options,
    json_value,
    reporting_errors,
    store_from_args,
    write,
)
from zeus_airflow.core import reports
from zeus_airflow.core.common.units import (
    show_cost,
    show_emissions,
    show_energy,
    show_saved_share,
    show_time,
)
from zeus_airflow.core.domain.finite import dump_strict_json

TABLE_COLUMNS = (
    "job",
    "runs",
    "phase",
    "next",
    "energy",
    "saved",
    "cost saved",
    "time",
    "time saved",
    "emissions",
    "budget",
    "data",
)
"""The table's columns (``emissions`` only when a job has carbon figures); ``saved``: energy
saved against Default, as a share of Default's."""
SPARE_COLUMNS = ("next", "time saved", "time")
"""Left out, in this order, when the table would not fit 120 columns even with each job on a
line of its own (``views.fit``); ``--wide`` shows every field."""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "report",
        help="what each job and the fleet saved against Default (energy, time, "
        "cost, emissions), and what each job's next run will do",
    )
    add_location_options(parser)
    parser.add_argument("--job", metavar="ID", type=non_blank("a job id"), help="only this job")
    parser.add_argument(
        "--since",
        metavar="DATE",
        type=since_date,
        help="only the tries started at or after DATE (ISO 8601, e.g. "
        "2026-11-01 or 2026-11-01T12:00; UTC unless it says)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="table: every field of every job, raw SI numbers (default: the columns that "
        "fit 120 characters, in units that fit)",
    )
    parser.set_defaults(handler=reporting_errors(_report))


def since_date(text: str) -> datetime:
    """``--since``: an ISO 8601 date or date and time (the report takes it as UTC when it
    has no offset)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: expected an ISO 8601 date such as 2026-11-01 or "
            "2026-11-01T12:00 (UTC unless an offset is given)"
        ) from None


def _report(args: argparse.Namespace) -> int:
    with store_from_args(args).reader() as reader:
        found = reports.report(reader, sorted(reader.job_dags(args.job)), args.since)
    if args.job and not found:
        print(f"zeus-airflow report: error: no job {args.job!r} in the store", file=sys.stderr)
        return 1
    fleet = dataclasses.asdict(reports.fleet_totals(found))
    jobs = [dataclasses.asdict(job) for job in found]
    if args.format == "json":
        dump_strict_json(
            {"since": args.since, "jobs": jobs, "fleet": fleet},
            sys.stdout,
            indent=2,
            default=json_value,
        )
        sys.stdout.write("\n")
    elif args.format == "csv" or args.wide:
        columns = [f.name for f in dataclasses.fields(reports.JobReport)]
        flat = [{**job, "dags": " ".join(job["dags"])} for job in jobs]
        write(flat, columns, args.format, sys.stdout)
    else:
        _table(jobs, fleet, sys.stdout)
    return 0


NOTES = (
    "saved: the share of Default's estimate (the default batch size at the maximum power "
    "limit) saved; negative: spent more. budget: the exploration budget left after the "
    "last run, in Default runs' worth (the figure of its summary and XComs). next: what the "
    "next run most likely does."
)
NOT_MEASURED = (
    "data: replayed (the paper's traces) and simulated (a power model) figures "
    "are not measurements of a GPU."
)
WIDTH = views.WIDTH
"""Columns of the terminal the notes are wrapped to."""
_SAVINGS = {s.what: s for s in reports.SAVINGS}
ENERGY, TIME, COST, EMISSIONS = (_SAVINGS[w] for w in ("energy", "time", "cost", "emissions"))
"""The compared figures, under the names the report gives them (``reports.SAVINGS``)."""


def _table(jobs: list[dict[str, Any]], fleet: dict[str, Any], out: TextIO) -> None:
    rows = [dict(zip(TABLE_COLUMNS, _cells(j), strict=True)) for j in jobs]
    carbon = any(j[EMISSIONS.figure] is not None for j in jobs)
    columns = [c for c in TABLE_COLUMNS if carbon or c != "emissions"]
    table = views.fit(columns, rows, "job", SPARE_COLUMNS)
    out.write("".join(line + "\n" for line in table.lines))
    notes = [_fleet_line(fleet), NOTES, *filter(None, [table.note()])]
    if any(j["measurement"] != "measured" for j in jobs if j["measurement"]):
        notes.append(NOT_MEASURED)
    out.write("\n" + "\n".join(textwrap.fill(note, WIDTH) for note in notes) + "\n")


def _cells(j: dict[str, Any]) -> tuple[str, ...]:
    size = j["next_batch_size"]
    next_run = "-" if size is None else f"{j['next_phase']} b={size}"
    budget = "-" if j["budget_left_runs"] is None else f"{j['budget_left_runs']:.1f}"
    return (
        j["job_id"],
        str(j["runs"]),
        j["phase"],
        next_run,
        show_energy(j[ENERGY.figure]),
        _share(j[ENERGY.saved]),
        _share(j[COST.saved]),
        show_time(j[TIME.figure]),
        _share(j[TIME.saved]),
        _or_dash(show_emissions, j[EMISSIONS.figure]),
        budget,
        j["measurement"] or "-",
    )


def _fleet_line(fleet: dict[str, Any]) -> str:
    saved = (
        "no Default estimate yet"
        if fleet[ENERGY.default] is None
        else f"saved {_share(fleet[ENERGY.saved])} of Default's energy "
        f"({show_energy(fleet[ENERGY.compared])} against "
        f"{show_energy(fleet[ENERGY.default])}), "
        f"{_share(fleet[COST.saved])} of its cost "
        f"({show_cost(fleet[COST.compared])} against {show_cost(fleet[COST.default])})"
    )
    emitted = fleet[EMISSIONS.figure]
    emissions = "" if emitted is None else f"; emitted {show_emissions(emitted)}"
    emissions += _shift_note(fleet)
    return (
        f"fleet: {fleet['jobs']} jobs, {fleet['runs']} runs, "
        f"{show_energy(fleet[ENERGY.figure])} over {show_time(fleet[TIME.figure])}; {saved}"
        f"{emissions}; {fleet['learning_jobs']} still pruning, "
        f"{fleet['falling_back_jobs']} falling back ({fleet['measurement'] or 'no runs'})"
    )


def _shift_note(fleet: dict[str, Any]) -> str:
    """What carbon-aware starts saved by shifting, apart from the configuration's savings
    against Default ("" without such a start)."""
    unshifted = fleet["unshifted_emissions_g"]
    if unshifted is None:
        return ""
    return (
        f"; shifting starts saved {show_emissions(fleet['shift_saved_emissions_g'])} "
        f"({_share(fleet['shift_saved_emissions_fraction'])} of the "
        f"{show_emissions(unshifted)} starting at once would have emitted)"
    )


def _share(fraction: float | None) -> str:
    """A fraction saved; ``0 %`` below the resolution (``units.SAVING_RESOLUTION``)."""
    return "-" if fraction is None else show_saved_share(fraction)


def _or_dash(show: Any, value: float | None) -> str:
    return "-" if value is None else str(show(value))

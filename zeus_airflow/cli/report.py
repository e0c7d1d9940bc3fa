"""``zeus-airflow report``: what Zeus saved, per job and for the fleet, against Default.

The table is for people (units that fit, percentages; a line for the fleet); JSON and CSV
carry the raw figures in SI units (J, s, gCO2e) and cost units, under the field names
``core/reports/report.py`` gives them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime
from typing import Any, TextIO

from zeus_airflow.cli import help_of, views
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
    NOT_DISTINGUISHABLE,
    show_budget_left,
    show_cost,
    show_emissions,
    show_energy,
    show_saved_interval,
    show_saved_share,
    show_time,
    within_noise,
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
    parser = commands.add_parser("report", help=help_of("report"))
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
    "limit) saved; negative: spent more; ± its 95 % interval from the runs' own spread "
    "(*: within it, not distinguishable from 0). budget: the exploration budget left after the "
    'last run, in Default runs\' worth (the figure of its summary and XComs; "over by": '
    "over budget), and the runs after which the job was over it. next: what the "
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
    notes = [
        _fleet_line(fleet),
        *_overrun_notes(jobs),
        *_untrusted_notes(jobs),
        NOTES,
        *filter(None, [table.note()]),
    ]
    if any(j["measurement"] != "measured" for j in jobs if j["measurement"]):
        notes.append(NOT_MEASURED)
    out.write("\n" + "\n".join(views.wrapped(note) for note in notes) + "\n")


def _cells(j: dict[str, Any]) -> tuple[str, ...]:
    size = j["next_batch_size"]
    next_run = "-" if size is None else f"{j['next_phase']} b={size}"
    budget = _budget(j)
    return (
        j["job_id"],
        str(j["runs"]),
        j["phase"],
        next_run,
        show_energy(j[ENERGY.figure]),
        _interval(j, ENERGY),
        _interval(j, COST),
        show_time(j[TIME.figure]),
        _interval(j, TIME),
        _or_dash(show_emissions, j[EMISSIONS.figure]),
        budget,
        j["measurement"] or "-",
    )


def _budget(j: dict[str, Any]) -> str:
    """The budget left after the last run, and the runs after which the job was over it
    (an overrun stays visible once the budget has recovered)."""
    left, over = j["budget_left_runs"], j["over_budget_runs"]
    shown = "-" if left is None else show_budget_left(left)
    if not over or (left is not None and left < 0 and len(over) == 1):
        return shown
    runs = f"run {over[0]}" if len(over) == 1 else f"{len(over)} runs"
    return f"{shown} (over after {runs})"


def _overrun_notes(jobs: list[dict[str, Any]]) -> list[str]:
    """A line per job that was ever over its exploration budget: after which runs, and by
    how much at most."""
    return [
        f"{j['job_id']}: over its exploration budget after run"
        f"{'s' if len(j['over_budget_runs']) > 1 else ''} "
        f"{', '.join(map(str, j['over_budget_runs']))} "
        f"(at most by {-j['lowest_budget_left_runs']:.2g} Default runs' worth)."
        for j in jobs
        if j["over_budget_runs"]
    ]


def _untrusted_notes(jobs: list[dict[str, Any]]) -> list[str]:
    """A line per job whose Default was not scaled by b0's power profile: it contradicts
    physics."""
    return [
        f"{j['job_id']}: the default batch size's power profile contradicts physics "
        f"({j['untrusted_profile']}): Default is its runs as measured, and no saving is "
        "claimed from the profile."
        for j in jobs
        if j["untrusted_profile"]
    ]


def headline(fleet: dict[str, Any]) -> str:
    """What the jobs saved against Default, each saving with its 95 % interval: the
    report's headline (``zeus-airflow demo`` prints it too)."""
    if fleet[ENERGY.default] is None:
        return "no Default estimate yet"
    energy = f"{show_energy(fleet[ENERGY.compared])} against {show_energy(fleet[ENERGY.default])}"
    cost = f"{show_cost(fleet[COST.compared])} against {show_cost(fleet[COST.default])}"
    return (
        f"saved {_headline(fleet, ENERGY, 'of Default', energy)}, "
        f"{_headline(fleet, COST, 'of its', cost)}, {_headline(fleet, TIME, 'of its')}"
    )


def _fleet_line(fleet: dict[str, Any]) -> str:
    saved = headline(fleet)
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


def _interval(figures: dict[str, Any], s: reports.Saving) -> str:
    """A fraction saved with its 95 % interval, short for a table cell: ``39.2±6.1 %``;
    ``*`` after it within the interval: not distinguishable from 0 (the notes say so)."""
    fraction, margin = figures[s.saved], figures[s.margin]
    if fraction is None or margin is None:
        return _share(fraction)
    share = show_saved_share(fraction).removesuffix(" %")
    shown = f"{share}±{100 * margin:.1f} %"
    return f"{shown}*" if within_noise(fraction, margin) else shown


def _headline(fleet: dict[str, Any], s: reports.Saving, of: str, detail: str = "") -> str:
    """E.g. ``39.2 % ± 6.1 % of its cost (812 kJ-eq. against 1.34 MJ-eq.)``, saying
    ``not distinguishable from 0`` first in the brackets when it is within its noise."""
    fraction, margin = fleet[s.saved], fleet[s.margin]
    said = [NOT_DISTINGUISHABLE] if within_noise(fraction, margin) else []
    said += [detail] if detail else []
    brackets = f" ({': '.join(said)})" if said else ""
    what = f"{of}'s {s.what}" if of == "of Default" else f"{of} {s.what}"
    return f"{show_saved_interval(fraction, margin, say_noise=False)} {what}{brackets}"


def _share(fraction: float | None) -> str:
    """A fraction saved; ``0 %`` below the resolution (``units.SAVING_RESOLUTION``)."""
    return "-" if fraction is None else show_saved_share(fraction)


def _or_dash(show: Any, value: float | None) -> str:
    return "-" if value is None else str(show(value))

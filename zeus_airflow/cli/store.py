"""``zeus-airflow db upgrade | jobs | runs | reset | drop-trials``: the store, from the
command line.

Every command finds the store as a task does: ``--db URL`` > the Airflow Connection
(``--conn-id``, default ``zeus_default`` when it exists) > ``$ZEUS_AIRFLOW_DB_URL`` > the
embedded SQLite file under ``$AIRFLOW_HOME``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

from zeus_airflow.cli import help_of, views
from zeus_airflow.cli.options import non_blank
from zeus_airflow.core.common.config import is_blank
from zeus_airflow.core.common.units import observe_note
from zeus_airflow.core.domain import TrainingFigures, TrialRecord, run_of
from zeus_airflow.core.domain.finite import dump_strict_json
from zeus_airflow.core.store.admin import (
    JobVersion,
    drop_trials,
    list_jobs,
    list_trials,
    reset_job,
)
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.location import (
    StoreLocation,
    open_store,
    resolve_location,
    upgrade_store,
)
from zeus_airflow.core.store.sql import SQLStore

FORMATS = ("table", "json", "csv")
"""``table``: a few columns in units that fit each figure (``cli/views.py``), every column
with ``--wide``; json and csv: every field, raw SI numbers."""

_WHICH = ("id", "job_id", "version")
WIDE_RUN_COLUMNS = (
    *_WHICH,
    *(f.name for f in dataclasses.fields(TrialRecord) if f.name not in _WHICH),
    "logical_date",
)
"""Every field of a trial, which trial first (``--wide``, json, csv), then its DAG run's
logical date (None where Airflow's database did not give it: :func:`logical_dates`)."""

Handler = Callable[[argparse.Namespace], int]


def register(commands: argparse._SubParsersAction) -> None:
    db = commands.add_parser("db", help=help_of("db"))
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    upgrade = db_commands.add_parser(
        "upgrade", help="create the store's tables or upgrade them to this version's schema"
    )
    add_location_options(upgrade)
    upgrade.set_defaults(handler=reporting_errors(_upgrade))

    jobs = commands.add_parser("jobs", help=help_of("jobs"))
    add_location_options(jobs)
    _format_option(jobs)
    _wide_option(jobs)
    jobs.set_defaults(handler=reporting_errors(_jobs))

    runs = commands.add_parser("runs", help=help_of("runs"))
    add_location_options(runs)
    _format_option(runs)
    _wide_option(runs)
    runs.add_argument(
        "--job",
        metavar="ID",
        type=non_blank("a job id"),
        help="only this job's trials (all its versions)",
    )
    runs.set_defaults(handler=reporting_errors(_runs))

    reset = commands.add_parser("reset", help=help_of("reset"))
    add_location_options(reset)
    reset.add_argument(
        "--job",
        metavar="ID",
        required=True,
        type=non_blank("a job id"),
        help="the job to start over",
    )
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    reset.set_defaults(handler=reporting_errors(_reset))
    _register_drop(commands)


def _register_drop(commands: argparse._SubParsersAction) -> None:
    drop = commands.add_parser("drop-trials", help=help_of("drop-trials"))
    add_location_options(drop)
    drop.add_argument(
        "--job", metavar="ID", required=True, type=non_blank("a job id"), help="their job"
    )
    drop.add_argument(
        "--trial",
        metavar="N",
        type=int,
        action="append",
        required=True,
        help="a trial id (`zeus-airflow runs --wide`'s id); repeat for more",
    )
    drop.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    drop.set_defaults(handler=reporting_errors(_drop))


def add_location_options(parser: argparse.ArgumentParser) -> None:
    """``--db`` / ``--conn-id``: where the store is (shared by every subcommand that opens it)."""
    parser.add_argument(
        "--db", metavar="URL", type=non_blank("a database URL"), help="SQLAlchemy URL of the store"
    )
    parser.add_argument(
        "--conn-id",
        metavar="ID",
        type=non_blank("an Airflow connection id"),
        help="Airflow connection of the store (default: zeus_default if it exists)",
    )


def _format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )


def _wide_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wide",
        action="store_true",
        help="table: every column, raw SI numbers (default: the columns that "
        "fit 120 characters, in units that fit)",
    )


def reporting_errors(handler: Handler) -> Handler:
    """Wrap a subcommand so a store error ends it with one clear line and exit status 1."""

    def run(args: argparse.Namespace) -> int:
        if not args.verbose:  # Airflow's logging setup would print Alembic's every step
            logging.getLogger("alembic").setLevel(logging.WARNING)
        try:
            return handler(args)
        except StoreError as err:
            print(f"zeus-airflow {args.command}: error: {err}", file=sys.stderr)
            return 1

    return run


def _location(args: argparse.Namespace) -> StoreLocation:
    if args.db is not None:
        return resolve_location(args.db)
    found = _location_without_airflow(args.conn_id)
    if found is not None:
        return found
    # Imported only here: Airflow takes seconds to import, and most lookups do not need it.
    from zeus_airflow.hooks.store import resolve_store_location

    return resolve_store_location(args.conn_id)


def _location_without_airflow(conn_id: str | None) -> StoreLocation | None:
    """The store as ``hooks.store.resolve_store_location`` finds it, its Connection read from
    Airflow's metadata database without importing Airflow (seconds of imports for one row:
    bench/RESULTS.md, "CLI latency"); None where Airflow must answer (a secrets backend, a
    Connection in the environment, a Connection id that does not exist, whose error is
    Airflow's to word, an unreadable database)."""
    from zeus_airflow import airflow_db

    if conn_id is not None and is_blank(conn_id):
        return None
    wanted = conn_id or airflow_db.DEFAULT_CONN_ID
    try:
        found = airflow_db.store_connection(wanted)
    except Exception:  # no metadata database here (yet): Airflow says what it makes of it
        return None
    if found is airflow_db.ASK_AIRFLOW or (found is None and wanted != airflow_db.DEFAULT_CONN_ID):
        return None
    if found is None:  # the default Connection is optional: the chain goes on
        return resolve_location()
    return StoreLocation(airflow_db.url_from_connection(found), "connection", wanted)


def store_from_args(args: argparse.Namespace) -> SQLStore:
    """The store the ``--db`` / ``--conn-id`` options name, else the default location chain."""
    return open_store(_location(args))


def _upgrade(args: argparse.Namespace) -> int:
    location = _location(args)
    done = upgrade_store(location)
    if done.recreated:
        print(
            f"{location.describe()}: recreated the missing table(s) "
            f"{', '.join(done.recreated)}, empty (schema revision {done.after})"
        )
    elif done.before == done.after:
        print(f"{location.describe()}: already at schema revision {done.after}")
    elif done.before is None:
        print(f"{location.describe()}: created the store's tables (schema revision {done.after})")
    else:
        print(f"{location.describe()}: upgraded from schema revision {done.before} to {done.after}")
    return 0


def _jobs(args: argparse.Namespace) -> int:
    store = store_from_args(args)
    kinds = _measurements(list_trials(store))
    rows = [
        {**dataclasses.asdict(job), "measurement": kinds.get((job.job_id, job.version), "")}
        for job in list_jobs(store)
    ]
    if args.format == "table" and not args.wide:
        write(
            views.cells(rows, views.JOB_COLUMNS),
            [c for c, _ in views.JOB_COLUMNS],
            "table",
            sys.stdout,
        )
        _notes(views.JOB_NOTE)
        return 0
    columns = (*(f.name for f in dataclasses.fields(JobVersion)), "measurement")
    write(rows, columns, args.format, sys.stdout)
    return 0


def _measurements(trials: list[TrialRecord]) -> dict[tuple[str, int], str]:
    """Where each job version's energy and time come from (measured, replayed, simulated;
    ``+``-joined when its trials mix them), so a simulated total is never read as measured."""
    kinds: dict[tuple[str, int], set[str]] = {}
    for trial in trials:
        kinds.setdefault((trial.job_id, trial.version), set()).add(str(trial.measurement))
    return {key: "+".join(sorted(found)) for key, found in kinds.items()}


def logical_dates(
    args: argparse.Namespace, trials: Sequence[TrialRecord]
) -> dict[tuple[str, str], datetime]:
    """The tries' DAG runs' logical dates, from Airflow's database as the UI reads them,
    when the store was found as a task finds it (no ``--db``: Airflow is there); else none,
    and the runs are named by their run ids' dates."""
    if args.db is not None:
        return {}
    try:
        # Imported only here, as for --conn-id; Airflow itself only where its configuration
        # needs it (airflow_db.cli_logical_dates): it takes seconds to import.
        from zeus_airflow.airflow_db import cli_logical_dates as of_dag_runs

        return of_dag_runs((t.dag_id, t.run_id) for t in trials if t.dag_id)
    except Exception as err:  # Airflow missing, or its database unreadable: no dates
        print(
            f"zeus-airflow runs: no logical dates from Airflow's database ({err}); "
            "runs are named by their run ids' dates",
            file=sys.stderr,
        )
        return {}


def _runs(args: argparse.Namespace) -> int:
    trials = list_trials(store_from_args(args), args.job)
    dates = logical_dates(args, trials) if trials else {}
    rows = [{**fields_of(t), "logical_date": dates.get((t.dag_id, t.run_id))} for t in trials]
    if args.job and not rows:
        print(f"no trials of job {args.job!r}", file=sys.stderr)
    notes = []
    if args.format == "table" and not args.wide:
        columns = views.run_columns(rows)
        table = views.fit(
            [c for c, _ in columns], views.cells(rows, columns), "job", views.SPARE_RUN_COLUMNS
        )
        print("\n".join(table.lines))
        notes = [views.TRY_NOTE, *filter(None, [table.note()])]
    else:
        write(rows, WIDE_RUN_COLUMNS, args.format, sys.stdout)
    if args.format != "table":
        return 0
    observed = [t for t in trials if t.would_save_energy_j is not None]
    if observed:
        # The tries' optima differ: the note says "at the optimum", not one limit.
        together = TrainingFigures(**{**run_of(observed), "optimal_power_limit_w": None})
        notes.append(
            f"{observe_note(together)} (over the {len(observed)} tries above that trained "
            "in observe mode)"
        )
    _notes(*notes)
    return 0


def fields_of(record: Any) -> dict[str, Any]:
    """A dataclass's fields by name, its values as they are: ``dataclasses.asdict`` deep-copies
    each value, half a second for 1,000 tries (bench/cli_latency.py)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def _notes(*notes: str) -> None:
    """Notes under a table, wrapped to the width the default tables fit."""
    if notes:
        print("\n" + "\n".join(views.wrapped(note) for note in notes))


def _reset(args: argparse.Namespace) -> int:
    store = store_from_args(args)
    if not args.yes and not _confirm(
        f"Start job {args.job!r} over in {store.where}? Its "
        "history stays visible but no longer counts. [y/N] "
    ):
        print("not reset", file=sys.stderr)
        return 1
    version = reset_job(store, args.job)
    print(f"job {args.job!r} starts over as version {version.version}")
    return 0


def _drop(args: argparse.Namespace) -> int:
    store = store_from_args(args)
    ids = ", ".join(map(str, args.trial))
    if not args.yes and not _confirm(
        f"Drop trial(s) {ids} of job {args.job!r} in {store.where}? Their rows stay, their "
        "figures move into their error text and no longer count. [y/N] ",
        "drop-trials",
    ):
        print("nothing dropped", file=sys.stderr)
        return 1
    dropped = drop_trials(store, args.job, args.trial)
    print(f"job {args.job!r}: dropped trial(s) {', '.join(map(str, dropped))}")
    return 0


def _confirm(question: str, command: str = "reset") -> bool:
    if not sys.stdin.isatty():
        print(
            f"{question}\nzeus-airflow {command}: refusing without a terminal to ask; pass "
            "--yes to confirm",
            file=sys.stderr,
        )
        return False
    return input(question).strip().lower() in ("y", "yes")


# --- output ------------------------------------------------------------------------------------
def write(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str, out: TextIO) -> None:
    """Rows as an aligned table, a JSON array or CSV with a header."""
    if fmt == "json":
        rows_out = [{c: row[c] for c in columns} for row in rows]
        dump_strict_json(rows_out, out, indent=2, default=json_value)
        out.write("\n")
    elif fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows([[_text(row[c], rounded=False) for c in columns] for row in rows])
    else:
        shown = [{c: _text(row[c]) for c in columns} for row in rows]
        out.write("".join(line + "\n" for line in views.lay_out(columns, shown)))


def json_value(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _text(value: object, rounded: bool = True) -> str:
    """A cell: rounded for people (table, where a missing value is ``-`` so that columns
    stay aligned and splittable), exact for programs (csv: empty)."""
    if value is None:
        return "-" if rounded else ""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds") if rounded else value.isoformat()
    if isinstance(value, float) and rounded:
        return f"{value:.6g}"
    return str(value)

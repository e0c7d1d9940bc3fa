"""The ``zeus-airflow`` command. Each subcommand lives in its own module, listed in
:data:`COMMANDS`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

Register = Callable[[argparse._SubParsersAction], None]

COMMANDS: dict[str, tuple[str, str]] = {
    "capriccio": ("capriccio", "the paper's drifting tweet corpus: generate, slice, retrain daily"),
    "demo": (
        "demo",
        "run the replay DAG through Airflow for 60 days; print the runs and the "
        "energy saved against the Default configuration",
    ),
    "drift-experiment": (
        "drift",
        "replay a workload whose epochs-to-target drift mid-run; window vs no window",
    ),
    "gpu": ("gpu", "GPU power limits left behind by tasks (this host)"),
    "report": (
        "report",
        "what each job and the fleet saved against Default (energy, time, "
        "cost, emissions), and what each job's next run will do",
    ),
    "simulate": ("simulate", "replay paper workloads through the real engine on the replay GPU"),
    "db": ("store", "the store's schema"),
    "jobs": ("store", "list the jobs in the store, every version"),
    "runs": ("store", "list the trials (one per try) in the store"),
    "reset": ("store", "start a job over as a new, empty version (its history stays visible)"),
    "drop-trials": (
        "store",
        "take trials that are no real tries (forged, a bad restore) out of every figure",
    ),
}
"""Every subcommand: the module under ``zeus_airflow.cli`` that registers it (its
``register(subparsers)``) and the line ``--help`` lists it with. Only the chosen command's
module is imported (``--help`` imports none): each pulls in what it needs (SQLAlchemy,
Alembic, numpy, the simulator), seconds in all (bench/RESULTS.md, "CLI latency")."""


def help_of(command: str) -> str:
    """The line ``zeus-airflow --help`` lists ``command`` with (its module registers it
    with the same)."""
    return COMMANDS[command][1]


def _registrars() -> tuple[Register, ...]:
    """Every subcommand module's ``register``, in the order of :data:`COMMANDS` (imports them
    all: for the test that no module is left out)."""
    modules = dict.fromkeys(module for module, _ in COMMANDS.values())
    return tuple(_module(m).register for m in modules)


def _module(name: str) -> Any:
    return importlib.import_module(f"zeus_airflow.cli.{name}")


class _OneLineParser(argparse.ArgumentParser):
    """Usage mistakes end in one line on stderr that names the fix, like every other CLI
    error (argparse would print the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser for ``argv``: the chosen command's module registers its commands, the
    others are listed by name and help line only (never imported)."""
    parser = _OneLineParser(
        prog="zeus-airflow",
        description="Energy-aware scheduled retraining for Apache Airflow (Zeus, NSDI'23).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen_module(argv)
    for command, (module, help_line) in COMMANDS.items():
        if module != chosen:
            commands.add_parser(command, help=help_line)
        elif command == _first_of(module):
            _module(module).register(commands)
    return parser


def _chosen_module(argv: Sequence[str]) -> str | None:
    """The module of the command ``argv`` names (its first word that is a command)."""
    for word in argv:
        if word in COMMANDS:
            return COMMANDS[word][0]
    return None


def _first_of(module: str) -> str:
    return next(c for c, (m, _) in COMMANDS.items() if m == module)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except Exception as err:
        # ConfigError imported only here: the configuration module is not needed for --help.
        from zeus_airflow.core.common.config import ConfigError

        if not isinstance(err, ConfigError):
            raise
        parser.exit(2, f"zeus-airflow {args.command}: error: {err}\n")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

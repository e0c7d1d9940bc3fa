"""The ``zeus-airflow`` command. Each subcommand lives in its own module and registers here."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Callable, Sequence

from zeus_airflow.core.config import ConfigError

Register = Callable[[argparse._SubParsersAction], None]


def _registrars() -> list[Register]:
    """Every module of this package with a ``register(subparsers)`` adds its subcommands."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # __main__ runs the CLI on import
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            found.append(module.register)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zeus-airflow",
        description="Energy-aware scheduled retraining for Apache Airflow (Zeus, NSDI'23).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args) or 0)
    except ConfigError as err:
        parser.exit(2, f"zeus-airflow {args.command}: error: {err}\n")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

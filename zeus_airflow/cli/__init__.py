"""The ``zeus-airflow`` command. Each subcommand lives in its own module, listed in
:func:`_registrars`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from zeus_airflow.core.common.config import ConfigError

Register = Callable[[argparse._SubParsersAction], None]


def _registrars() -> tuple[Register, ...]:
    """Every subcommand module, listed: each adds its subcommands in ``register(subparsers)``.

    A new subcommand module must be added here. The imports are inside the function so that
    ``python -m zeus_airflow.cli.demo_runs`` (run inside Airflow by the demo) does not load
    every subcommand's dependencies."""
    from zeus_airflow.cli import capriccio, demo, drift, gpu, report, simulate, store

    return (
        capriccio.register,
        demo.register,
        drift.register,
        gpu.register,
        report.register,
        simulate.register,
        store.register,
    )


class _OneLineParser(argparse.ArgumentParser):
    """Usage mistakes end in one line on stderr that names the fix, like every other CLI
    error (argparse would print the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="zeus-airflow",
        description="Energy-aware scheduled retraining for Apache Airflow (Zeus, NSDI'23).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args) or 0)
    except ConfigError as err:
        parser.exit(2, f"zeus-airflow {args.command}: error: {err}\n")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

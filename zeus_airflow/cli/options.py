"""Options several commands (and the benchmarks that drive them) share."""

from __future__ import annotations

import argparse
from pathlib import Path

TRACES_HELP = ("folder with summary_train.csv and summary_power_<gpu>.csv (default: "
               "$ZEUS_TRACES_DIR, else the paper's V100 and A40 traces shipped in the package)")


def add_traces_option(parser: argparse.ArgumentParser) -> None:
    """``--traces DIR``: None when not given, so the traces are found the default way."""
    parser.add_argument("--traces", type=Path, default=None, help=TRACES_HELP)


def traces_passed_on(traces: Path | None) -> list[str]:
    """``--traces DIR`` for a command run as a subprocess, or nothing: its own default."""
    return ["--traces", str(traces)] if traces else []

"""Options several commands (and the benchmarks that drive them) share."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from zeus_airflow.core.common.config import is_blank

TRACES_HELP = (
    "folder with summary_train.csv and summary_power_<gpu>.csv (default: "
    "$ZEUS_TRACES_DIR, else the paper's V100 and A40 traces shipped in the package)"
)


def non_blank(what: str) -> Callable[[str], str]:
    """An argparse ``type`` that refuses '' (and NUL bytes): an empty value is missing, and
    must never mean the default (``--db ''`` would act on the default store)."""

    def check(text: str) -> str:
        if is_blank(text):
            raise argparse.ArgumentTypeError(
                f"{text!r} is invalid: expected {what} (not "
                "empty, no NUL bytes); leave the option out for "
                "the default"
            )
        return text

    return check


def add_traces_option(parser: argparse.ArgumentParser) -> None:
    """``--traces DIR``: None when not given, so the traces are found the default way."""
    parser.add_argument("--traces", type=Path, default=None, help=TRACES_HELP)


def traces_passed_on(traces: Path | None) -> list[str]:
    """``--traces DIR`` for a command run as a subprocess, or nothing: its own default."""
    return ["--traces", str(traces)] if traces else []


def add_output_option(parser: argparse.ArgumentParser, stem: str) -> None:
    """A benchmark's ``--output STEM`` (its files are STEM.md, STEM.csv, ...); resolve it with
    :func:`bench_output` after parsing."""
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"stem of the files written (default: bench/{stem}; with --quick, "
        "a new temporary folder)",
    )


def bench_output(output: Path | None, quick: bool, stem: str) -> Path:
    """``--output`` as given; else bench/STEM, where the recorded results live, unless the run
    is a quick one: a quick run's figures go to a temporary folder, never over the records."""
    if output is not None:
        return output
    if not quick:
        return Path("bench") / stem
    path = Path(tempfile.mkdtemp(prefix=f"zeus-bench-{stem}-")) / stem
    print(f"--quick: writing {path}.*", file=sys.stderr)
    return path

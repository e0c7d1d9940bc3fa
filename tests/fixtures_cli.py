"""The CLI's tests' support: ``zeus-airflow`` run in this process, its output captured."""

from __future__ import annotations

import pytest

from zeus_airflow.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``zeus-airflow argv``."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err

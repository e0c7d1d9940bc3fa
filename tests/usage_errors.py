"""The check every command's bad-argument test makes: a usage error, named, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from zeus_airflow.cli import main


def assert_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str, unwritten: Path
) -> None:
    """``zeus-airflow argv`` exits with status 2, says ``message`` on stderr, and has not
    written ``unwritten`` (its output): it refused before doing the work."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not unwritten.exists()

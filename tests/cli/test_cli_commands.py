"""The ``zeus-airflow`` command's subcommands are listed in ``zeus_airflow/cli/__init__.py``."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import zeus_airflow.cli
from zeus_airflow.cli import _registrars, main


def test_every_subcommand_module_is_listed() -> None:
    # A module with register() that is not in the list would silently lose its subcommands.
    modules = [
        importlib.import_module(f"zeus_airflow.cli.{info.name}")
        for info in pkgutil.iter_modules(zeus_airflow.cli.__path__)
        if not info.name.startswith("_")
    ]
    defined = {module.register for module in modules if hasattr(module, "register")}
    listed = _registrars()
    assert set(listed) == defined and len(listed) == len(defined)


@pytest.mark.parametrize(
    "command",
    ["capriccio", "demo", "drift-experiment", "gpu", "simulate", "db", "jobs", "runs", "reset"],
)
def test_each_subcommand_answers_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0 and f"zeus-airflow {command}" in capsys.readouterr().out


def test_an_unknown_subcommand_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "no-such-command" in err


HEAVY = ("sqlalchemy", "alembic", "numpy", "airflow", "zeus_airflow.core", "zeus_airflow.sim")
"""What ``--help`` must not import: it prints the commands' names and help lines only."""


def _after(argv: list[str]) -> tuple[str, list[str]]:
    """What ``main(argv)`` prints, and the modules loaded by then, in a fresh interpreter
    (this one has imported everything already)."""
    code = (
        "import sys\n"
        "from zeus_airflow.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout, done.stderr.split()


def test_help_imports_no_subcommand() -> None:
    printed, loaded = _after(["--help"])
    assert "runs" in printed and "report" in printed
    assert [m for m in loaded if m.startswith(HEAVY) or m.startswith("zeus_airflow.cli.")] == []


def test_a_command_imports_its_own_module_only() -> None:
    printed, loaded = _after(["runs", "--help"])
    assert "zeus-airflow runs" in printed and "zeus_airflow.cli.store" in loaded
    assert not {"zeus_airflow.cli.simulate", "zeus_airflow.cli.drift", "zeus_airflow.sim"} & set(
        loaded
    )

"""The ``zeus-airflow`` command's subcommands are listed in ``zeus_airflow/cli/__init__.py``."""

from __future__ import annotations

import importlib
import pkgutil

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

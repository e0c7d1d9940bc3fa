"""The Airflow versions zeus-airflow runs on: a clear error on an older one, naming the
supported versions, and one module (``zeus_airflow/airflow_compat.py``) that knows them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import airflow
import pytest

from zeus_airflow.airflow_compat import (
    MIN_AIRFLOW,
    TESTED_AIRFLOW,
    UnsupportedAirflowError,
    auth_manager_login_url,
    check_airflow_version,
)

REPO = Path(__file__).resolve().parents[1]
SUPPORTED_TEXT = "Apache Airflow 3.2 or later (tested with 3.2 and 3.3)"


@pytest.mark.parametrize("version", ["3.1.8", "3.0.6", "2.11.2", "3.1.0rc1", "unknown"])
def test_an_older_airflow_is_refused_with_the_supported_versions(version: str) -> None:
    with pytest.raises(UnsupportedAirflowError) as refused:
        check_airflow_version(version)
    message = str(refused.value)
    assert SUPPORTED_TEXT in message and f"this is Apache Airflow {version}." in message
    assert "apache-airflow>=3.2" in message
    assert isinstance(refused.value, ImportError)  # what Airflow reports for a plugin or DAG


@pytest.mark.parametrize("version", ["3.2.0", "3.2.2", "3.3.2", "3.3.0rc1", "3.4.0.dev0", "4.0.0"])
def test_supported_and_later_airflows_pass(version: str) -> None:
    check_airflow_version(version)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


STATEMENTS = (
    "from zeus_airflow import ZeusTrainOperator",  # what a DAG file does
    "import zeus_airflow.plugins.plugin",  # what Airflow's plugin manager does
    "import zeus_airflow.hooks.store",
)

# Each statement in turn, in one fresh interpreter (importing Airflow takes seconds each): a
# failed import leaves nothing of zeus_airflow behind, and what the earlier statement did load is
# dropped too, so each statement imports zeus_airflow from nothing, as a new process would.
EACH_STATEMENT = """
import sys, traceback
for statement in {statements!r}:
    for name in [n for n in sys.modules if n.split(".")[0] == "zeus_airflow"]:
        del sys.modules[name]
    try:
        exec(statement)
    except Exception as error:
        # The last line of the traceback a user would see.
        print("outcome:", traceback.format_exception_only(error)[-1].strip())
    else:
        print("outcome: imported")
"""


def outcomes(done: subprocess.CompletedProcess[str]) -> list[str]:
    """What each statement did; an import may log to stdout too (alembic does, on 3.2)."""
    prefix = "outcome: "
    return [line[len(prefix) :] for line in done.stdout.splitlines() if line.startswith(prefix)]


def test_importing_on_airflow_3_1_names_the_supported_versions() -> None:
    code = EACH_STATEMENT.format(statements=STATEMENTS)
    faked = run_python('import airflow; airflow.__version__ = "3.1.8"\n' + code)
    assert faked.returncode == 0, faked.stderr
    lines = outcomes(faked)
    assert len(lines) == len(STATEMENTS), faked.stdout
    for statement, last in zip(STATEMENTS, lines, strict=True):
        assert last.startswith("zeus_airflow.airflow_compat.UnsupportedAirflowError: "), statement
        assert SUPPORTED_TEXT in last and "this is Apache Airflow 3.1.8." in last, statement
    # The same imports on the Airflow installed here work: the error is the version's.
    real = run_python(code)
    assert outcomes(real) == ["imported"] * len(STATEMENTS), real.stdout + real.stderr


def test_the_installed_airflow_is_one_ci_tests() -> None:
    assert ".".join(airflow.__version__.split(".")[:2]) in TESTED_AIRFLOW


def test_pyproject_requires_the_minimum_with_no_upper_bound() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    airflow_req = [d for d in dependencies if re.match(r"apache-airflow\b", d)]
    assert airflow_req == [f"apache-airflow>={'.'.join(map(str, MIN_AIRFLOW))}"]


def test_only_the_compat_module_asks_for_airflows_version() -> None:
    asks = re.compile(
        r"airflow\.__version__|AIRFLOW_V_\d|packaging\.version|"
        r"from airflow import __version__|version\(\"apache-airflow"
    )
    askers = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "zeus_airflow").rglob("*.py")
        if asks.search(p.read_text())
    ]
    assert askers == ["zeus_airflow/airflow_compat.py"]


class _LoginOf32:
    """Airflow 3.2's simple auth manager: ``next_url`` left out of the login URL."""

    def get_url_login(self, **_: object) -> str:
        return "/auth/login"


class _LoginOf33:
    """Airflow 3.3's: ``next_url`` as ``?next=``."""

    def get_url_login(self, *, next_url: str) -> str:
        return f"/auth/login?{urlencode({'next': next_url})}"


@pytest.mark.parametrize("manager", [_LoginOf32(), _LoginOf33()])
def test_the_login_url_comes_back_to_the_page_on_either_version(manager: object) -> None:
    page = "http://127.0.0.1:8080/zeus/jobs/a%20b?page=2"
    url = urlsplit(auth_manager_login_url(manager, page))
    assert url.path == "/auth/login"
    assert parse_qs(url.query)["next"] == [page]


def test_the_installed_simple_auth_managers_login_url_comes_back() -> None:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    page = "http://127.0.0.1:8080/zeus/jobs/x"
    url = urlsplit(auth_manager_login_url(SimpleAuthManager(), page))
    assert url.path.endswith("/login") and parse_qs(url.query)["next"] == [page]

"""Airflow's real servers for a test: api-server, dag-processor and scheduler (LocalExecutor).

Shared by the tests that go through the real scheduler rather than ``dag.test()``
(tests/operators/test_operator_scheduler.py, tests/operators/test_carbon_deferral.py,
tests/operators/test_acceptance_noise.py, tests/operators/test_zeusd_scheduler.py). Everything
listens on
127.0.0.1 only, the scheduler runs with ``--skip-serve-logs``, every wait is bounded, and
every process started here (with its task processes and executor workers) is stopped at the
end, by pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
FINISHED = ("success", "failed")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def airflow_home(
    home: Path,
    pristine_db: Path,
    dags_folder: Path | None = None,
    *,
    parallelism: int = 2,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of servers on a home of their own: a copy of the freshly migrated
    metadata DB ``pristine_db`` in ``home``, DAGs from ``dags_folder`` (default
    ``home/dags``, created), LocalExecutor with ``parallelism`` workers, and no AIRFLOW_*,
    PYTEST* or store URL of the calling process."""
    home.mkdir(parents=True, exist_ok=True)
    dags = dags_folder or home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pristine_db, home / "airflow.db")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "ZEUS_AIRFLOW_DB_URL", "PYTEST"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),  # LocalExecutor forks this many workers
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),  # one for every process
        }
    )
    env.update(extra or {})
    return env


def catching_up_home(
    home: Path,
    pristine_db: Path,
    dag_file: str,
    dag_source: str,
    runs: int,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """:func:`airflow_home` with one daily DAG, ``dag_source`` with ``{start}`` filled in:
    ``runs - 1`` days ago, so that the scheduler's catch-up makes ``runs`` runs up to now."""
    env = airflow_home(home, pristine_db, extra=extra)
    start = (datetime.now(UTC) - timedelta(days=runs - 1)).date().isoformat()
    (home / "dags" / dag_file).write_text(dag_source.format(start=start))
    return env


@contextlib.contextmanager
def running_servers(
    env: dict[str, str], logs: Path, startup_s: float = 240.0, *, triggerer: bool = False
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """api-server, then dag-processor and scheduler (and the triggerer, for deferrable
    tasks), logging to ``logs/<command>.log``; all stopped on exit."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*command: str) -> None:
        with (logs / f"{command[0]}.log").open("wb") as log:
            started.append(
                subprocess.Popen(
                    [AIRFLOW, *command],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        port = env["AIRFLOW__API__PORT"]
        start("api-server", "--host", "127.0.0.1", "--port", port)
        wait_until_up(f"http://127.0.0.1:{port}/api/v2/monitor/health", started, startup_s)
        start("dag-processor")  # tasks queued before the API is up would fail to start
        start("scheduler", "--skip-serve-logs")
        if triggerer:
            start("triggerer", "--skip-serve-logs")
        yield started
    finally:
        stop(started)


def wait_until_up(url: str, started: list[subprocess.Popen[bytes]], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in started), "an Airflow process exited early"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{url} did not answer within {deadline_s:.0f} s")


def stop(started: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM what was started and every descendant (task processes, executor workers), by
    pid; SIGKILL whatever is still there after 10 s."""
    family = [psutil.Process(p.pid) for p in started if p.poll() is None]
    for parent in list(family):
        with contextlib.suppress(psutil.NoSuchProcess):
            family.extend(parent.children(recursive=True))
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=10)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def dag_runs(home: str | Path, dag_id: str) -> list[tuple[str, str]]:
    """(run_id, state) of a DAG's runs by logical date, read straight from the metadata DB."""
    path = Path(home) / "airflow.db"
    if not path.exists():
        return []
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return db.execute(
                "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY logical_date",
                (dag_id,),
            ).fetchall()
        except sqlite3.OperationalError:  # tables not there yet, or briefly locked
            return []


def wait_for_runs(
    home: str | Path,
    dag_id: str,
    count: int,
    started: list[subprocess.Popen[bytes]],
    deadline_s: float,
) -> list[tuple[str, str]]:
    """The DAG's runs once ``count`` of them have finished; fails after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        runs = dag_runs(home, dag_id)
        if len(runs) >= count and all(state in FINISHED for _, state in runs):
            return runs
        assert all(p.poll() is None for p in started), "an Airflow process exited early"
        time.sleep(2)
    raise AssertionError(f"runs not finished after {deadline_s:.0f} s: {dag_runs(home, dag_id)}")

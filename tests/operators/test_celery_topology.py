"""docker/docker-compose.yaml's topology without containers: CeleryExecutor, PostgreSQL, Redis.

The machine's PostgreSQL holds two throwaway databases (Airflow's metadata and the zeus store,
as the compose file's one server does), the machine's Redis is the broker, and real
``airflow api-server``, ``scheduler``, ``dag-processor`` and ``celery worker`` processes run
two overlapping DAG runs of a replayed job (``tests/celery_dags``). Task processes are
supervised by the worker, so the metadata DB is closed to them (Airflow 3 blocks the ORM in
supervised task processes): the store must be
reached through the Connection ``zeus_default`` alone.

The worker listens on a queue of its own, so no other Celery user of that Redis takes our tasks.
No log server is started (``--skip-serve-logs``): nothing binds beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg
import pytest
import redis
from fixtures_airflow import TRACES
from paths import TESTS

from zeus_airflow.core.domain import TrialRecord
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.location import open_store, upgrade_store

DAGS = TESTS / "celery_dags"
sys.path.insert(0, str(DAGS))
from celery_barrier import BARRIER_ENV, DAG_ID, PARTIES_ENV  # noqa: E402

REDIS_URL = os.environ.get("ZEUS_TEST_REDIS", "redis://127.0.0.1:6379/11")
"""DB 11 of the machine's Redis: no other test uses it; keys are still scoped by queue name."""
BIN = Path(sys.executable).parent
RUNS = 2
STARTUP_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
API_TIMEOUT_S = 30.0
"""Generous: on 2 busy cores the api-server can take seconds to answer."""

T = TypeVar("T")

pytestmark = pytest.mark.timeout(300)


@dataclass
class Cluster:
    """The running processes of one Airflow deployment, and how to reach it."""

    env: dict[str, str]
    api_url: str
    queue: str
    store_url: str
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> None:
        log: IO[bytes] = (self.logs / f"{name}.log").open("wb")
        # A session of its own: stopping the group also stops the worker's forked children.
        self.processes[name] = subprocess.Popen(
            [str(BIN / "airflow"), *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def stop(self) -> None:
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(5)
            _signal_group(process, signal.SIGKILL)  # children left behind by a clean exit

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}\n{self.tails()}")

    def tails(self, lines: int = 25) -> str:
        """The end of every process's log, for failure messages."""
        return "\n".join(
            f"--- {log.name} ---\n"
            + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
            for log in sorted(self.logs.glob("*.log"))
        )

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"{self.api_url}/api/v2{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as response:
            return json.load(response)

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
        """Poll ``probe`` until it returns a value; fail with the logs once ``timeout_s`` is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            try:
                value = probe()
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                value = None  # not answering yet
            if value is not None:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.tails()}"
                )
            time.sleep(0.5)


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


@contextlib.contextmanager
def _throwaway_database(server: str) -> Iterator[str]:
    """A new database on the machine's server (a SQLAlchemy URL), dropped afterwards."""
    name = f"zeus_celery_{secrets.token_hex(6)}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _airflow_env(
    home: Path, metadata_url: str, store_url: str, port: int, queue: str, barrier: Path
) -> dict[str, str]:
    """The environment every process gets: compose's ``x-airflow-common`` for this machine."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ZEUS_", "PYTEST"))
    }
    api_url = f"http://127.0.0.1:{port}"
    return {
        **inherited,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api_url}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
        # Airflow would derive an asyncpg URL; psycopg 3 (a dev dependency) does async too.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": metadata_url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__CELERY__BROKER_URL": REDIS_URL,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + metadata_url,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(RUNS),
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": queue,
        "AIRFLOW_CONN_ZEUS_DEFAULT": store_url.replace("postgresql+psycopg://", "postgresql://"),
        "ZEUS_TRACES_DIR": str(TRACES),
        BARRIER_ENV: str(barrier),
        PARTIES_ENV: str(RUNS),
        "PYTHONDONTWRITEBYTECODE": "1",  # the DAG file lives in the repo
    }


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: str) -> Iterator[Cluster]:
    queue = f"zeus_ci_{secrets.token_hex(4)}"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (tmp_path / "logs").mkdir()
    port = _free_port()
    with (
        _throwaway_database(postgres_server) as metadata_url,
        _throwaway_database(postgres_server) as store_url,
    ):
        env = _airflow_env(tmp_path / "home", metadata_url, store_url, port, queue, barrier)
        cluster = Cluster(env, f"http://127.0.0.1:{port}", queue, store_url, tmp_path / "logs")
        # The compose file's init service: both schemas before any component starts.
        migrate = subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT_S,
        )
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        upgrade_store(store_url)
        try:
            cluster.start("api-server", "api-server")
            cluster.start("scheduler", "scheduler", "--skip-serve-logs")
            cluster.start("dag-processor", "dag-processor")
            cluster.start(
                "worker",
                "celery",
                "worker",
                "--skip-serve-logs",
                "--queues",
                queue,
                "--celery-hostname",
                f"{queue}@%h",
            )
            yield cluster
        finally:
            cluster.stop()
            _forget_queue(queue)


def _forget_queue(queue: str) -> None:
    """Delete the broker's keys for our queue (whatever a failed run left in it)."""
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"*{queue}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _dag_parsed(cluster: Cluster) -> bool | None:
    try:
        cluster.api("GET", f"/dags/{DAG_ID}")
    except urllib.error.HTTPError as err:
        if err.code == 404:  # the api-server is up; the dag-processor has not got there yet
            return None
        raise
    return True


def _finished_state(cluster: Cluster, run_id: str) -> str | None:
    state = cluster.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
    return str(state) if state in ("success", "failed") else None


def test_overlapping_dag_runs_on_a_celery_worker_share_the_postgres_store(cluster: Cluster) -> None:
    cluster.wait_for("the api-server and the DAG", lambda: _dag_parsed(cluster), STARTUP_TIMEOUT_S)
    run_ids = [
        cluster.api(
            "POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": f"2026-02-0{day}T00:00:00Z"}
        )["dag_run_id"]
        for day in range(1, RUNS + 1)
    ]

    states = {
        run_id: cluster.wait_for(
            f"DAG run {run_id}", functools.partial(_finished_state, cluster, run_id), RUN_TIMEOUT_S
        )
        for run_id in run_ids
    }
    assert states == dict.fromkeys(run_ids, "success"), cluster.tails()

    for run_id in run_ids:  # on the worker's queue, which only our worker serves
        ti = cluster.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train")
        assert (ti["queue"], ti["state"]) == (cluster.queue, "success")

    store = open_store(cluster.store_url)
    try:
        trials = list_trials(store)
    finally:
        store.engine.dispose()
    assert sorted(t.run_id for t in trials) == sorted(run_ids)
    assert all(
        t.status == "succeeded" and t.measurement == "replayed" and t.energy_j for t in trials
    ), trials
    assert len({t.job_id for t in trials}) == 1  # one job, learning from both runs
    _assert_overlap(trials)


def _assert_overlap(trials: list[TrialRecord]) -> None:
    """The trials were running at the same time (the barrier in the DAG makes sure of it)."""
    finished = [t.finished_at for t in trials]
    assert all(finished)
    assert max(t.started_at for t in trials) < min(f for f in finished if f)

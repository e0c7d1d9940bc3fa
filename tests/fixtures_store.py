"""Store fixtures (SQLite and PostgreSQL), and the store's test support.

``db_url`` is an empty database on each backend: a file under ``tmp_path``, or a schema of its
own in a throwaway PostgreSQL database ``zeus_test_<random>`` on the machine's server (started
when down), dropped afterwards. ``store_outage`` puts a switchable fault between a store and
its database.

Tests outside the store's own (``test_store_*.py``) read a store through ``Store``, its
``reader()`` or the CLI's reads (``stored_trials``, ``stored_leases``), never its tables; the
rows no Store method writes (fabricated histories, faults) are written here, the one place
besides the store's tests that knows the tables.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import TrialRecord
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.base import Lease, LeaseRequest
from zeus_airflow.core.store.location import upgrade_store
from zeus_airflow.core.store.retry import RetryPolicy
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import power_profiles, trials
from zeus_airflow.core.train.gpu_lease import this_host

PG_SERVER = os.environ.get("ZEUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
"""The PostgreSQL server the tests create their throwaway databases on."""
STORE_TRACES = resolve_traces_dir()
"""``$ZEUS_TRACES_DIR`` when set, else the traces shipped in the package."""
FAST_RETRY = RetryPolicy(attempts=3, first_delay_s=0.05, max_delay_s=0.1)
"""Retries short enough for tests that let them run out."""


# --- PostgreSQL -----------------------------------------------------------------------------
def _start_postgres() -> None:
    """Start the local cluster(s) the way the machine's docs say; quiet if already up."""
    for version in sorted(glob.glob("/etc/postgresql/*")):
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", Path(version).name, "main", "start"],
            check=False,
            capture_output=True,
        )


def _admin_connection() -> psycopg.Connection:
    return psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The server's URL (no database), started if it was down."""
    deadline = time.monotonic() + 60
    started = False
    while True:
        try:
            with _admin_connection():
                return PG_SERVER
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            if not started:
                _start_postgres()
                started = True
            time.sleep(0.5)


@pytest.fixture(scope="session")
def postgres_database(postgres_server: str) -> Iterator[str]:
    """A throwaway database ``zeus_test_<random>`` for the session, dropped afterwards."""
    name = f"zeus_test_{secrets.token_hex(6)}"
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{postgres_server.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    finally:
        with _admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def empty_database(backend: str, tmp_path: Path, postgres_url: str | None) -> Iterator[str]:
    """An empty database of its own. On PostgreSQL, a fresh schema of the session's database
    that the URL puts first on the search path (creating a database takes a second)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'zeus-{secrets.token_hex(4)}.db'}"
        return
    assert postgres_url is not None
    name = f"t_{secrets.token_hex(6)}"
    admin_url = postgres_url.replace("+psycopg", "")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield (
            make_url(postgres_url)
            .update_query_dict({"options": f"-csearch_path={name}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("SET lock_timeout = '5s'")
            try:
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')
            except psycopg.errors.LockNotAvailable:
                # A session the test left open holds a lock: end them all, then drop.
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                    "datname = current_database() AND pid != pg_backend_pid()"
                )
                admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def postgres_url(db_backend: str, request: pytest.FixtureRequest) -> str | None:
    """The session's PostgreSQL database when the test runs on PostgreSQL."""
    if db_backend != "postgresql":
        return None
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path, postgres_url: str | None) -> Iterator[str]:
    """An empty database, once on SQLite and once on PostgreSQL."""
    with empty_database(db_backend, tmp_path, postgres_url) as url:
        yield url


@pytest.fixture
def migrated_url(db_url: str) -> str:
    """A database with the store's schema, created by the migrations."""
    upgrade_store(db_url)
    return db_url


@pytest.fixture
def sql_store(migrated_url: str) -> Iterator[SQLStore]:
    store = SQLStore(migrated_url, retry=FAST_RETRY)
    yield store
    store.engine.dispose()


@contextlib.contextmanager
def opened(url: str) -> Iterator[SQLStore]:
    """The store at ``url``, its connections closed afterwards."""
    store = SQLStore(url)
    try:
        yield store
    finally:
        store.engine.dispose()


def stored_trials(url: str, job_id: str | None = None) -> list[TrialRecord]:
    """Every trial in the store at ``url`` (of ``job_id`` when given), in the order they began,
    as the CLI reads them (``store.admin.list_trials``: a run's carbon on its last try)."""
    with opened(url) as store:
        return list_trials(store, job_id)


def stored_leases(url: str, host: str | None = None) -> list[Lease]:
    """The GPU leases taken on ``host`` (this one when None), by GPU index."""
    with opened(url) as store:
        return store.leases_on_host(host or this_host())


def leave_lease(url: str, gpu_uuid: str, original_w: int, pid: int, **where: Any) -> None:
    """The lease a task (process ``pid``) took on a GPU and left behind: on this host and
    GPU index 0 unless ``where`` says (``host``, ``gpu_index``)."""
    request = LeaseRequest(
        where.get("host") or this_host(), gpu_uuid, where.get("gpu_index", 0), original_w, pid
    )
    with opened(url) as store:
        assert store.acquire_leases([request]) is not None, f"{gpu_uuid} is leased already"


def run_carbon(url: str, run_id: str) -> TrialRecord:
    """The last try of run ``run_id`` (of any try number with carbon figures), which carries
    the run's carbon figures: the store keeps them once per run (``Store.record_carbon``)."""
    (last,) = [t for t in stored_trials(url) if t.run_id == run_id and t.carbon_zone is not None]
    return last


# --- workloads ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cifar_trace() -> WorkloadTrace:
    return load_workload_trace(STORE_TRACES, "v100", "cifar100")


def job_config(trace: WorkloadTrace, job_id: str = "store.job", **changes: object) -> JobConfig:
    """The store's tests follow the paper's walk: no exploration budget unless asked."""
    changes.setdefault("exploration_budget", None)
    workload = trace.workload
    return JobConfig(
        job_id,
        trace.batch_sizes,
        trace.default_batch_size,  # type: ignore[arg-type]
        workload.target_metric,
        workload.max_epochs,
        workload.higher_is_better,
        **changes,
    )


# --- rows no Store method writes: fabricated histories --------------------------------------
def insert_trial(store: SQLStore, job_pk: int, **columns: Any) -> None:
    """A trial row as given, as the job's next decision: a history at fixed times and of any
    status, which the reports' tests fabricate (Store.begin_trial stamps the database's
    clock and starts every trial running)."""
    with store.transaction() as conn:
        last = conn.execute(
            select(func.max(trials.c.decision_seq)).where(trials.c.job_pk == job_pk)
        ).scalar()
        conn.execute(trials.insert().values(job_pk=job_pk, decision_seq=(last or 0) + 1, **columns))


def insert_profile_point(store: SQLStore, job_pk: int, **columns: Any) -> None:
    """A measured power-profile row as given (``tables.power_profiles``' columns)."""
    with store.transaction() as conn:
        conn.execute(power_profiles.insert().values(job_pk=job_pk, **columns))


# --- faults ---------------------------------------------------------------------------------
def lose_every_trial(url: str) -> None:
    """The store loses its trials (a restored backup, a hand's DELETE): a fault no Store
    method makes, so it is written here, with the store's tests."""
    with opened(url) as store, store.transaction() as conn:
        conn.execute(trials.delete())


def overwrite_trials(store: SQLStore, task_id: str | None, **figures: Any) -> None:
    """Overwrite the figures of every trial (of task ``task_id`` when given): what reached
    stores before their checks (a NaN, an infinity, a missing figure), or what a setup the
    test cannot run would have written (a limit set through zeusd). No Store method does."""
    chosen = (
        trials.update() if task_id is None else trials.update().where(trials.c.task_id == task_id)
    )
    with store.transaction() as conn:
        conn.execute(chosen.values(**figures))


def set_trial_energies(store: SQLStore, dag_id: str, energies_j: Sequence[float]) -> None:
    """Give the trials of DAG ``dag_id``, in the order they were begun, these energies (J):
    figures a test needs to the last bit (float noise around Default's), which no run makes."""
    with store.transaction() as conn:
        ids = conn.execute(select(trials.c.id).where(trials.c.dag_id == dag_id).order_by("id"))
        for trial_id, energy_j in zip(ids.scalars().all(), energies_j, strict=True):
            conn.execute(trials.update().where(trials.c.id == trial_id).values(energy_j=energy_j))


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a server; ``cut()`` drops every connection and answers
    new ones by closing them at once (the server looks gone), ``restore()`` heals."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._up = True
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            if not self._up:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._up = False
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        self._up = True

    def close(self) -> None:
        self.cut()
        self._listener.close()


class SQLiteWriteLock:
    """Another process's view of a SQLite store: ``cut()`` holds the write lock (as a long
    transaction or a backup would), so the store's writes time out; ``restore()`` lets go."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def cut(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def restore(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()


def unreachable_url(backend: str, tmp_path: Path) -> str:
    """A store URL whose database cannot be reached (PostgreSQL: with a password)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'no-such-dir' / 'zeus.db'}"
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://zeus:s3cret@127.0.0.1:{port}/zeus"


class StoreOutage:
    """A store URL and a switch that makes its database unavailable (``cut``) and back."""

    def __init__(self, url: str, fault: TcpProxy | SQLiteWriteLock) -> None:
        self.url = url
        self._fault = fault

    def cut(self) -> None:
        self._fault.cut()

    def restore(self) -> None:
        self._fault.restore()


@pytest.fixture
def store_outage(migrated_url: str) -> Iterator[StoreOutage]:
    """The migrated database behind a fault: a TCP proxy on PostgreSQL, a competing write
    lock on SQLite. Stores opened on ``outage.url`` should use a short ``timeout_s``."""
    url = make_url(migrated_url)
    fault: TcpProxy | SQLiteWriteLock
    if url.get_backend_name() == "sqlite":
        assert url.database
        fault = SQLiteWriteLock(url.database)
        outage = StoreOutage(migrated_url, fault)
    else:
        fault = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
        outage = StoreOutage(
            url.set(host="127.0.0.1", port=fault.port).render_as_string(hide_password=False), fault
        )
    yield outage
    fault.close()


def replay_never_reaching(gpu: Any) -> Any:
    """A train function on a replay GPU whose metric never reaches a target above 0.5: every
    try runs to max_epochs (or to the early-stop bound)."""
    from zeus_airflow.core.train.run import TrainingRun

    def never(run: TrainingRun) -> None:
        gpu.use_batch_size(run.batch_size)
        for _ in run.epochs():
            run.run_steps(gpu.steps_per_epoch(), gpu.advance_steps)
            run.report_metric(0.5)

    return never


def replay_missing_at(gpu: Any, batch_size: int, seed: int) -> Any:
    """A train function on a replay GPU that replays the traces, except that ``batch_size``
    never reaches the target (its tries run to max_epochs or the early-stop bound)."""
    from zeus_airflow.core.train.replay_training import ReplayTraining
    from zeus_airflow.core.train.run import TrainingRun

    replay = ReplayTraining(gpu, seed=seed)

    def train(run: TrainingRun) -> object:
        if run.batch_size == batch_size:
            for _ in run.epochs():
                run.run_steps(gpu.steps_per_epoch(), gpu.advance_steps)
                run.report_metric(0.0)
            return None
        return replay(run)

    return train

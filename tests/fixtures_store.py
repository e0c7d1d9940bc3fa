"""Store fixtures (SQLite and PostgreSQL).

``db_url`` is an empty database on each backend: a file under ``tmp_path``, or a throwaway
PostgreSQL database ``zeus_test_<random>`` on the machine's server (started when down),
dropped afterwards. ``store_outage`` puts a switchable fault between a store and its database.
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
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from zeus_airflow.core.config import JobConfig
from zeus_airflow.core.store.location import upgrade_store
from zeus_airflow.core.store.retry import RetryPolicy
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.traces import WorkloadTrace, load_workload_trace

PG_SERVER = os.environ.get("ZEUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
"""The PostgreSQL server the tests create their throwaway databases on."""
STORE_TRACES = Path(os.environ.get("ZEUS_TRACES_DIR")
                    or Path(__file__).resolve().parents[2] / "shared" / "traces")
FAST_RETRY = RetryPolicy(attempts=3, first_delay_s=0.05, max_delay_s=0.1)
"""Retries short enough for tests that let them run out."""


# --- PostgreSQL -----------------------------------------------------------------------------
def _start_postgres() -> None:
    """Start the local cluster(s) the way the machine's docs say; quiet if already up."""
    for version in sorted(glob.glob("/etc/postgresql/*")):
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", Path(version).name,
                        "main", "start"], check=False, capture_output=True)


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


@contextlib.contextmanager
def throwaway_postgres_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server``; dropped (connections and all) afterwards."""
    name = f"zeus_test_{secrets.token_hex(6)}"
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{server.split('://', 1)[1]}/{name}"
    finally:
        with _admin_connection() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def empty_database(backend: str, tmp_path: Path, server: str | None) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'zeus-{secrets.token_hex(4)}.db'}"
    else:
        assert server is not None
        with throwaway_postgres_database(server) as url:
            yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty database, once on SQLite and once on PostgreSQL."""
    server = request.getfixturevalue("postgres_server") if db_backend == "postgresql" else None
    with empty_database(db_backend, tmp_path, server) as url:
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


# --- workloads ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cifar_trace() -> WorkloadTrace:
    return load_workload_trace(STORE_TRACES, "v100", "cifar100")


def job_config(trace: WorkloadTrace, job_id: str = "store.job", **changes: object) -> JobConfig:
    workload = trace.workload
    return JobConfig(job_id, trace.batch_sizes, trace.default_batch_size,  # type: ignore[arg-type]
                     workload.target_metric, workload.max_epochs, workload.higher_is_better,
                     **changes)


# --- faults ---------------------------------------------------------------------------------
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


class StoreOutage:
    """A store URL and a switch that makes its database unavailable (``cut``) and back."""

    def __init__(self, url: str, fault: TcpProxy | SQLiteWriteLock) -> None:
        self.url = url
        self._fault = fault

    def cut(self) -> None:
        self._fault.cut()

    def restore(self) -> None:
        self._fault.restore()

    def restore_after(self, delay_s: float) -> threading.Timer:
        timer = threading.Timer(delay_s, self.restore)
        timer.start()
        return timer


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
        outage = StoreOutage(url.set(host="127.0.0.1", port=fault.port)
                             .render_as_string(hide_password=False), fault)
    yield outage
    fault.close()

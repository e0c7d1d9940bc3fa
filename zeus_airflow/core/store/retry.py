"""Bounded retries of store transactions when the database is briefly unavailable.

A transaction is retried only after errors that say the connection (or, on SQLite, the write
lock) was unavailable: the transaction was rolled back, so running it again is safe. Any other
database error is a bug or a schema problem and surfaces at once, and so does a server that
refuses the connection for good (authentication, a missing role or database): waiting would
not change its answer.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from zeus_airflow.core.common.full_disk import full_disk

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how patiently, a store operation is tried."""

    attempts: int = 5
    """Tries in all, the first one included."""
    first_delay_s: float = 0.5
    backoff: float = 2.0
    """Each wait is this many times the previous one..."""
    max_delay_s: float = 8.0
    """...but never longer than this."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts={self.attempts} is invalid: expected an integer >= 1")
        if self.first_delay_s < 0 or self.backoff < 1 or self.max_delay_s < 0:
            raise ValueError("first_delay_s and max_delay_s must be >= 0 and backoff >= 1")

    def delays_s(self) -> Iterator[float]:
        """The waits between consecutive tries (``attempts - 1`` of them)."""
        delay = self.first_delay_s
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay_s)
            delay *= self.backoff


_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o")
"""SQLite reports a missing table as an OperationalError too: only these messages are waits."""


_PG_REFUSALS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), fix)
    for pattern, fix in (
        (
            r'role ".*" does not exist',
            "create that role on the server, or fix the user name in the store's URL or connection",
        ),
        (
            r'database ".*" does not exist',
            "create that database (createdb <name>), or fix the database name in the store's URL "
            "or connection",
        ),
        (
            r"authentication failed|no password supplied",
            "fix the user name or password in the store's URL or connection",
        ),
        (
            r"no pg_hba\.conf entry",
            "allow this host, user and database in the server's pg_hba.conf",
        ),
        (r"is not permitted to log in", "grant that role LOGIN, or connect as another user"),
        (r"permission denied for database", "grant CONNECT on that database to the user"),
    )
)
"""What PostgreSQL says when it refuses a connection for good, and how to fix each. libpq
gives no SQLSTATE for errors while connecting, so the server's message is all there is."""


def refusal(err: BaseException) -> tuple[str, str] | None:
    """(the server's reason, the fix) when PostgreSQL refused the connection for good."""
    if not isinstance(err, DBAPIError) or not isinstance(err, OperationalError | InterfaceError):
        return None
    if not type(err.orig).__module__.startswith("psycopg"):
        return None
    message = str(err.orig).strip()
    # 'connection failed: connection to server at "h", port 5432 failed: FATAL:  <reason>'
    reason = re.split(r"FATAL:\s*", message)[-1].strip().splitlines()[0] if message else ""
    for pattern, fix in _PG_REFUSALS:
        if pattern.search(message):
            return reason, fix
    return None


def is_transient(err: BaseException) -> bool:
    """Whether the database was unreachable or busy, rather than the statement wrong."""
    if not isinstance(err, DBAPIError) or refusal(err) is not None:
        return False
    if err.connection_invalidated:
        return True
    if not isinstance(err, OperationalError | InterfaceError):
        return False
    if type(err.orig).__module__.startswith("sqlite3"):
        return any(word in str(err.orig).lower() for word in _SQLITE_TRANSIENT)
    return True


Diagnose = Callable[[DBAPIError], "str | None"]
"""What makes a database error permanent although it reads as transient (a SQLite file on a
read-only or full disk says "disk I/O error", as a busy disk would): the fix, or None."""


def sqlite_fault(url: URL) -> Diagnose | None:
    """The diagnosis of errors of a SQLite store's file: whether its folder or files are
    read-only (permissions, ``chattr +i``, a read-only mount) or its disk is full. Asked only
    after SQLite failed, so a healthy store costs nothing. None for any other store."""
    database = url.database
    if url.get_backend_name() != "sqlite" or database in (None, "", ":memory:"):
        return None

    def diagnose(err: DBAPIError) -> str | None:
        if not type(err.orig).__module__.startswith("sqlite3"):
            return None
        path = Path(database)
        for part in (path.parent, path, *(path.with_name(path.name + s) for s in _SIDE_FILES)):
            if part.exists() and not os.access(part, os.W_OK):
                return (
                    f"{str(part)!r} is read-only (its permissions, chattr +i or a read-only "
                    "mount): make it writable for the worker's user, or move the store"
                )
        try:
            free = shutil.disk_usage(path.parent).free
        except OSError:
            return None
        if free < FULL_BELOW_BYTES:
            return (
                f"the disk holding {str(path.parent)!r} is full ({free} bytes free): free "
                "some space, or move the store"
            )
        return None

    return diagnose


_SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite writes beside a database (WAL mode's log and index, a rollback journal)."""
FULL_BELOW_BYTES = 64 * 1024
"""A disk with less free space than this is full to SQLite: a transaction's journal pages
and a checkpoint need some room."""


def with_retries(
    policy: RetryPolicy, what: str, work: Callable[[], T], diagnose: Diagnose | None = None
) -> T:
    """Run ``work``; after a transient error wait and run it again, at most
    ``policy.attempts`` times in all. The last error propagates, and so does at once one that
    ``diagnose`` finds permanent."""
    delays = policy.delays_s()
    while True:
        try:
            return work()
        except DBAPIError as err:
            permanent = full_disk(err) is not None or (diagnose and diagnose(err))
            transient = is_transient(err) and not permanent
            delay = next(delays, None) if transient else None
            if delay is None:
                raise
            log.warning(
                "%s: the store is unavailable (%s); retrying in %.1f s",
                what,
                _first_line(err),
                delay,
            )
            time.sleep(delay)


def _first_line(err: DBAPIError) -> str:
    return (str(err.orig).strip().splitlines() or [type(err).__name__])[0]

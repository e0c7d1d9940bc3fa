"""Bounded retries of store transactions when the database is briefly unavailable.

A transaction is retried only after errors that say the connection (or, on SQLite, the write
lock) was unavailable: the transaction was rolled back, so running it again is safe. Any other
database error is a bug or a schema problem and surfaces at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

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


def is_transient(err: BaseException) -> bool:
    """Whether the database was unreachable or busy, rather than the statement wrong."""
    if not isinstance(err, DBAPIError):
        return False
    if err.connection_invalidated:
        return True
    if not isinstance(err, OperationalError | InterfaceError):
        return False
    if type(err.orig).__module__.startswith("sqlite3"):
        return any(word in str(err.orig).lower() for word in _SQLITE_TRANSIENT)
    return True


def with_retries(policy: RetryPolicy, what: str, work: Callable[[], T]) -> T:
    """Run ``work``; after a transient error wait and run it again, at most
    ``policy.attempts`` times in all. The last error propagates."""
    delays = policy.delays_s()
    while True:
        try:
            return work()
        except DBAPIError as err:
            delay = next(delays, None) if is_transient(err) else None
            if delay is None:
                raise
            log.warning("%s: the store is unavailable (%s); retrying in %.1f s", what,
                        _first_line(err), delay)
            time.sleep(delay)


def _first_line(err: DBAPIError) -> str:
    return (str(err.orig).strip().splitlines() or [type(err).__name__])[0]

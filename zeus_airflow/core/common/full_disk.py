"""A full disk, named wherever it stops a write (issue 48).

A full disk reaches Zeus in many words: ``OSError`` ENOSPC ("No space left on device"),
SQLite's "database or disk is full", PostgreSQL's DiskFull ("could not extend file"), or an
Airflow API server's error response whose detail carries one of them. Each write Zeus makes
(the store's, the outbox's XCom) asks :func:`full_disk` of its error and, when it finds one,
says "disk is full" first, never only "Server returned error".
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

MARKERS = (
    "database or disk is full",  # SQLite's SQLITE_FULL
    "no space left on device",  # ENOSPC, as the OS and PostgreSQL word it
    "could not extend file",  # PostgreSQL, out of room for a table
    "diskfull",  # psycopg.errors.DiskFull, SQLSTATE 53100's class name
    "disk full",
    "enospc",
)
"""Lower-case words by which a message says that a disk is full."""


def full_disk(err: BaseException) -> str | None:
    """The words that say ``err`` (or an error it chains, or the detail of a server's
    response it carries) comes from a full disk; None when nothing does."""
    for found in _chain(err):
        if isinstance(found, OSError) and found.errno == errno.ENOSPC:
            return str(found) or "No space left on device"
        for text in _texts(found):
            lowered = text.lower()
            if any(marker in lowered for marker in MARKERS):
                return text.strip().splitlines()[0][:300]
    return None


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err``, its causes and contexts, and the driver's error it wraps (``orig``)."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        found = todo.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        yield found
        todo += [
            e
            for e in (found.__cause__, found.__context__, getattr(found, "orig", None))
            if isinstance(e, BaseException)
        ]


def _texts(err: BaseException) -> Iterator[str]:
    """What ``err`` says: its message, its class's name, and a server response's detail."""
    yield str(err)
    yield type(err).__name__
    detail = getattr(err, "detail", None)
    if detail is not None:
        yield str(detail)
    response = getattr(err, "response", None)
    text = getattr(response, "text", None)
    if isinstance(text, str):
        yield text

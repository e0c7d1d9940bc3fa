"""The Sentiment140 CSV format, read into columns and written back.

The real file (``training.1600000.processed.noemoticon.csv``) has no header and six quoted
columns: sentiment (0 negative, 4 positive), id, date (``Mon Apr 06 22:19:45 PDT 2009``),
query, user, text; it is Latin-1 encoded. A file with a header row naming those columns (in
any order) is read too. Every problem is reported with its line and the column concerned.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np

from zeus_airflow.core.common.config import ConfigError

COLUMNS: tuple[str, ...] = ("sentiment", "id", "date", "query", "user", "text")
HEADER_ALIASES: dict[str, str] = {
    "target": "sentiment",
    "polarity": "sentiment",
    "ids": "id",
    "flag": "query",
}
"""Other names the columns go by in published copies of the file."""
SENTIMENTS: dict[str, int] = {"0": 0, "4": 1}
"""Sentiment field to class label: 0 -> negative (0), 4 -> positive (1)."""
ENCODING = "latin-1"
TIMEZONES_H: dict[str, int] = {"PDT": -7, "PST": -8, "UTC": 0, "GMT": 0}
"""UTC offsets (h) of the zone abbreviations the date field may carry."""
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}


class CorpusError(ConfigError):
    """The corpus cannot be used; the message names the line, column and value."""


@dataclass(frozen=True)
class Tweets:
    """A corpus in columns, in file order or sorted by time (:meth:`sorted_by_time`)."""

    label: np.ndarray
    """Class per tweet: 0 negative, 1 positive (int8)."""
    time_s: np.ndarray
    """Posting time, s since the Unix epoch, UTC (int64)."""
    day: np.ndarray
    """Calendar day in the tweet's own time zone, as ``datetime64[D]``."""
    ids: list[str]
    dates: list[str]
    """The date fields as written (kept so slices are written back unchanged)."""
    queries: list[str]
    users: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, index: np.ndarray) -> Tweets:
        """The tweets at ``index``, in that order."""
        picked = index.tolist()
        return Tweets(
            self.label[index],
            self.time_s[index],
            self.day[index],
            [self.ids[i] for i in picked],
            [self.dates[i] for i in picked],
            [self.queries[i] for i in picked],
            [self.users[i] for i in picked],
            [self.texts[i] for i in picked],
        )

    def sorted_by_time(self) -> Tweets:
        """Oldest first; tweets posted in the same second keep their file order."""
        return self.take(np.argsort(self.time_s, kind="stable"))


def read_tweets(path: str | Path) -> Tweets:
    """Read a Sentiment140-format CSV; raises CorpusError naming the first problem."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus={str(path)!r} is invalid: no such file")
    labels: list[int] = []
    times: list[int] = []
    days: list[int] = []
    fields: list[list[str]] = [[], [], [], [], []]
    with open(path, newline="", encoding=ENCODING) as f:
        for line, row in _rows(path, f):
            labels.append(_sentiment(path, line, row[0]))
            time_s, day = parse_date(row[2], where=f"{path}:{line}")
            times.append(time_s)
            days.append(day)
            for column, value in zip(fields, (row[1], row[2], row[3], row[4], row[5]), strict=True):
                column.append(value)
    return Tweets(
        np.array(labels, dtype=np.int8),
        np.array(times, dtype=np.int64),
        np.array(days, dtype="datetime64[D]"),
        *fields,
    )


def write_tweets(path: str | Path, tweets: Tweets) -> None:
    """Write in the original format: no header, every field quoted, Latin-1."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sentiment = {label: field for field, label in SENTIMENTS.items()}
    with open(path, "w", newline="", encoding=ENCODING) as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        for i in range(len(tweets)):
            writer.writerow(
                (
                    sentiment[int(tweets.label[i])],
                    tweets.ids[i],
                    tweets.dates[i],
                    tweets.queries[i],
                    tweets.users[i],
                    tweets.texts[i],
                )
            )


def format_date(local: datetime, zone: str = "PDT") -> str:
    """A local time as Sentiment140 writes it, e.g. ``Mon Apr 06 22:19:45 PDT 2009``."""
    return f"{local.strftime('%a %b %d %H:%M:%S')} {zone} {local.year}"


def parse_date(text: str, where: str = "date") -> tuple[int, int]:
    """``Mon Apr 06 22:19:45 PDT 2009`` -> (UTC seconds since the epoch, local day number
    since 1970-01-01). Hand-parsed: strptime cannot read zone abbreviations, and is slow."""
    parts = text.split()
    try:
        _, month, day, clock, zone, year = parts
        hour, minute, second = (int(x) for x in clock.split(":"))
        local = datetime(int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=UTC)
        offset_s = TIMEZONES_H[zone] * 3600
    except (ValueError, KeyError) as err:
        raise CorpusError(
            f"{where}: date={text!r} is unparsable: expected e.g. 'Mon Apr 06 22:19:45 PDT "
            f"2009' with a zone in {', '.join(TIMEZONES_H)}"
        ) from err
    local_s = int(local.timestamp())
    return local_s - offset_s, local_s // 86400


def day_of(value: np.datetime64) -> date:
    """A ``datetime64[D]`` as a ``date``."""
    return date.fromordinal(date(1970, 1, 1).toordinal() + int(value.astype(np.int64)))


def _rows(path: Path, f: Iterator[str]) -> Iterator[tuple[int, Sequence[str]]]:
    """(line number, the six fields in COLUMNS order) for each data row."""
    reader = csv.reader(f)
    order: list[int] | None = None
    for row in reader:
        line = reader.line_num
        if order is None and line == 1 and _looks_like_header(row):
            order = _header_order(path, row)
            continue
        if order is not None:
            if len(row) < max(order) + 1:
                raise CorpusError(
                    f"{path}:{line}: {len(row)} columns; the header names {max(order) + 1}"
                )
            yield line, [row[i] for i in order]
        elif len(row) != len(COLUMNS):
            raise CorpusError(
                f"{path}:{line}: {len(row)} columns; expected {len(COLUMNS)}: "
                f"{', '.join(COLUMNS)} (missing columns?)"
            )
        else:
            yield line, row


def _looks_like_header(row: Sequence[str]) -> bool:
    return bool(row) and not row[0].strip().isdigit()


def _header_order(path: Path, row: Sequence[str]) -> list[int]:
    names = [HEADER_ALIASES.get(n.strip().lower(), n.strip().lower()) for n in row]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise CorpusError(
            f"{path}:1: missing column(s) {', '.join(missing)}; the header has "
            f"{', '.join(row)}; expected {', '.join(COLUMNS)}"
        )
    return [names.index(c) for c in COLUMNS]


def _sentiment(path: Path, line: int, value: str) -> int:
    try:
        return SENTIMENTS[value.strip()]
    except KeyError:
        raise CorpusError(
            f"{path}:{line}: sentiment={value!r} is invalid: expected 0 (negative) or 4 (positive)"
        ) from None

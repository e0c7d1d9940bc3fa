"""An intensity trace from a CSV file: ours, or an Electricity Maps data-portal export.

Our format (one row per interval, any resolution; header names are case-insensitive)::

    datetime,zone,carbon_intensity_g_per_kwh,price_per_mwh
    2026-01-01T00:00:00Z,DE,412.0,95.3

``zone`` and ``price_per_mwh`` are optional (without a zone column the trace applies to any
zone). An Electricity Maps export (``Datetime (UTC)``, ``Zone id``, ``Carbon intensity
gCO₂eq/kWh (Life cycle)`` or ``(direct)``...) is read as it is: the life-cycle column when
present. Each row lasts until the next row of its zone; the last one as long as the one
before it (an hour for a single row). Times without a zone are UTC.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from zeus_airflow.core.carbon.signal import GridPoint, SourceError
from zeus_airflow.core.common.config import grid_value_problem

ANY_ZONE = "*"
_TIME_COLUMNS = ("datetime", "datetime (utc)", "time", "timestamp")
_ZONE_COLUMNS = ("zone", "zone id", "zone_id", "zone key")
_INTENSITY_COLUMNS = ("carbon_intensity_g_per_kwh", "carbon_intensity", "intensity")
_PRICE_COLUMNS = ("price_per_mwh", "price")


def parse_time(text: str) -> datetime:
    """ISO 8601 (``Z`` allowed, space or ``T``); naive times are UTC."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    lowered = [h.strip().lower() for h in header]
    return next((lowered.index(n) for n in names if n in lowered), None)


def _intensity_column(header: list[str]) -> int | None:
    """Ours, else an export's carbon-intensity column (life cycle preferred over direct)."""
    found = _column(header, _INTENSITY_COLUMNS)
    if found is not None:
        return found
    candidates = [
        i for i, h in enumerate(header) if h.strip().lower().startswith("carbon intensity")
    ]
    life_cycle = [i for i in candidates if "life" in header[i].lower()]
    chosen = life_cycle or candidates
    return chosen[0] if chosen else None


@dataclass(frozen=True)
class CsvTrace:
    """A trace loaded in memory, per zone, sorted by time."""

    path: str
    zones: dict[str, tuple[GridPoint, ...]] = field(repr=False)

    @classmethod
    def load(cls, path: str | Path) -> CsvTrace:
        """The trace, every row checked: a value that is not a finite number in the plausible
        range (``config.grid_value_problem``) is refused with its file and line."""
        rows = _rows(path)
        if not rows:
            raise SourceError(f"the intensity trace {path} is empty")
        header, body = rows[0], [r for r in rows[1:] if any(c.strip() for c in r)]
        time_at, zone_at = _column(header, _TIME_COLUMNS), _column(header, _ZONE_COLUMNS)
        value_at, price_at = _intensity_column(header), _column(header, _PRICE_COLUMNS)
        if time_at is None or value_at is None:
            raise SourceError(
                f"the intensity trace {path} needs a datetime column and a "
                "carbon_intensity_g_per_kwh column (or an Electricity Maps "
                f"export's); its header is {header}"
            )
        starts: dict[str, list[tuple[datetime, float, float | None]]] = {}
        for line, row in enumerate(body, start=2):
            try:
                zone = row[zone_at].strip() if zone_at is not None else ANY_ZONE
                price = row[price_at].strip() if price_at is not None else ""
                values = (float(row[value_at]), float(price) if price else None)
                starts.setdefault(zone, []).append((parse_time(row[time_at]), *values))
            except (ValueError, IndexError) as err:
                raise SourceError(f"{path}, line {line}: {err}") from None
            problem = grid_value_problem(*values)
            if problem is not None:
                raise SourceError(f"{path}, line {line}: {problem}")
        return cls(str(path), {z: tuple(_intervals(r, str(path))) for z, r in starts.items()})

    def points(self, zone: str, start: datetime, end: datetime) -> list[GridPoint]:
        series = self.zones.get(zone, self.zones.get(ANY_ZONE))
        if series is None:
            raise SourceError(
                f"the intensity trace {self.path} has no zone {zone!r} (it has "
                f"{', '.join(sorted(self.zones))})"
            )
        return [p for p in series if p.overlap_s(start, end) > 0]


def _rows(path: str | Path) -> list[list[str]]:
    """The file's rows; bytes that are not UTF-8 text (or a NUL) are refused with their line."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise SourceError(f"cannot read the intensity trace {path}: {err}") from err
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise SourceError(
            f"{path}, line {line}: not UTF-8 text (byte {raw[err.start]:#04x}); expected a CSV file"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return list(reader)
    except csv.Error as err:  # e.g. a NUL byte
        raise SourceError(f"{path}, line {reader.line_num}: {err}") from None


def _intervals(rows: list[tuple[datetime, float, float | None]], path: str) -> Iterable[GridPoint]:
    rows.sort(key=lambda r: r[0])
    for i, (start, value, price) in enumerate(rows):
        if i + 1 < len(rows):
            end = rows[i + 1][0]
        else:
            end = start + (start - rows[i - 1][0] if i else timedelta(hours=1))
        if end <= start:
            raise SourceError(f"{path}: two rows for {start.isoformat()}")
        yield GridPoint(start, end, value, "file", price)

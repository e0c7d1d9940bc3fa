"""The grid signal: carbon intensity (and optionally price) per interval, with where each
figure comes from.

Units: intensity in gCO2e/kWh, price in currency units per MWh (the currency is the
source's; the store and the UI keep it as given), times in UTC. A source answers for a zone
and a time span with :class:`GridPoint` intervals; every figure carries a provenance:

- ``live``: a published measurement or estimate of that interval (Electricity Maps history
  or latest);
- ``forecast``: a forecast of that interval;
- ``file``: read from a trace file (CSV) the user supplied;
- ``fixed``: a constant the user configured;
- ``fallback``: the configured fallback value, used because the source failed (the reason is
  kept with the figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, Protocol

Provenance = Literal["live", "forecast", "file", "fixed", "fallback"]
PROVENANCES: tuple[str, ...] = ("live", "forecast", "file", "fixed", "fallback")
"""From most to least direct: a figure that mixes several takes the last one it used."""


class SourceError(RuntimeError):
    """A source cannot answer (network, authentication, rate limit, malformed data)."""


@dataclass(frozen=True)
class GridPoint:
    """The grid over ``[start, end)``."""

    start: datetime
    end: datetime
    intensity_g_per_kwh: float
    provenance: Provenance
    price_per_mwh: float | None = None
    note: str = ""
    """Why a figure is a fallback (the source's error), else empty."""

    def overlap_s(self, start: datetime, end: datetime) -> float:
        """Seconds of ``[start, end)`` inside this interval."""
        return max(0.0, (min(self.end, end) - max(self.start, start)).total_seconds())

    def covers(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


class GridSource(Protocol):
    """Anything that knows the grid of a zone: past (for a run's emissions) and future (for
    choosing when to start). ``points`` raises :class:`SourceError` when it cannot answer;
    it may answer for part of the span only (a forecast ends somewhere)."""

    def points(self, zone: str, start: datetime, end: datetime) -> list[GridPoint]: ...


def worst_provenance(provenances: Sequence[str]) -> Provenance | None:
    """The least direct of several provenances (``fallback`` beats ``forecast``...)."""
    ranked = [p for p in PROVENANCES if p in provenances]
    return ranked[-1] if ranked else None  # type: ignore[return-value]


def covered_s(points: Sequence[GridPoint], start: datetime, end: datetime) -> float:
    """Seconds of ``[start, end)`` the points cover (they do not overlap each other)."""
    return sum(p.overlap_s(start, end) for p in points)


def weighted_mean(values: Sequence[tuple[float, float]]) -> float:
    """Mean of (value, weight) pairs, weights positive; a value all of them share, exactly (a
    fixed 250 g/kWh over a span of odd length must read 250, not 249.99999999999997): the
    accounting's and the planner's means alike."""
    distinct = {value for value, _ in values}
    if len(distinct) == 1:
        return distinct.pop()
    return sum(value * weight for value, weight in values) / sum(w for _, w in values)


def clip(points: Sequence[GridPoint], start: datetime, end: datetime) -> list[GridPoint]:
    """The points that overlap ``[start, end)``, sorted, later sources never overlapping
    earlier ones (the first answer for an instant wins)."""
    chosen: list[GridPoint] = []
    for p in sorted(points, key=lambda q: q.start):
        if p.overlap_s(start, end) <= 0:
            continue
        if chosen and p.start < chosen[-1].end:
            if p.end <= chosen[-1].end:
                continue
            p = replace(p, start=chosen[-1].end)
        chosen.append(p)
    return chosen


def hourly(start: datetime) -> tuple[datetime, datetime]:
    """The hour holding ``start``: EM's and most exports' resolution."""
    begin = start.replace(minute=0, second=0, microsecond=0)
    return begin, begin + timedelta(hours=1)

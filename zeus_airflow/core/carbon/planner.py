"""When to start: the start before the deadline that minimises a run's expected emissions,
energy cost or a weighted mix of the two, given how long (and how much energy) it is
expected to take.

A run is expected to draw its energy evenly over ``expected.time_s``. Its expected emissions
when started at ``t`` are ``energy_kwh x mean intensity over [t, t + time_s)``; that mean is
piecewise linear in ``t`` between the instants where the window's start or end crosses an
interval boundary, so those instants (and now, and the latest start) are the only candidates
the search needs. Only windows the forecast covers entirely are candidates besides now. The
plan starts now, saying why, when there is no forecast, when the deadline leaves no room, or
when waiting would save less than ``min_saving`` of the objective.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from zeus_airflow.core.carbon.csvtrace import parse_time
from zeus_airflow.core.carbon.signal import (
    GridPoint,
    covered_s,
    weighted_mean,
    worst_provenance,
)
from zeus_airflow.core.common.units import J_PER_KWH, show_time

Objective = Literal["emissions", "cost", "mix"]
MIN_SAVING = 0.02
"""Wait only for at least 2 % less of the objective: forecasts are not that precise."""
MIN_DELAY = timedelta(seconds=5)
"""A shorter wait starts now (deferring costs a trip through the triggerer)."""
MIN_EXPECTED_S = 1.0
"""A shorter expected run is no expectation of how long a run takes (a past run recorded at
0 s): the plan then weighs the intensity at the start alone, and says so."""
ROUNDING = 1e-9
"""A smaller relative saving is no saving: equal intensities averaged over differently cut
spans (a live point beside the forecast's hours) differ in the last bits of a float."""


@dataclass(frozen=True)
class ExpectedRun:
    """What the next run is expected to take: seconds, joules (None when unknown), and
    where the expectation comes from, in words."""

    time_s: float
    energy_j: float | None
    basis: str

    @property
    def instant(self) -> bool:
        """Too short to be a span (under :data:`MIN_EXPECTED_S`): the plan weighs the
        intensity at the start alone."""
        return self.time_s < MIN_EXPECTED_S

    def describe(self) -> str:
        """E.g. ``expected run: 1200 s, mean of the job's last 3 run(s) at b=64``; never a
        0 s expectation: ``no expected run yet, ...: planning on the intensity alone``."""
        if self.instant:
            return f"no expected run yet ({self.basis}): planning on the intensity alone"
        return f"expected run: {self.time_s:.0f} s, {self.basis}"


@dataclass(frozen=True)
class StartPlan:
    """The chosen start and what it is expected to save against starting now."""

    planned_at: datetime
    start_at: datetime
    reason: str
    deadline: datetime | None = None
    expected_time_s: float | None = None
    expected_energy_j: float | None = None
    basis: str = ""
    """Where the expected duration and energy come from."""
    intensity_g_per_kwh: float | None = None
    """Mean forecast intensity over the chosen window."""
    now_intensity_g_per_kwh: float | None = None
    """The same had it started at ``planned_at``: what not shifting would have meant."""
    price_per_mwh: float | None = None
    now_price_per_mwh: float | None = None
    provenance: str | None = None

    @property
    def delay_s(self) -> float:
        return max(0.0, (self.start_at - self.planned_at).total_seconds())

    @property
    def expected_emissions_g(self) -> float | None:
        return _grams(self.expected_energy_j, self.intensity_g_per_kwh)

    @property
    def now_emissions_g(self) -> float | None:
        return _grams(self.expected_energy_j, self.now_intensity_g_per_kwh)

    def to_json(self) -> str:
        data = asdict(self)
        for key in ("planned_at", "start_at", "deadline"):
            data[key] = data[key].isoformat() if data[key] is not None else None
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StartPlan:
        data: dict[str, Any] = json.loads(text)
        for key in ("planned_at", "start_at", "deadline"):
            data[key] = parse_time(data[key]) if data[key] is not None else None
        return cls(**data)


def _grams(energy_j: float | None, intensity: float | None) -> float | None:
    if energy_j is None or intensity is None:
        return None
    return energy_j / J_PER_KWH * intensity


def start_now(
    now: datetime,
    reason: str,
    deadline: datetime | None = None,
    expected: ExpectedRun | None = None,
) -> StartPlan:
    return StartPlan(
        now,
        now,
        reason,
        deadline,
        expected.time_s if expected else None,
        expected.energy_j if expected else None,
        expected.basis if expected else "",
    )


def _mean(points: Sequence[GridPoint], start: datetime, end: datetime, field: str) -> float | None:
    """Time-weighted mean of a field over ``[start, end)``, over the covered part only (a
    value every covering point shares, exactly: ``signal.weighted_mean``); None if nothing
    covers it or a covering point lacks the field."""
    values: list[tuple[float, float]] = []
    for p in points:
        w = p.overlap_s(start, end)
        if w <= 0:
            continue
        value = getattr(p, field)
        if value is None:
            return None
        values.append((value, w))
    return weighted_mean(values) if values else None


def plan_start(
    now: datetime,
    deadline: datetime,
    expected: ExpectedRun,
    forecast: Sequence[GridPoint],
    objective: Objective = "emissions",
    emissions_weight: float = 1.0,
    min_saving: float = MIN_SAVING,
) -> StartPlan:
    """The best start in ``[now, deadline - expected.time_s]`` for ``objective``.

    ``mix`` weighs emissions by ``emissions_weight`` and cost by the rest, each relative to
    its mean over the forecast up to the deadline (so the weight does not depend on units).
    """
    # An instant expectation weighs the intensity over the start's first moment.
    duration = timedelta(seconds=max(expected.time_s, MIN_EXPECTED_S))
    no_room = _no_room(now, deadline, expected)
    if no_room is not None:
        return start_now(now, no_room, deadline, expected)
    ahead = [p for p in forecast if p.end > now and p.start < deadline]
    if not ahead or covered_s(ahead, now, deadline) <= 0:
        return start_now(
            now, "no forecast covers the time before the deadline: starting now", deadline, expected
        )
    score = _scorer(ahead, now, deadline, duration, objective, emissions_weight)
    if score is None:
        return start_now(
            now,
            f"the forecast has no price, which objective={objective!r} needs: starting now",
            deadline,
            expected,
        )
    scored = _scored_starts(ahead, now, deadline - duration, duration, score)
    plan = _plan(now, now, "", deadline, expected, ahead, duration)
    best = _best_start(scored, score(now), now, objective, min_saving)
    if isinstance(best, str):
        return _replace_reason(plan, best)
    start, saving = best
    delay = show_time((start - now).total_seconds())
    return _plan(
        now,
        start,
        f"starting {delay} later, at {start.isoformat(timespec='seconds')}, "
        f"is expected to cut {objective} by {100 * saving:.0f} %; {expected.describe()}",
        deadline,
        expected,
        ahead,
        duration,
    )


def _no_room(now: datetime, deadline: datetime, expected: ExpectedRun) -> str | None:
    """Why the deadline leaves no start but now (the reason, in words); None when it does."""
    latest = deadline - timedelta(seconds=expected.time_s)
    if deadline <= now:
        return f"the deadline {deadline.isoformat()} has already passed"
    if latest > now:
        return None
    if latest == now:
        return (
            f"a run is expected to take {expected.time_s:.0f} s "
            f"({expected.basis}): only starting now can finish by the deadline "
            f"{deadline.isoformat()}"
        )
    return (
        f"a run is expected to take {expected.time_s:.0f} s "
        f"({expected.basis}), more than the {(deadline - now).total_seconds():.0f}"
        f" s left before the deadline {deadline.isoformat()}: starting now"
    )


def _scored_starts(
    ahead: Sequence[GridPoint],
    now: datetime,
    latest: datetime,
    duration: timedelta,
    score: Callable[[datetime], float | None],
) -> list[tuple[float, datetime]]:
    """The candidate starts in ``[now, latest]`` whose whole run the forecast covers, with
    their scores, best first. The mean over a run's window is piecewise linear between the
    instants where its start or end crosses an interval's edge: only those can be best."""
    candidates = {now, latest}
    for p in ahead:
        for edge in (p.start, p.end):
            candidates.update((edge, edge - duration))
    full = duration.total_seconds()
    return sorted(
        (s, t)
        for t in candidates
        if now <= t <= latest
        and covered_s(ahead, t, t + duration) >= full - 1e-6
        and (s := score(t)) is not None
    )


def _best_start(
    scored: Sequence[tuple[float, datetime]],
    baseline: float | None,
    now: datetime,
    objective: Objective,
    min_saving: float,
) -> tuple[datetime, float] | str:
    """The start worth waiting for and the share of the objective it saves against starting
    now (``baseline``: now's score); or why none is, in words."""
    if not scored:
        return "the forecast does not cover a whole run before the deadline: starting now"
    best_score, best = scored[0]
    if baseline is None:
        return (
            "the forecast has nothing for starting now, so no start "
            "can be compared with it: starting now"
        )
    saving = 1 - best_score / baseline if baseline > 0 else 0.0
    if best - now < MIN_DELAY or saving <= ROUNDING:
        return (
            f"no start before the deadline is expected to beat "
            f"starting now on {objective}: starting now"
        )
    if saving < min_saving:
        return (
            f"waiting would cut the expected {objective} by only "
            f"{100 * saving:.1f} % (less than {100 * min_saving:g} %): "
            "starting now"
        )
    return best, saving


def _scorer(
    points: Sequence[GridPoint],
    now: datetime,
    deadline: datetime,
    duration: timedelta,
    objective: str,
    weight: float,
) -> Any:
    """The function a start's score is: lower is better; None where it cannot be told."""

    def intensity(t: datetime) -> float | None:
        return _mean(points, t, t + duration, "intensity_g_per_kwh")

    def price(t: datetime) -> float | None:
        return _mean(points, t, t + duration, "price_per_mwh")

    if objective == "emissions":
        return intensity
    if _mean(points, now, deadline, "price_per_mwh") is None:
        return None
    if objective == "cost":
        return price
    ref_i = _mean(points, now, deadline, "intensity_g_per_kwh") or 1.0
    ref_p = _mean(points, now, deadline, "price_per_mwh") or 1.0

    def mix(t: datetime) -> float | None:
        i, p = intensity(t), price(t)
        if i is None or p is None:
            return None
        return weight * i / ref_i + (1 - weight) * p / ref_p

    return mix


def _plan(
    now: datetime,
    start: datetime,
    reason: str,
    deadline: datetime,
    expected: ExpectedRun,
    points: Sequence[GridPoint],
    duration: timedelta,
) -> StartPlan:
    used = [p for p in points if p.overlap_s(start, start + duration) > 0]
    return StartPlan(
        now,
        start,
        reason,
        deadline,
        expected.time_s,
        expected.energy_j,
        expected.basis,
        _mean(points, start, start + duration, "intensity_g_per_kwh"),
        _mean(points, now, now + duration, "intensity_g_per_kwh"),
        _mean(points, start, start + duration, "price_per_mwh"),
        _mean(points, now, now + duration, "price_per_mwh"),
        worst_provenance([p.provenance for p in used]),
    )


def _replace_reason(plan: StartPlan, reason: str) -> StartPlan:
    return replace(plan, reason=reason)

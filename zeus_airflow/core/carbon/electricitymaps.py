"""The Electricity Maps API (v3): carbon intensity now, over the last 24 hours, and forecast.

Standard library only (``urllib``). The token goes in the ``auth-token`` header; the Airflow
layer finds it in a Connection (``hooks/carbon.py``), this client never looks for it.
Requests time out after ``timeout_s``; a 429 (rate limit), a 5xx or a network error is tried
again after ``backoff_s``, doubling each time (or the server's ``Retry-After``, capped at
``max_backoff_s``), up to ``retries`` times; a 401/403 is not retried. All the requests and
waits of one ``points`` call fit in ``budget_s`` (default 5 s) and never run past the end of
the span asked for when it is in the future (a start deadline): however many ``retries``, a
failing API holds a task a few seconds, not minutes. Answers are cached for ``cache_ttl_s``
per URL. Any failure raises :class:`SourceError` saying what went wrong: the caller falls back
and records the provenance ``fallback`` with that reason. A figure outside the plausible range
(``config.INTENSITY_RANGE_G_PER_KWH``) is such a failure.

Response shapes read (fields the client does not use are ignored)::

    /carbon-intensity/latest   {"zone", "carbonIntensity", "datetime", "updatedAt",
                                "isEstimated", "temporalGranularity", ...}
    /carbon-intensity/history  {"zone", "history": [{"carbonIntensity", "datetime", ...}]}
    /carbon-intensity/forecast {"zone", "forecast": [{"carbonIntensity", "datetime"}],
                                "updatedAt"}

``datetime`` is the start of the interval; its length is ``temporalGranularity`` (hourly by
default).
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from zeus_airflow.core.carbon.csvtrace import parse_time
from zeus_airflow.core.carbon.signal import GridPoint, Provenance, SourceError, clip
from zeus_airflow.core.common.config import grid_value_problem

DEFAULT_BASE_URL = "https://api.electricitymaps.com/v3"
GRANULARITY = {
    "5_minutes": timedelta(minutes=5),
    "15_minutes": timedelta(minutes=15),
    "hourly": timedelta(hours=1),
    "daily": timedelta(days=1),
}
RETRIED_STATUSES = (429, 500, 502, 503, 504)
DEFAULT_BUDGET_S = 5.0
"""All of one ``points`` call's requests and waits, in seconds."""
SETTINGS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "timeout_s": ("a finite number of seconds > 0", lambda v: v > 0),
    "retries": ("an integer >= 0", lambda v: v >= 0 and float(v).is_integer()),
    "backoff_s": ("a finite number of seconds >= 0", lambda v: v >= 0),
    "cache_ttl_s": ("a finite number of seconds >= 0", lambda v: v >= 0),
    "budget_s": (
        "a finite number of seconds > 0 (all of a lookup's requests and waits)",
        lambda v: v > 0,
    ),
}
"""The client's settings a Connection's extras may set, and what each accepts."""

log = logging.getLogger("zeus_airflow")


@dataclass
class ResponseCache:
    """Bodies by URL until they expire (monotonic seconds); shared by clients of a process
    so that a task's planning and its accounting ask once."""

    entries: dict[str, tuple[float, Any]] = field(default_factory=dict)

    def get(self, url: str, now: float) -> Any | None:
        hit = self.entries.get(url)
        return hit[1] if hit is not None and hit[0] > now else None

    def put(self, url: str, body: Any, expires: float) -> None:
        self.entries[url] = (expires, body)


@dataclass
class ElectricityMapsClient:
    """A client for one token. ``clock`` gives the current UTC time (for choosing history or
    forecast); ``sleep`` waits between tries (tests pass their own)."""

    token: str
    base_url: str = DEFAULT_BASE_URL
    timeout_s: float = 10.0
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    cache_ttl_s: float = 300.0
    budget_s: float = DEFAULT_BUDGET_S
    cache: ResponseCache = field(default_factory=ResponseCache)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        check_settings({name: getattr(self, name) for name in SETTINGS}, "the client")

    # --- the three endpoints (``until``: a time.monotonic() deadline; default the budget) --
    def latest(self, zone: str, until: float | None = None) -> GridPoint:
        body = self._get("carbon-intensity/latest", zone, until)
        return _point(body, "live", body)

    def history(self, zone: str, until: float | None = None) -> list[GridPoint]:
        body = self._get("carbon-intensity/history", zone, until)
        return [_point(item, "live", body) for item in _items(body, "history")]

    def forecast(self, zone: str, until: float | None = None) -> list[GridPoint]:
        body = self._get("carbon-intensity/forecast", zone, until)
        return [_point(item, "forecast", body) for item in _items(body, "forecast")]

    # --- GridSource ---------------------------------------------------------------------------
    def points(self, zone: str, start: datetime, end: datetime) -> list[GridPoint]:
        """History (and the latest figure) for the past part of the span, the forecast for
        the rest; measured figures win over forecast ones where both exist. When one part
        fails the other is still used (the caller fills the gap); when all fail, it raises."""
        now = self.clock()
        budget_s = self.budget_s
        if end > now:  # a start deadline: never wait past it
            budget_s = min(budget_s, (end - now).total_seconds())
        until = time.monotonic() + budget_s
        parts: list[Callable[[str], list[GridPoint]]] = []
        if start < now:
            parts.append(lambda z: [*self.history(z, until), self.latest(z, until)])
        if end > now:
            parts.append(lambda z: self.forecast(z, until))
        found: list[GridPoint] = []
        errors: list[SourceError] = []
        for part in parts:
            try:
                found += part(zone)
            except SourceError as err:
                errors.append(err)
        if errors and not found:
            raise errors[0]
        for error in errors:
            log.warning("Electricity Maps: part of the span has no figures: %s", error)
        return clip(found, start, end)

    # --- HTTP ---------------------------------------------------------------------------------
    def _get(self, path: str, zone: str, until: float | None = None) -> Any:
        url = f"{self.base_url.rstrip('/')}/{path}?{urllib.parse.urlencode({'zone': zone})}"
        cached = self.cache.get(url, time.monotonic())
        if cached is not None:
            return cached
        until = time.monotonic() + self.budget_s if until is None else until
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            left_s = until - time.monotonic()
            if left_s <= 0:
                raise SourceError(
                    f"Electricity Maps {path} for zone {zone!r}: no answer "
                    f"within the time budget ({self.budget_s:g} s, or the start "
                    f"deadline), {attempt} tries"
                )
            try:
                body = self._fetch(url, min(self.timeout_s, left_s))
            except _Retry as err:
                delay = min(
                    err.retry_after_s if err.retry_after_s is not None else wait, self.max_backoff_s
                )
                if attempt == self.retries or delay >= until - time.monotonic():
                    # Out of tries, or the next one would start past the time budget.
                    why = "" if attempt == self.retries else ", no time left in the budget"
                    raise SourceError(
                        f"Electricity Maps {path} for zone {zone!r}: "
                        f"{err.reason}, {attempt + 1} tries{why}"
                    ) from None
                log.warning(
                    "Electricity Maps %s: %s; trying again in %.3g s", path, err.reason, delay
                )
                self.sleep(delay)
                wait *= 2
                continue
            self.cache.put(url, body, time.monotonic() + self.cache_ttl_s)
            return body
        raise AssertionError("unreachable")

    def _fetch(self, url: str, timeout_s: float) -> Any:
        request = urllib.request.Request(
            url, headers={"auth-token": self.token, "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            if err.code in RETRIED_STATUSES:
                raise _Retry(
                    f"HTTP {err.code}", _retry_after(err.headers.get("Retry-After"))
                ) from None
            if err.code in (401, 403):
                raise SourceError(
                    f"Electricity Maps refused the token (HTTP {err.code}): "
                    "check the Connection's password"
                ) from None
            raise SourceError(f"Electricity Maps answered HTTP {err.code} for {url}") from None
        except TimeoutError as err:
            raise _Retry(f"no answer within {self.timeout_s:g} s") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise _Retry(f"no answer within {self.timeout_s:g} s") from None
            raise _Retry(f"cannot reach {self.base_url} ({err.reason})") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise SourceError(
                f"Electricity Maps sent a body that is not JSON for {url}: {raw[:80]!r}"
            ) from None


class _Retry(Exception):
    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after_s = reason, retry_after_s


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:  # an HTTP date: use our own backoff
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def _items(body: Any, key: str) -> list[Any]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise SourceError(f"Electricity Maps sent no {key!r} list: {str(body)[:120]}")
    return items


def _point(item: Any, provenance: Provenance, body: Any) -> GridPoint:
    """One figure; anything but a number and a time where they belong is malformed."""
    try:
        value = item["carbonIntensity"]
        start = parse_time(item["datetime"])
        granularity = (
            item.get("temporalGranularity")
            or (body.get("temporalGranularity") if isinstance(body, dict) else None)
            or "hourly"
        )
        length = GRANULARITY[granularity]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise SourceError(
            f"Electricity Maps sent a malformed figure ({type(err).__name__}: "
            f"{err}): {str(item)[:120]}"
        ) from None
    problem = grid_value_problem(value)
    if problem is not None:
        raise SourceError(f"Electricity Maps sent an unusable carbonIntensity: {problem}")
    return GridPoint(start, start + length, float(value), provenance)


def check_settings(settings: Mapping[str, object], where: str) -> dict[str, float]:
    """The client settings in ``settings`` (a Connection's extras), each checked against
    :data:`SETTINGS`; others are ignored. Raises SourceError naming the setting, where it
    came from and what it accepts, so that the caller falls back instead of failing."""
    checked: dict[str, float] = {}
    for name, (allowed, within) in SETTINGS.items():
        if name not in settings:
            continue
        value = settings[name]
        number = _number(value)
        if number is None or not math.isfinite(number) or not within(number):
            raise SourceError(f"{where}: {name}={value!r} is invalid: expected {allowed}")
        checked[name] = int(number) if name == "retries" else number
    return checked


def _number(value: object) -> float | None:
    """A number, or text that is one (JSON extras typed in the UI); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None

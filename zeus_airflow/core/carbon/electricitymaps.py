"""The Electricity Maps API (v3): carbon intensity now, over the last 24 hours, and forecast.

Standard library only (``urllib``). The token goes in the ``auth-token`` header; the Airflow
layer finds it in a Connection (``hooks/carbon.py``), this client never looks for it.
Requests time out after ``timeout_s``; a 429 (rate limit), a 5xx or a network error is tried
again after ``backoff_s``, doubling each time (or the server's ``Retry-After``, capped at
``max_backoff_s``), up to ``retries`` times; a 401/403 is not retried. Answers are cached for
``cache_ttl_s`` per URL. Any failure raises :class:`SourceError` saying what went wrong: the
caller falls back and records the provenance ``fallback`` with that reason.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from zeus_airflow.core.carbon.csvtrace import parse_time
from zeus_airflow.core.carbon.signal import GridPoint, Provenance, SourceError, clip

DEFAULT_BASE_URL = "https://api.electricitymaps.com/v3"
GRANULARITY = {"5_minutes": timedelta(minutes=5), "15_minutes": timedelta(minutes=15),
               "hourly": timedelta(hours=1), "daily": timedelta(days=1)}
RETRIED_STATUSES = (429, 500, 502, 503, 504)

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
    cache: ResponseCache = field(default_factory=ResponseCache)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep

    # --- the three endpoints ------------------------------------------------------------------
    def latest(self, zone: str) -> GridPoint:
        body = self._get("carbon-intensity/latest", zone)
        return _point(body, "live", body)

    def history(self, zone: str) -> list[GridPoint]:
        body = self._get("carbon-intensity/history", zone)
        return [_point(item, "live", body) for item in _items(body, "history")]

    def forecast(self, zone: str) -> list[GridPoint]:
        body = self._get("carbon-intensity/forecast", zone)
        return [_point(item, "forecast", body) for item in _items(body, "forecast")]

    # --- GridSource ---------------------------------------------------------------------------
    def points(self, zone: str, start: datetime, end: datetime) -> list[GridPoint]:
        """History (and the latest figure) for the past part of the span, the forecast for
        the rest; measured figures win over forecast ones where both exist. When one part
        fails the other is still used (the caller fills the gap); when all fail, it raises."""
        now = self.clock()
        parts: list[Callable[[str], list[GridPoint]]] = []
        if start < now:
            parts.append(lambda z: [*self.history(z), self.latest(z)])
        if end > now:
            parts.append(self.forecast)
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
    def _get(self, path: str, zone: str) -> Any:
        url = f"{self.base_url.rstrip('/')}/{path}?{urllib.parse.urlencode({'zone': zone})}"
        cached = self.cache.get(url, time.monotonic())
        if cached is not None:
            return cached
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                body = self._fetch(url)
            except _Retry as err:
                if attempt == self.retries:
                    raise SourceError(f"Electricity Maps {path} for zone {zone!r}: "
                                      f"{err.reason}, {self.retries + 1} tries") from None
                delay = min(err.retry_after_s if err.retry_after_s is not None else wait,
                            self.max_backoff_s)
                log.warning("Electricity Maps %s: %s; trying again in %.3g s", path,
                            err.reason, delay)
                self.sleep(delay)
                wait *= 2
                continue
            self.cache.put(url, body, time.monotonic() + self.cache_ttl_s)
            return body
        raise AssertionError("unreachable")

    def _fetch(self, url: str) -> Any:
        request = urllib.request.Request(url, headers={"auth-token": self.token,
                                                       "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            if err.code in RETRIED_STATUSES:
                raise _Retry(f"HTTP {err.code}", _retry_after(err.headers.get("Retry-After"))
                             ) from None
            if err.code in (401, 403):
                raise SourceError(f"Electricity Maps refused the token (HTTP {err.code}): "
                                  "check the Connection's password") from None
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
            raise SourceError(f"Electricity Maps sent a body that is not JSON for {url}: "
                              f"{raw[:80]!r}") from None


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
        granularity = item.get("temporalGranularity") or (
            body.get("temporalGranularity") if isinstance(body, dict) else None) or "hourly"
        length = GRANULARITY[granularity]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise SourceError(f"Electricity Maps sent a malformed figure ({type(err).__name__}: "
                          f"{err}): {str(item)[:120]}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value < 0:
        raise SourceError(f"Electricity Maps sent a malformed carbonIntensity: {value!r}")
    return GridPoint(start, start + length, float(value), provenance)

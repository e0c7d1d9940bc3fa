"""The operator's carbon options, checked (``core/common/config.py``) and resolved at run time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from zeus_airflow.core.carbon.accounting import Fallback
from zeus_airflow.core.carbon.csvtrace import CsvTrace
from zeus_airflow.core.carbon.fixed import FixedSource
from zeus_airflow.core.carbon.signal import GridSource
from zeus_airflow.core.common.config import (
    PARAMETER_CHECKS,
    ConfigError,
    parse_duration_s,
    parse_moment,
)


@dataclass(frozen=True)
class CarbonOptions:
    """What one task was asked to do about carbon (every value rendered and checked)."""

    zone: str
    source: str = "electricitymaps"
    fallback_g_per_kwh: float | None = None
    objective: str = "emissions"
    weight: float = 0.5
    start_deadline: object = None
    """None, seconds/duration after the task starts, or an aware datetime / ISO text."""
    expected_duration: object = None
    """The user's guess of a run's duration, used while the job has no history."""

    def __post_init__(self) -> None:
        for name, value in (
            ("carbon_zone", self.zone),
            ("carbon_source", self.source),
            ("carbon_fallback_g_per_kwh", self.fallback_g_per_kwh),
            ("carbon_objective", self.objective),
            ("carbon_weight", self.weight),
            ("start_deadline", self.start_deadline),
            ("expected_duration", self.expected_duration),
        ):
            PARAMETER_CHECKS[name](value)

    @property
    def fallback(self) -> Fallback | None:
        return None if self.fallback_g_per_kwh is None else Fallback(self.fallback_g_per_kwh)

    @property
    def expected_duration_s(self) -> float | None:
        return (
            None
            if self.expected_duration is None
            else parse_duration_s("expected_duration", self.expected_duration)
        )

    def deadline(self, now: datetime) -> datetime | None:
        """The latest finish: None without a deadline."""
        value = self.start_deadline
        if value is None:
            return None
        if isinstance(value, datetime):
            return value
        if isinstance(value, str) and (moment := parse_moment(value)) is not None:
            return moment
        return now + timedelta(seconds=parse_duration_s("start_deadline", value))

    def grid_source(self, electricitymaps: Callable[[], GridSource]) -> GridSource:
        """The source the options name; ``electricitymaps`` builds the API client (the
        Airflow layer knows where its token is)."""
        kind, _, rest = self.source.partition(":")
        if kind == "electricitymaps":
            return electricitymaps()
        if kind == "csv":
            return CsvTrace.load(rest)
        if kind == "fixed":
            numbers = [float(p) for p in rest.split(":")]
            return FixedSource(numbers[0], numbers[1] if len(numbers) > 1 else None)
        raise ConfigError(f"carbon_source={self.source!r} is invalid")  # checked: unreachable

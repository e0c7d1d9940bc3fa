"""Which Apache Airflow zeus-airflow runs on: the one module that asks.

Supported: Airflow 3.2 and later, tested on the latest patches of 3.2 and 3.3, with no upper
bound (as Airflow's community providers: a minimum that moves up under their published rule,
never a maximum). Importing this module on an older Airflow raises
:class:`UnsupportedAirflowError`, which names the supported versions, before any name missing
there (``AirflowTaskTerminated`` is not in 3.1's ``airflow.sdk.exceptions``) is reached.

What differs between the supported versions, found by running the tests on 3.2, is mended
here and nowhere else: :func:`auth_manager_login_url`, :func:`stats_gauge` and
:func:`initialize_stats`. The Task SDK names at the end are the
operator's only imports from outside ``airflow.sdk``'s public ``__init__``; they are the same
on 3.2 and 3.3, and live here so that a move in a later Airflow is mended in this one place.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import airflow

MIN_AIRFLOW = (3, 2)
"""The oldest Airflow minor release supported: ``apache-airflow>=3.2`` in pyproject.toml."""
TESTED_AIRFLOW = ("3.2", "3.3")
"""The minor releases CI tests: the whole suite on 3.3, the Airflow-facing tests on 3.2."""


class UnsupportedAirflowError(ImportError):
    """zeus-airflow was imported on an Airflow older than :data:`MIN_AIRFLOW`."""


def supported_versions_text() -> str:
    """The supported versions in words, for messages and docs."""
    minimum = ".".join(map(str, MIN_AIRFLOW))
    return f"Apache Airflow {minimum} or later (tested with {' and '.join(TESTED_AIRFLOW)})"


def parse_airflow_version(version: str) -> tuple[int, int] | None:
    """The (major, minor) of an Airflow version string (``3.2.2``, ``3.3.0rc1``,
    ``3.4.0.dev0``), or None when it has none."""
    match = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_airflow_version(version: str) -> None:
    """Raise :class:`UnsupportedAirflowError` unless ``version`` is a supported Airflow."""
    parsed = parse_airflow_version(version)
    if parsed is None or parsed < MIN_AIRFLOW:
        raise UnsupportedAirflowError(
            f"zeus-airflow supports {supported_versions_text()}; this is Apache Airflow "
            f"{version}. Upgrade Airflow (pip install 'apache-airflow>="
            f"{'.'.join(map(str, MIN_AIRFLOW))}' with Airflow's constraints for your Python), "
            "or keep zeus-airflow out of this environment."
        )


def auth_manager_login_url(auth_manager: Any, next_url: str) -> str:
    """The auth manager's login page, coming back to ``next_url`` after the login.

    Airflow 3.2's simple auth manager leaves ``next_url`` out of its login URL (3.3 adds it
    as ``?next=``), though its login page follows ``?next=`` in both: added when missing.
    """
    url = str(auth_manager.get_url_login(next_url=next_url))
    parts = urlsplit(url)
    if "next" in parse_qs(parts.query):
        return url
    query = "&".join(q for q in (parts.query, urlencode({"next": next_url})) if q)
    return urlunsplit(parts._replace(query=query))


def stats_gauge(name: str, value: float, *, tags: dict[str, str] | None = None) -> None:
    """A gauge through Airflow's metrics client in a task (``[metrics]``: StatsD, Datadog,
    OpenTelemetry or nothing). ``Stats.gauge`` on both: 3.2's ``airflow.sdk.observability.stats``
    has no module-level ``gauge`` (3.3's has, and keeps ``Stats`` as a shim over it)."""
    from airflow.sdk.observability.stats import Stats

    Stats.gauge(name, value, tags=tags)


def initialize_stats(*, export_legacy_names: bool = False) -> None:
    """Build Airflow's metrics client afresh from ``[metrics]``, as its task runner does when a
    task process starts; the two versions spell both calls differently."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    # Typed as Any: each branch calls the other version's signatures.
    factory: Any = stats_utils.get_stats_factory
    shim: Any = stats.Stats
    if (parse_airflow_version(airflow.__version__) or MIN_AIRFLOW) < (3, 3):
        shim.initialize(factory=factory(shim))
    else:
        shim.initialize(factory=factory(), export_legacy_names=export_legacy_names)


check_airflow_version(airflow.__version__)

# Only now: on an unsupported Airflow, the names below may not exist.
from airflow.sdk.definitions._internal.mixins import ResolveMixin  # noqa: E402
from airflow.sdk.definitions.mappedoperator import OperatorPartial  # noqa: E402
from airflow.sdk.exceptions import AirflowSkipException, AirflowTaskTerminated  # noqa: E402

__all__ = [
    "MIN_AIRFLOW",
    "TESTED_AIRFLOW",
    "AirflowSkipException",
    "AirflowTaskTerminated",
    "OperatorPartial",
    "ResolveMixin",
    "UnsupportedAirflowError",
    "auth_manager_login_url",
    "check_airflow_version",
    "initialize_stats",
    "parse_airflow_version",
    "stats_gauge",
    "supported_versions_text",
]

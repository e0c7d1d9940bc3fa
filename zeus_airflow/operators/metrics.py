"""Each run's figures as Airflow metrics, so they reach the dashboards a deployment already has.

Sent through the Task SDK's metrics client (``airflow.sdk.observability.stats``), so to whatever
``[metrics]`` configures: StatsD (``statsd_on``), Datadog (``statsd_datadog_enabled``) or
OpenTelemetry (``otel_on``); nothing when none is on. One gauge per figure and run, named
``zeus.run.<figure>`` (after Airflow's ``statsd_prefix``, e.g. ``airflow.zeus.run.energy_j``),
tagged ``dag_id``, ``task_id``, ``zeus_job`` (the job's id: not ``job_id``, a tag Airflow's
default ``statsd_disabled_tags`` drops) and ``measurement`` (``measured``, ``replayed`` or
``simulated``: a replayed joule is never mistaken for a measured one).

Plain StatsD has no tags (Airflow drops them unless ``statsd_influxdb_enabled``), so there each
gauge is also sent under a name that carries them, as Airflow's own per-task metrics do:
``zeus.run.<figure>.<dag_id>.<task_id>.<measurement>`` (a ``.`` inside an id becomes ``__``).

Sending a metric never fails a task: an error is a warning in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from zeus_airflow.core.domain import FIGURES as DECLARED
from zeus_airflow.core.domain import RUN_FACTS
from zeus_airflow.core.train.engine import RecurrenceResult
from zeus_airflow.operators.summary import run_values

METRIC_PREFIX = "zeus.run"

FIGURES: dict[str, str] = {
    f.name: f.metric
    for f in (*DECLARED.values(), *RUN_FACTS)
    if f.metric is not None and f.stored == "try"
}
"""Every gauge a run sends, by figure, with its unit (declared in ``core/domain/figures.py``;
docs/operator.md lists the same)."""


def run_figures(result: RecurrenceResult) -> dict[str, float]:
    """The values of :data:`FIGURES` for one finished run (a flag as 1 or 0)."""
    values = run_values(result)
    return {name: _number(values[name]) for name in FIGURES}


def _number(value: Any) -> float:
    return int(value) if isinstance(value, bool) else value


def emit_run_metrics(
    result: RecurrenceResult, *, dag_id: str, task_id: str, log: logging.Logger | Any
) -> None:
    """Send the run's gauges through Airflow's metrics client (see the module's doc)."""
    try:
        from airflow.sdk.configuration import conf

        from zeus_airflow.airflow_compat import stats_gauge

        tags = {
            "dag_id": dag_id,
            "task_id": task_id,
            "zeus_job": result.job.job_id,
            "measurement": result.measurement,
        }
        untagged = conf.getboolean("metrics", "statsd_on", fallback=False) and not (
            conf.getboolean("metrics", "statsd_influxdb_enabled", fallback=False)
            or conf.getboolean("metrics", "statsd_datadog_enabled", fallback=False)
        )
        suffix = ".".join(_segment(part) for part in (dag_id, task_id, result.measurement))
        for figure, value in run_figures(result).items():
            stats_gauge(f"{METRIC_PREFIX}.{figure}", value, tags=tags)
            if untagged:
                stats_gauge(f"{METRIC_PREFIX}.{figure}.{suffix}", value)
    except Exception as err:  # a metrics backend must never fail a training task
        log.warning("Zeus: could not send the run's metrics (%s: %s)", type(err).__name__, err)


def _segment(text: str) -> str:
    """One dotted segment of a StatsD name: Airflow's allowed characters, no inner dot."""
    from airflow.sdk.observability.stats import normalize_name_for_stats

    return normalize_name_for_stats(text.replace(".", "__"), log_warning=False)

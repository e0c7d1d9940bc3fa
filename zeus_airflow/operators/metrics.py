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

from zeus_airflow.core.engine import RecurrenceResult

METRIC_PREFIX = "zeus.run"

FIGURES: dict[str, str] = {
    "energy_j": "training energy of the run, every try (J)",
    "time_s": "training time of the run, every try (s)",
    "cost": "Zeus cost of the run (J-equivalents)",
    "batch_size": "batch size of the last try",
    "power_limit_w": "power limit the last try trained at (W)",
    "setup_energy_j": "energy before training, every try (J; not in the cost)",
    "setup_time_s": "time before training, every try (s)",
    "epochs": "epochs over every try",
    "tries": "batch sizes tried in the run",
    "reached_target": "1 if the last try reached the target, else 0",
}
"""Every gauge a run sends, by figure, with its unit (docs/operator.md lists the same)."""


def run_figures(result: RecurrenceResult) -> dict[str, float]:
    """The values of :data:`FIGURES` for one finished run."""
    return {
        "energy_j": result.energy_j,
        "time_s": result.time_s,
        "cost": result.cost,
        "batch_size": result.batch_size,
        "power_limit_w": result.power_limit_w,
        "setup_energy_j": result.setup_energy_j,
        "setup_time_s": result.setup_time_s,
        "epochs": result.epochs,
        "tries": len(result.tries),
        "reached_target": int(result.reached_target),
    }


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

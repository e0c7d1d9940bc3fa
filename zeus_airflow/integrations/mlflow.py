"""A Zeus run's figures in MLflow (``pip install 'zeus-airflow[mlflow]'``).

Two ways in, both through ``integrations/publishing.py``:

- the operator's ``mlflow_experiment``: the task starts a run of that experiment (named
  ``<dag_id>.<task_id>.<run_id>``, plus ``[<map_index>]`` for a mapped task), active while
  the train function runs, so what it logs itself lands there too; the run ends FINISHED, or
  FAILED when training raised;
- without it, the MLflow run the train function ran inside: one active when training ended,
  or the last one the train function started (``mlflow.last_active_run``).

Into that run go the run's published record (``published.PUBLISHED``): each known number as
the metric ``zeus.<name>`` (a flag as 1 or 0), each known text as the param ``zeus.<name>``,
the chosen batch size and power limit as the params ``zeus.batch_size`` and
``zeus.power_limit_w`` too, and the tags ``zeus.job_id``, ``zeus.phase`` and
``zeus.measurement``. The tracking URI is MLflow's own (``MLFLOW_TRACKING_URI``, or what the
code set). Nothing here ever fails a task (the first rule: the model is trained): an MLflow
error is a warning in the task log. mlflow is imported only when a task asks for an
experiment or the train function imported it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zeus_airflow.core.common.extras import require
from zeus_airflow.integrations.published import numbers, texts, warn

PREFIX = "zeus."
CHOSEN = ("batch_size", "power_limit_w")
"""What Zeus chose for the run: logged as params as well as metrics (the run's settings)."""
TAGS = ("job_id", "phase", "measurement")


@dataclass
class Tracking:
    """The MLflow run a task's figures go to."""

    own_run_id: str | None = None
    """The run the task started for ``mlflow_experiment``; None: none."""
    last_before: str | None = None
    """The last active run before training (a run the train function starts is another)."""
    run_id: str | None = None
    """Where the figures go, once training is over (None: nowhere)."""


def start(experiment: str | None, run_name: str, log: logging.Logger) -> Tracking:
    """Before training: a run of ``experiment``, active while the train function runs;
    without one, the last active run so far (when mlflow is imported at all)."""
    tracking = Tracking()
    if experiment is None and sys.modules.get("mlflow") is None:
        return tracking  # never imported (or made missing): no run can be active
    try:
        mlflow = require("mlflow", "mlflow_experiment")

        if experiment is None:
            last = mlflow.last_active_run()
            tracking.last_before = None if last is None else last.info.run_id
            return tracking
        mlflow.set_experiment(experiment)
        tracking.own_run_id = mlflow.start_run(run_name=run_name).info.run_id
    except Exception as err:  # a bad tracking URI, a server down: train without MLflow
        warn(log, f"MLflow: could not start a run of experiment {experiment!r}", err)
    return tracking


def end_training(tracking: Tracking, failed: bool, log: logging.Logger) -> None:
    """After training: end the task's own run (FAILED when training raised), and find the
    run the figures go to."""
    try:
        if tracking.own_run_id is not None:
            import mlflow

            mlflow.end_run(status="FAILED" if failed else "FINISHED")
            tracking.run_id = tracking.own_run_id
        elif sys.modules.get("mlflow") is not None:
            tracking.run_id = _train_function_s_run(tracking.last_before)
    except Exception as err:
        warn(log, "MLflow: could not end or find the training's run", err)


def _train_function_s_run(last_before: str | None) -> str | None:
    """The run active now, else the last one the train function started; None."""
    import mlflow

    active = mlflow.active_run()
    if active is not None:
        return str(active.info.run_id)
    last = mlflow.last_active_run()
    if last is None or last.info.run_id == last_before:
        return None
    return str(last.info.run_id)


def log_figures(run_id: str | None, values: Mapping[str, Any], log: logging.Logger) -> None:
    """The published record into run ``run_id`` (see the module's doc), in one request."""
    if run_id is None:
        return
    try:
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param, RunTag

        metrics, params, tags = split(values)
        now_ms = int(time.time() * 1000)
        MlflowClient().log_batch(
            run_id,
            metrics=[Metric(key, value, now_ms, 0) for key, value in metrics.items()],
            params=[Param(key, value) for key, value in params.items()],
            tags=[RunTag(key, value) for key, value in tags.items()],
        )
        log.info("Zeus: the run's figures are in MLflow run %s", run_id)
    except Exception as err:
        warn(log, f"MLflow: could not log the run's figures to run {run_id}", err)


def split(values: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """The record as MLflow takes it: metrics, params and tags, by key."""
    known = numbers(values)
    words = texts(values)
    metrics = {PREFIX + name: value for name, value in known.items()}
    params = {PREFIX + name: value for name, value in words.items() if name not in TAGS}
    params.update({PREFIX + name: str(values[name]) for name in CHOSEN if name in known})
    tags = {PREFIX + name: words[name] for name in TAGS if name in words}
    return metrics, params, tags

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
experiment or the train function imported it, always in the task's main thread (its import
registers what a worker thread cannot).

Publishing never holds training (issue 48). Every request to the tracking server runs in a
daemon thread of its own (:class:`Calls`), one after the other, and the task waits for them
against one budget, ``mlflow_budget_s`` (:data:`DEFAULT_BUDGET_S`, within
:data:`BUDGET_RANGE_S`): before training at most :data:`START_WAIT_S` of it for the run to
be created (it is made active in the main thread without a request, so that what the train
function logs lands there); a run created later gets the figures after training. Past the
budget the record is labelled unpublished (:attr:`Tracking.unpublished`): a warning in the
task log and the XCom ``zeus_mlflow``. A server that is down or never answers therefore costs
training at most :data:`START_WAIT_S`, and the task at most the budget after it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zeus_airflow.core.common.extras import require
from zeus_airflow.integrations.published import numbers, texts, warn

PREFIX = "zeus."
CHOSEN = ("batch_size", "power_limit_w")
"""What Zeus chose for the run: logged as params as well as metrics (the run's settings)."""
TAGS = ("job_id", "phase", "measurement")
DEFAULT_BUDGET_S = 10.0
"""``mlflow_budget_s``'s default: seconds a task waits for all its requests to MLflow."""
BUDGET_RANGE_S = (1.0, 600.0)
"""What ``mlflow_budget_s`` accepts (s): enough for a server a continent away, and never
more than ten minutes of a worker slot for a figure's record."""
START_WAIT_S = 0.8
"""The most training waits for its MLflow run to be created on a tracking server (s), out of
the budget. A local store (``sqlite:``, ``file:``, a path) has no server that can hang: its
first use creates its tables, seconds, so training waits for it within the whole budget."""
LOCAL_SCHEMES = ("sqlite", "file", "")
"""Tracking URI schemes of a store on the task's own disk (no scheme: a path)."""


class Calls:
    """A task's requests to MLflow, run one after the other in a daemon thread (a server
    that never answers holds that thread, never the task, and never the process's exit),
    waited for against one budget in seconds."""

    def __init__(self, budget_s: float) -> None:
        self.left_s = budget_s
        self._last: threading.Event | None = None

    def submit(self, call: Callable[[], Any]) -> _Call:
        """``call`` after every call submitted before it."""
        job = _Call(call, self._last)
        self._last = job.done
        threading.Thread(target=job.run, name="zeus-mlflow", daemon=True).start()
        return job

    def wait(self, job: _Call, most_s: float | None = None) -> bool:
        """Wait for ``job`` out of the budget (at most ``most_s``); whether it is done."""
        began = time.monotonic()
        limit = self.left_s if most_s is None else min(most_s, self.left_s)
        done = job.done.wait(max(limit, 0.0))
        self.left_s -= time.monotonic() - began
        return done


@dataclass
class _Call:
    call: Callable[[], Any]
    after: threading.Event | None
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: Exception | None = None

    def run(self) -> None:
        try:
            if self.after is not None:
                self.after.wait()
            self.value = self.call()
        except Exception as err:  # said by whoever waits for it
            self.error = err
        finally:
            self.done.set()


@dataclass
class Tracking:
    """The MLflow run a task's figures go to."""

    budget_s: float = DEFAULT_BUDGET_S
    """``mlflow_budget_s``: all of the task's requests to MLflow, waited for (s)."""
    calls: Calls | None = None
    """The task's requests to MLflow and their budget; None: MLflow is not used (yet)."""
    creating: _Call | None = None
    """The creation of the run of ``mlflow_experiment``, while it may still come."""
    own_run_id: str | None = None
    """The run the task started for ``mlflow_experiment``; None: none (yet)."""
    active: bool = False
    """Whether the task's own run was active while the train function ran."""
    last_before: str | None = None
    """The last active run before training (a run the train function starts is another)."""
    run_id: str | None = None
    """Where the figures go, once training is over (None: nowhere)."""
    unpublished: str | None = None
    """Why the record did not reach MLflow within the budget; None: it did, or no run."""

    def label(self) -> dict[str, Any] | None:
        """The XCom ``zeus_mlflow``: where the record went, or that it is unpublished;
        None where MLflow was not used."""
        if self.unpublished is not None:
            return {"published": False, "run_id": self.run_id, "why": self.unpublished}
        if self.run_id is None:
            return None
        return {"published": True, "run_id": self.run_id, "why": None}


def start(
    experiment: str | None,
    run_name: str,
    log: logging.Logger,
    budget_s: float = DEFAULT_BUDGET_S,
) -> Tracking:
    """Before training: a run of ``experiment``, active while the train function runs when
    the server creates it within :data:`START_WAIT_S`; without one, the last active run so
    far (when mlflow is imported at all)."""
    tracking = Tracking(budget_s=budget_s)
    if experiment is None and sys.modules.get("mlflow") is None:
        return tracking  # never imported (or made missing): no run can be active
    try:
        mlflow = require("mlflow", "mlflow_experiment")  # in the main thread, before any call
    except Exception as err:
        warn(log, f"MLflow: could not start a run of experiment {experiment!r}", err)
        return tracking
    tracking.calls = Calls(budget_s)
    if experiment is None:
        tracking.last_before = _last_run_id(mlflow)
        return tracking
    tracking.creating = tracking.calls.submit(lambda: _create_run(mlflow, experiment, run_name))
    local = _scheme(mlflow.get_tracking_uri()) in LOCAL_SCHEMES
    if tracking.calls.wait(tracking.creating, None if local else START_WAIT_S):
        _created(tracking, log, experiment, activate=True)
    else:
        log.info(
            "Zeus: MLflow has not created the run of experiment %r within %.1f s; training "
            "starts without it, and its figures wait for it at most mlflow_budget_s=%g s "
            "in all",
            experiment,
            START_WAIT_S,
            budget_s,
        )
    return tracking


def _scheme(uri: str) -> str:
    return uri.split(":", 1)[0].lower() if ":" in uri and uri[1:2] != ":" else ""


def _create_run(mlflow: Any, experiment: str, run_name: str) -> Any:
    """The run (its ``mlflow.entities.Run``), created in ``experiment`` (made if new)."""
    client = mlflow.MlflowClient()
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    return client.create_run(experiment_id, run_name=run_name)


def _created(tracking: Tracking, log: logging.Logger, experiment: str, activate: bool) -> None:
    """The run's creation has ended: its id (and the run made active, when ``activate``),
    or the warning of why it failed."""
    job, tracking.creating = tracking.creating, None
    assert job is not None
    if job.error is not None:
        warn(log, f"MLflow: could not start a run of experiment {experiment!r}", job.error)
        return
    tracking.own_run_id = job.value.info.run_id
    if activate:
        tracking.active = _activate(job.value)


def _activate(run: Any) -> bool:
    """``run`` active in this thread, as ``mlflow.start_run(run_id=...)`` makes it, but without
    its requests to the server; whether it could be."""
    try:
        import mlflow
        from mlflow.tracking import fluent

        fluent._active_run_stack.get().append(mlflow.ActiveRun(run))
        return True
    except Exception:  # another MLflow's internals: the figures still go to the run
        return False


def _deactivate(run_id: str) -> None:
    """The task's run no longer active in this thread (``mlflow.end_run`` without its
    request), the last active one as MLflow reckons it."""
    from mlflow.tracking import fluent

    stack = fluent._active_run_stack.get()
    if stack and stack[-1].info.run_id == run_id:
        stack.pop()
        fluent._last_active_run_id.set(run_id)


def _last_run_id(mlflow: Any) -> str | None:
    """The run active now, else the last one ended in this thread; no request."""
    from mlflow.tracking import fluent

    active = mlflow.active_run()
    return str(active.info.run_id) if active is not None else fluent._last_active_run_id.get()


def end_training(tracking: Tracking, failed: bool, log: logging.Logger) -> None:
    """After training: end the task's own run (FAILED when training raised), and find the
    run the figures go to, waiting for its creation within what is left of the budget."""
    if tracking.calls is None and sys.modules.get("mlflow") is not None:
        tracking.calls = Calls(tracking.budget_s)  # the train function imported it
    calls = tracking.calls
    if calls is None:
        return
    try:
        if tracking.creating is not None:  # still being created when training began
            if not calls.wait(tracking.creating):
                _unpublished(tracking, _out_of_budget("creating the run"), log)
                return
            _created(tracking, log, "mlflow_experiment", activate=False)
        run_id = tracking.own_run_id
        if run_id is not None:
            if tracking.active:
                _deactivate(run_id)
            status = "FAILED" if failed else "FINISHED"
            calls.submit(lambda: _client().set_terminated(run_id, status))
            tracking.run_id = run_id
        else:
            tracking.run_id = _train_function_s_run(tracking.last_before)
    except Exception as err:
        warn(log, "MLflow: could not end or find the training's run", err)


def _client() -> Any:
    from mlflow import MlflowClient

    return MlflowClient()


def _train_function_s_run(last_before: str | None) -> str | None:
    """The run active now, else the last one the train function started; None."""
    import mlflow

    last = _last_run_id(mlflow)
    return None if last is None or last == last_before else last


def _out_of_budget(what: str) -> str:
    return f"MLflow did not answer {what} within mlflow_budget_s"


def log_figures(tracking: Tracking, values: Mapping[str, Any], log: logging.Logger) -> None:
    """The published record into the tracking's run (see the module's doc), in one request,
    within what is left of the budget; else labelled unpublished."""
    run_id, calls = tracking.run_id, tracking.calls
    if run_id is None or calls is None or tracking.unpublished is not None:
        return
    try:
        batch = _batch(values)
        job = calls.submit(lambda: _client().log_batch(run_id, **batch))
        if not calls.wait(job):
            _unpublished(tracking, _out_of_budget(f"logging the figures to run {run_id}"), log)
        elif job.error is not None:
            raise job.error
        else:
            log.info("Zeus: the run's figures are in MLflow run %s", run_id)
    except Exception as err:
        warn(log, f"MLflow: could not log the run's figures to run {run_id}", err)
        tracking.unpublished = f"{type(err).__name__}: {err}"


def _batch(values: Mapping[str, Any]) -> dict[str, list[Any]]:
    from mlflow.entities import Metric, Param, RunTag

    metrics, params, tags = split(values)
    now_ms = int(time.time() * 1000)
    return dict(
        metrics=[Metric(key, value, now_ms, 0) for key, value in metrics.items()],
        params=[Param(key, value) for key, value in params.items()],
        tags=[RunTag(key, value) for key, value in tags.items()],
    )


def _unpublished(tracking: Tracking, why: str, log: logging.Logger) -> None:
    """The record labelled unpublished, said in the task log (and the XCom, by the caller)."""
    tracking.unpublished = why
    log.warning(
        "Zeus: the run's record is unpublished in MLflow: %s=%g s (the XCom zeus_mlflow says "
        "so too); the task goes on without it",
        why,
        tracking.budget_s,
    )


def split(values: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """The record as MLflow takes it: metrics, params and tags, by key."""
    known = numbers(values)
    words = texts(values)
    metrics = {PREFIX + name: value for name, value in known.items()}
    params = {PREFIX + name: value for name, value in words.items() if name not in TAGS}
    params.update({PREFIX + name: str(values[name]) for name in CHOSEN if name in known})
    tags = {PREFIX + name: words[name] for name in TAGS if name in words}
    return metrics, params, tags

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

Publishing never holds training (issue 48). Every request to the tracking server runs in a
daemon thread of its own (:class:`Calls`), one after the other, and the task waits for them
against one budget, ``mlflow_budget_s`` (:data:`DEFAULT_BUDGET_S`, within
:data:`BUDGET_RANGE_S`): before training at most :data:`START_WAIT_S` of it for the run to
be created (it is made active in the main thread without a request, so that what the train
function logs lands there); a run created later gets the figures after training. Past the
budget the record is labelled unpublished (:attr:`Tracking.unpublished`): a warning in the
task log and the XCom ``zeus_mlflow``. A server that is down or never answers therefore costs
training at most :data:`START_WAIT_S`, and the task at most the budget after it.

mlflow's import takes seconds (2.4 s in a task's process on a 2-core machine), more than
:data:`START_WAIT_S`. For a run on a tracking server in a process that has not imported
mlflow yet, the daemon thread imports it before creating the run, and training does not wait
for either (the run could not come within :data:`START_WAIT_S` anyway), so that the import too
is off the training's path (a module imports in any thread; the train function's own
``import mlflow`` waits for that import to end). Whether the store is a server is then read
from ``MLFLOW_TRACKING_URI`` without importing mlflow (unset: MLflow's default, a local
store). Where mlflow is imported already (by the DAG file or the user's code, which may have
called ``mlflow.set_tracking_uri``), its ``get_tracking_uri()`` says; and for a local store,
which training waits for anyway, mlflow is imported in the main thread, outside the budget,
as before.

A run created after training began (:class:`RunIdHandover`) is named by ``MLFLOW_RUN_ID``
until training ends, where the user has not set it: MLflow's ``start_run()``, which a
``mlflow.log_*`` call with no active run makes too, resumes the run it names, so that what the
train function logs lands in the task's run all the same. Left: a train function that logs
before the run exists (the creation's round trip, once mlflow's import, which its own
``import mlflow`` waits for, has ended), or after ``set_experiment`` made another experiment
active (the run is not named then: MLflow would refuse to resume it, an error in the train
function's call), logs to a run of its own; Zeus's figures still go to the task's run.
"""

from __future__ import annotations

import importlib.util
import logging
import os
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
RUN_ID_ENV = "MLFLOW_RUN_ID"
"""The run MLflow's ``start_run()`` resumes (and then removes from the environment)."""


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


class RunIdHandover:
    """``MLFLOW_RUN_ID`` naming the task's run while the train function runs, for a run
    created after training began: set by the thread that created it, only where the user has
    not set it, and taken back once the run is active in the main thread or training ended
    (tests, and a worker reusing its process, run many tasks in one process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # offer against close: never set after training ended
        self._open = True
        self._named: str | None = None

    def offer(self, run: Any) -> None:
        """From the thread that created ``run``: name it, unless training is over."""
        with self._lock:
            if self._open and RUN_ID_ENV not in os.environ and _resumable(run):
                self._named = os.environ[RUN_ID_ENV] = run.info.run_id

    def close(self) -> None:
        """Name the run no longer (MLflow removed the name if it resumed the run)."""
        with self._lock:
            self._open = False
            if self._named is not None and os.environ.get(RUN_ID_ENV) == self._named:
                del os.environ[RUN_ID_ENV]
            self._named = None


def _resumable(run: Any) -> bool:
    """Whether MLflow's ``start_run()`` would resume ``run``: it refuses a run of another
    experiment than the one ``set_experiment`` made active, an error in the train function's
    own call (without the name, it starts a run of its own, as it would without Zeus)."""
    try:
        from mlflow.tracking import fluent

        active = fluent._active_experiment_id
        return active is None or str(active) == str(run.info.experiment_id)
    except Exception:  # another MLflow's internals: no name, the figures still go to the run
        return False


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
    handover: RunIdHandover = field(default_factory=RunIdHandover)
    """``MLFLOW_RUN_ID`` for a run created after training began."""
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
    it is created within :data:`START_WAIT_S` (within the budget on a local store), named by
    ``MLFLOW_RUN_ID`` when later; without one, the last active run so far (when mlflow is
    imported at all)."""
    tracking = Tracking(budget_s=budget_s)
    if experiment is None and sys.modules.get("mlflow") is None:
        return tracking  # never imported (or made missing): no run can be active
    if experiment is not None and _imports_off_training():
        # The import alone outlasts START_WAIT_S: training does not wait for it at all.
        _start_run(tracking, experiment, run_name, log, wait_s=0.0)
        return tracking
    try:
        mlflow = require("mlflow", "mlflow_experiment")  # a dict lookup once imported
    except Exception as err:
        warn(log, f"MLflow: could not start a run of experiment {experiment!r}", err)
        return tracking
    if experiment is None:
        tracking.calls = Calls(budget_s)
        tracking.last_before = _last_run_id(mlflow)
        return tracking
    on_server = _scheme(mlflow.get_tracking_uri()) not in LOCAL_SCHEMES
    _start_run(tracking, experiment, run_name, log, START_WAIT_S if on_server else None)
    return tracking


def _imports_off_training() -> bool:
    """Whether mlflow's import (seconds) goes to the thread that creates the run: mlflow is
    installed but not imported (nor made missing), and ``MLFLOW_TRACKING_URI`` names a
    tracking server (unset: MLflow's default, a local store, which training waits for
    anyway: imported in the main thread there, outside the budget, as before)."""
    if "mlflow" in sys.modules:
        return False
    if _scheme(os.environ.get("MLFLOW_TRACKING_URI", "")) in LOCAL_SCHEMES:
        return False
    return importlib.util.find_spec("mlflow") is not None  # not installed: said in the main


def _start_run(
    tracking: Tracking, experiment: str, run_name: str, log: logging.Logger, wait_s: float | None
) -> None:
    """The run's creation in the daemon thread (mlflow's import first where it is not
    imported yet); training waits for it at most ``wait_s`` (None: within the budget, for a
    local store, which has no server that can hang)."""
    tracking.calls = Calls(tracking.budget_s)
    handover = tracking.handover
    tracking.creating = tracking.calls.submit(
        lambda: _import_and_create(experiment, run_name, handover)
    )
    if tracking.calls.wait(tracking.creating, wait_s):
        _created(tracking, log, experiment, activate=True)
        return
    waited = "mlflow is imported beside training" if wait_s == 0 else f"not within {wait_s:.1f} s"
    log.info(
        "Zeus: the run of experiment %r is not created yet (%s); training starts without it "
        "(MLFLOW_RUN_ID names it once created, for what the train function logs), and its "
        "figures wait for it at most mlflow_budget_s=%g s in all",
        experiment,
        waited,
        tracking.budget_s,
    )


def _import_and_create(experiment: str, run_name: str, handover: RunIdHandover) -> Any:
    """In the daemon thread: mlflow (imported here if it is not yet), the run created, and
    named for the train function should training have begun."""
    mlflow = require("mlflow", "mlflow_experiment")
    run = _create_run(mlflow, experiment, run_name)
    handover.offer(run)
    return run


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
    if activate and _activate(job.value):
        tracking.handover.close()  # active in the main thread: no name needed


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
    request), the last active one as MLflow reckons it; nothing where it is not the active
    run (never made active, or resumed through ``MLFLOW_RUN_ID`` and ended by the train
    function)."""
    try:
        from mlflow.tracking import fluent

        stack = fluent._active_run_stack.get()
        if stack and stack[-1].info.run_id == run_id:
            stack.pop()
            fluent._last_active_run_id.set(run_id)
    except Exception:  # another MLflow's internals: the run is still ended by its request
        pass


def _last_run_id(mlflow: Any) -> str | None:
    """The run active now, else the last one ended in this thread; no request."""
    from mlflow.tracking import fluent

    active = mlflow.active_run()
    return str(active.info.run_id) if active is not None else fluent._last_active_run_id.get()


def end_training(tracking: Tracking, failed: bool, log: logging.Logger) -> None:
    """After training: end the task's own run (FAILED when training raised), and find the
    run the figures go to, waiting for its creation within what is left of the budget."""
    tracking.handover.close()  # before any wait: never named for the next task
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
            _deactivate(run_id)  # made active before training, or resumed by the train function
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

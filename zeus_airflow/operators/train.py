"""ZeusTrainOperator: a training task that learns its batch size and GPU power limit.

```python
from zeus_airflow import ZeusTrainOperator

def train(run):                      # run: zeus_airflow.TrainingRun
    loader = DataLoader(dataset, batch_size=run.batch_size, shuffle=True)
    for epoch in run.epochs():       # ends at the target, at max epochs or the early-stop bound
        for batch in run.steps(loader):
            ...                      # one optimisation step
        run.report_metric(evaluate(model))
    return save(model)

ZeusTrainOperator(task_id="train", train=train, batch_sizes=[16, 32, 64, 128],
                  default_batch_size=128, target_metric=0.84, max_epochs=10)
```

The operator is Airflow glue only: it validates its arguments when the DAG is parsed (doing
nothing else there), and at run time opens the store, then the GPUs, hands one recurrence to
the engine, and publishes the result as XComs, a one-line summary and a link. Power limits are
put back on every exit path; see ``core/gpu_lease.py`` for the one Airflow cannot cover.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowTaskTerminated

from zeus_airflow.core.config import (
    DEFAULT_BETA,
    DEFAULT_ETA,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_WARMUP_STEPS,
    ConfigError,
    JobConfig,
    PowerLimitMode,
    ProfilerConfig,
)
from zeus_airflow.core.devices.spec import parse_device
from zeus_airflow.operators.links import ZeusJobLink
from zeus_airflow.operators.naming import default_job_id

if TYPE_CHECKING:
    from airflow.sdk import Context

    from zeus_airflow.core.devices.base import MeasurementKind
    from zeus_airflow.core.engine import RecurrenceResult
    from zeus_airflow.core.gpu_lease import PowerLimitGuard
    from zeus_airflow.core.run import TrainingRun
    from zeus_airflow.core.store.base import UnrecordedResultError
    from zeus_airflow.core.store.sql import SQLStore

DEFAULT_CONN_ID = "zeus_default"
PENDING_SUMMARY = "(set when the task has run)"


class ZeusTrainOperator(BaseOperator):
    """Runs ``train(run, **train_kwargs)`` at the batch size and power limit Zeus chooses.

    :param train: the training function; it receives a :class:`~zeus_airflow.TrainingRun`
        and may return a JSON-serialisable value (pushed as ``return_value``).
    :param batch_sizes: candidate batch sizes, strictly increasing.
    :param default_batch_size: b0, the size the job would use without Zeus; one of them.
    :param target_metric: validation metric a run must reach (``report_metric``).
    :param max_epochs: epoch budget of one try.
    :param higher_is_better: direction of the metric (False for losses, error rates).
    :param eta: weight of energy against time in the cost, in [0, 1].
    :param beta: early-stop factor: a try stops once it would cost ``beta`` x the cheapest
        successful run.
    :param window_size: posteriors use each batch size's N latest runs (data drift).
    :param max_tries: tries within one task run when batch sizes fail (default: one per batch
        size, plus a last run of the cheapest without the early-stop bound).
    :param job_id: the job's name in the store (default ``<dag_id>.<task_id>``). Templated.
    :param device: ``auto`` (the NVIDIA GPUs the task sees), ``nvml:<i>,<j>``,
        ``replay:<gpu>:<workload>`` or ``simulated:<gpu>[:<workload>]``. Templated.
    :param train_kwargs: extra keyword arguments for ``train``. Templated (e.g. ``{{ ds }}``).
    :param power_limit_mode: ``optimize``, ``observe`` or ``measure`` (never change limits).
    :param power_limit_selector: ``zeus``, ``min-energy``, ``min-time`` or
        ``min-energy-within-slowdown`` (with ``max_slowdown``).
    :param warmup_steps: steps run at each profiled limit before measuring.
    :param profile_steps: steps measured at each profiled limit.
    :param seed: seed of the job's random decisions (set once, when the job is created).
    :param zeus_conn_id: Airflow connection of the store (falls back to
        ``$ZEUS_AIRFLOW_DB_URL``, then an SQLite file under ``$AIRFLOW_HOME``). Templated.
    :param traces_dir: the paper's traces, for replay and simulated devices (default
        ``$ZEUS_TRACES_DIR``). Templated.
    :param heartbeat_s: how often the running trial tells the store it is alive, in s; a
        trial not heard from for three intervals has lost its worker and expires.
    :param fail_on_missed_target: fail the task when its run ends without reaching
        ``target_metric`` (default: a warning, ``reached_target=False``, the task succeeds,
        as a plain training task that returns would).
    :param fail_when_infeasible: fail the task, before training, when no batch size is left
        to try (default: train the best known size as it would run without Zeus).
    """

    template_fields: Sequence[str] = ("job_id", "device", "train_kwargs", "zeus_conn_id",
                                      "traces_dir", "zeus_summary")
    template_fields_renderers: ClassVar[dict[str, str]] = {"train_kwargs": "json"}
    operator_extra_links = (ZeusJobLink(),)
    # The summary is set by execute(); re-sending the rendered fields afterwards puts it in
    # the task instance's Rendered Templates tab.
    overwrite_rtif_after_execution = True
    ui_color = "#d9f2d0"

    def __init__(
        self,
        *,
        train: Callable[..., Any],
        batch_sizes: Sequence[int],
        default_batch_size: int,
        target_metric: float,
        max_epochs: int,
        higher_is_better: bool = True,
        eta: float = DEFAULT_ETA,
        beta: float = DEFAULT_BETA,
        window_size: int | None = None,
        max_tries: int | None = None,
        job_id: str | None = None,
        device: str = "auto",
        train_kwargs: Mapping[str, Any] | None = None,
        power_limit_mode: str = "optimize",
        power_limit_selector: str = "zeus",
        max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
        warmup_steps: int = DEFAULT_WARMUP_STEPS,
        profile_steps: int = DEFAULT_PROFILE_STEPS,
        seed: int | None = None,
        zeus_conn_id: str = DEFAULT_CONN_ID,
        traces_dir: str | None = None,
        heartbeat_s: float = 60.0,
        fail_on_missed_target: bool = False,
        fail_when_infeasible: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.train = train
        self.batch_sizes = batch_sizes
        self.default_batch_size = default_batch_size
        self.target_metric = target_metric
        self.max_epochs = max_epochs
        self.higher_is_better = higher_is_better
        self.eta = eta
        self.beta = beta
        self.window_size = window_size
        self.max_tries = max_tries
        self.job_id = job_id
        self.device = device
        self.train_kwargs = dict(train_kwargs or {})
        self.power_limit_mode = power_limit_mode
        self.power_limit_selector = power_limit_selector
        self.max_slowdown = max_slowdown
        self.warmup_steps = warmup_steps
        self.profile_steps = profile_steps
        self.seed = seed
        self.zeus_conn_id = zeus_conn_id
        self.traces_dir = traces_dir
        self.heartbeat_s = heartbeat_s
        self.fail_on_missed_target = fail_on_missed_target
        self.fail_when_infeasible = fail_when_infeasible
        self.zeus_summary = PENDING_SUMMARY
        self._guard: PowerLimitGuard | None = None
        self._validate()

    # --- parse time: checks only -------------------------------------------------------------
    def _validate(self) -> None:
        if not callable(self.train):
            raise ConfigError(f"train={self.train!r} is invalid: expected a function taking a "
                              "TrainingRun")
        if isinstance(self.batch_sizes, str) or not isinstance(self.batch_sizes, Sequence):
            raise ConfigError(f"batch_sizes={self.batch_sizes!r} is invalid: expected a list of "
                              "integers > 0")
        self.job_config(self.job_id or default_job_id(self.dag_id, self.task_id))
        if not (isinstance(self.device, str) and _is_template(self.device)):
            parse_device(self.device)
        if not (isinstance(self.heartbeat_s, int | float) and self.heartbeat_s > 0):
            raise ConfigError(f"heartbeat_s={self.heartbeat_s!r} is invalid: expected a number "
                              "of seconds > 0")
        if self.seed is not None and not (isinstance(self.seed, int)
                                          and not isinstance(self.seed, bool) and self.seed >= 0):
            raise ConfigError(f"seed={self.seed!r} is invalid: expected None or an integer >= 0")
        for name in ("fail_on_missed_target", "fail_when_infeasible"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: expected True or "
                                  "False")

    def job_config(self, job_id: str) -> JobConfig:
        """The core configuration; raises ConfigError naming the first bad parameter."""
        return JobConfig(
            job_id=job_id,
            batch_sizes=tuple(self.batch_sizes),
            default_batch_size=self.default_batch_size,
            target_metric=self.target_metric,
            max_epochs=self.max_epochs,
            higher_is_better=self.higher_is_better,
            eta=self.eta,
            beta=self.beta,
            window_size=self.window_size,
            max_tries=self.max_tries,
            profiler=ProfilerConfig(
                warmup_steps=self.warmup_steps, profile_steps=self.profile_steps,
                mode=cast(PowerLimitMode, self.power_limit_mode),
                selector=self.power_limit_selector, max_slowdown=self.max_slowdown),
        )

    # --- run time ----------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        # Imported here, not at module level, so that parsing a DAG stays light.
        from contextlib import closing

        from zeus_airflow.core.devices.spec import open_device
        from zeus_airflow.core.engine import Engine
        from zeus_airflow.core.gpu_lease import GPULeases, PowerLimitGuard
        from zeus_airflow.core.policy import ZeusPolicy
        from zeus_airflow.core.store.base import RecurrenceKey, UnrecordedResultError

        ti = context["ti"]
        config = self.job_config(self.job_id or default_job_id(self.dag_id, self.task_id))
        self.job_id = config.job_id  # shown resolved in the Rendered Templates tab
        spec = parse_device(self.device)
        store = self._open_store()  # fails here, before any GPU setting changes
        device = open_device(spec, self.traces_dir)
        key = RecurrenceKey(run_id=ti.run_id, dag_id=ti.dag_id, task_id=ti.task_id,
                            map_index=-1 if ti.map_index is None else ti.map_index,
                            try_number=ti.try_number)
        with closing(device), PowerLimitGuard(device, GPULeases(store.engine),
                                              self.log) as guard:
            self._guard = guard
            try:
                engine = Engine(store, guard.gpus, config,
                                ZeusPolicy(fallback=not self.fail_when_infeasible),
                                seed=self.seed, heartbeat_s=self.heartbeat_s,
                                # structlog's logger takes the stdlib calls the engine makes
                                log=cast(logging.Logger, self.log),
                                check_return=_xcom_check if self.do_xcom_push else None)
                result = engine.run_recurrence(self._train_function(), key)
            except UnrecordedResultError as err:
                self._publish_unrecorded(context, err, device.kind)
                raise
            finally:
                self._guard = None
        self._publish(context, result)
        if not result.reached_target:
            self._missed_target(result)
        return result.return_value

    def _missed_target(self, result: RecurrenceResult) -> None:
        """One rule every day: a run that trained but missed the target is a warning, unless
        the DAG asked for a failure."""
        final = result.final.outcome
        message = (f"the run ended without reaching target_metric={self.target_metric} "
                   f"(last metric {final.last_metric}, {final.stop_reason} after "
                   f"{final.epochs} epochs at batch size {final.batch_size})")
        if self.fail_on_missed_target:
            from zeus_airflow.core.run import TargetMissedError

            raise TargetMissedError(f"{message}; failing because fail_on_missed_target=True "
                                    "(the run is recorded)")
        self.log.warning("Zeus: %s; the task succeeds (set fail_on_missed_target=True to fail "
                         "it instead)", message)

    def on_kill(self) -> None:
        """Airflow is stopping the task (marked failed, SIGTERM): restore the limits now.

        On SIGTERM, Airflow calls this from a signal handler in the task's main thread and
        then lets training go on until it kills the process ~5 s later; raising here ends
        training at once, so the trial is recorded as failed and the lease is released.
        """
        guard = self._guard
        if guard is None:  # not training (a timeout has already unwound execute)
            return
        guard.restore("Airflow is stopping the task")
        raise AirflowTaskTerminated("stopped by Airflow (on_kill): power limits restored")

    # --- internals ---------------------------------------------------------------------------
    def _open_store(self) -> SQLStore:
        from zeus_airflow.hooks.store import ZeusStoreHook

        return ZeusStoreHook(zeus_conn_id=self.zeus_conn_id).get_store()

    def _train_function(self) -> Callable[[TrainingRun], Any]:
        return functools.partial(self.train, **self.train_kwargs) if self.train_kwargs \
            else self.train

    def _publish(self, context: Context, result: RecurrenceResult) -> None:
        from zeus_airflow.operators.summary import summary_line, xcom_values

        for key, value in xcom_values(result).items():
            context["ti"].xcom_push(key=key, value=value)
        self.zeus_summary = summary_line(result)
        self.log.info("Zeus: %s (job %s, %s phase)", self.zeus_summary, result.job.job_id,
                      result.final.phase)

    def _publish_unrecorded(self, context: Context, error: UnrecordedResultError,
                            kind: MeasurementKind) -> None:
        """The store lost the result: keep it in Airflow, then fail the task loudly."""
        from zeus_airflow.operators.summary import unrecorded_xcom_values

        for key, value in unrecorded_xcom_values(error.outcome, kind).items():
            context["ti"].xcom_push(key=key, value=value)
        self.zeus_summary = f"NOT RECORDED in the store: {error}"
        self.log.error("Zeus: %s", error)


def _xcom_check(value: Any) -> None:
    """Raises if Airflow's XCom backend cannot store the train function's return value, so
    that the try is judged before it is recorded as succeeded."""
    from airflow.sdk.execution_time.xcom import XCom

    XCom.serialize_value(value)


def _is_template(text: str) -> bool:
    return "{{" in text or "{%" in text

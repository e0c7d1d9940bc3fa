"""ZeusTrainOperator: a training task that learns its batch size and GPU power limit
(docs/operator.md: its use, an example and every parameter).

The operator is Airflow glue only: it validates its arguments when the DAG is parsed
(``operators/checks.py``, doing nothing else there), and at run time opens the store, then the
GPUs, defers through the carbon service (``core/carbon/service.py``) when asked to, hands one
recurrence to the engine, and publishes the result as XComs, a one-line summary and a link.
Power limits are put back on every exit path (``core/train/gpu_lease.py``: the one Airflow can't).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator

from zeus_airflow.airflow_compat import AirflowSkipException, AirflowTaskTerminated, OperatorPartial
from zeus_airflow.core.common.config import (
    DEFAULT_BETA,
    DEFAULT_CARBON_WEIGHT,
    DEFAULT_DRIFT_DETECTION,
    DEFAULT_ETA,
    DEFAULT_EXPLORATION_BUDGET,
    DEFAULT_FALLBACK_G_PER_KWH,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_PAYBACK_HORIZON,
    DEFAULT_PROFILE_S,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_WARMUP_S,
    DEFAULT_WARMUP_STEPS,
    JobConfig,
    check_kwargs,
    plain_numbers,
)
from zeus_airflow.core.devices.spec import parse_device
from zeus_airflow.integrations.mlflow import DEFAULT_BUDGET_S as DEFAULT_MLFLOW_BUDGET_S
from zeus_airflow.integrations.publishing import PublishesFigures
from zeus_airflow.operators import checks
from zeus_airflow.operators.instances import recurrence_key, resolve_job_id
from zeus_airflow.operators.links import ZeusJobLink
from zeus_airflow.operators.xcoms import OUTBOX_KEY

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from airflow.sdk import Context

    from zeus_airflow.core.carbon.planner import StartPlan
    from zeus_airflow.core.carbon.service import CarbonService
    from zeus_airflow.core.domain import RunCarbon
    from zeus_airflow.core.store.base import Store
    from zeus_airflow.core.train.engine import RecurrenceResult
    from zeus_airflow.core.train.gpu_lease import PowerLimitGuard
    from zeus_airflow.core.train.recording import Backlog

__all__ = ["OUTBOX_KEY", "ZeusTrainOperator"]

DEFAULT_CONN_ID = "zeus_default"
DEFAULT_CARBON_CONN_ID = "electricitymaps_default"
PENDING_SUMMARY = "(set when the task has run)"


class ZeusTrainOperator(PublishesFigures, BaseOperator):
    """Runs ``train(run, **train_kwargs)`` at the batch size and power limit Zeus chooses.

    ``train`` receives a :class:`~zeus_airflow.TrainingRun` and may return a
    JSON-serialisable value (pushed as ``return_value``). Every parameter, its default and
    what it allows are in docs/operator.md's parameter table (a test keeps the two in step);
    the templated ones are ``template_fields``.
    """

    template_fields: Sequence[str] = (*checks.TEMPLATED_STRINGS, "train_kwargs", "zeus_summary")
    template_fields_renderers: ClassVar[dict[str, str]] = {"train_kwargs": "json"}
    operator_extra_links = (ZeusJobLink(),)
    # The summary is set by execute(); re-sending the rendered fields afterwards puts it in
    # the task instance's Rendered Templates tab.
    overwrite_rtif_after_execution = True
    ui_color = "#d9f2d0"
    # The parameters the run time reads (each is set from the constructor's argument).
    train: Callable[..., Any]
    train_kwargs: dict[str, Any]
    job_id: str | None
    device: str
    zeus_conn_id: str
    carbon_conn_id: str
    traces_dir: str | None
    seed: int | None
    heartbeat_s: float
    target_metric: float
    fail_on_missed_target: bool
    fail_when_infeasible: bool
    shared_job: bool
    synchronize: Callable[[], Any] | None

    @checks.keeps_own_arguments
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
        drift_detection: bool = DEFAULT_DRIFT_DETECTION,
        max_tries: int | None = None,
        exploration_budget: float | None = DEFAULT_EXPLORATION_BUDGET,
        payback_horizon: int = DEFAULT_PAYBACK_HORIZON,
        job_id: str | None = None,
        device: str = "auto",
        train_kwargs: Mapping[str, Any] | None = None,
        power_limit_mode: str = "optimize",
        power_limit_selector: str = "zeus",
        max_slowdown: float = DEFAULT_MAX_SLOWDOWN,
        warmup_steps: int = DEFAULT_WARMUP_STEPS,
        profile_steps: int = DEFAULT_PROFILE_STEPS,
        warmup_s: float = DEFAULT_WARMUP_S,
        profile_s: float = DEFAULT_PROFILE_S,
        seed: int | None = None,
        zeus_conn_id: str = DEFAULT_CONN_ID,
        traces_dir: str | None = None,
        heartbeat_s: float = 60.0,
        fail_on_missed_target: bool = False,
        fail_when_infeasible: bool = False,
        shared_job: bool = False,
        carbon_zone: str | None = None,
        carbon_source: str | None = None,
        carbon_conn_id: str = DEFAULT_CARBON_CONN_ID,
        carbon_fallback_g_per_kwh: float | None = DEFAULT_FALLBACK_G_PER_KWH,
        start_deadline: str | float | timedelta | datetime | None = None,
        expected_duration: str | float | timedelta | None = None,
        carbon_objective: str = "emissions",
        carbon_weight: float = DEFAULT_CARBON_WEIGHT,
        synchronize: Callable[[], Any] | None = None,
        cost_includes_cpu: bool = False,
        mlflow_experiment: str | None = None,
        mlflow_budget_s: float = DEFAULT_MLFLOW_BUDGET_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.train_kwargs = check_kwargs("train_kwargs", train_kwargs)
        self.zeus_summary = PENDING_SUMMARY
        self._guard: PowerLimitGuard | None = None
        checks.check_operator(vars(self), self.dag_id, self.task_id)
        checks.check_returned_keys(self.train, self.multiple_outputs)
        for name in checks.OPERATOR_CHECKS:  # numpy's or Decimal numbers kept as Python's
            setattr(self, name, plain_numbers(getattr(self, name)))

    # --- parse time: checks only (operators/checks.py) ---------------------------------------
    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """``.partial(...)``, with the constructor's parse-time checks: Airflow calls
        ``__init__`` only when a mapped instance runs, so arguments given here are checked
        one by one, and as a whole job once every job field is known (here or in
        ``expand``, which the returned partial checks too)."""
        made = super().partial(**checks.checked_partial_kwargs(cls, kwargs))
        return checks.CheckedPartial.of(made)

    def job_config(self, job_id: str) -> JobConfig:
        """The core configuration; raises ConfigError naming the first bad parameter."""
        return checks.job_config(vars(self), job_id)

    # --- run time ----------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        config = self._rendered_config(context)
        carbon = self._carbon_service()
        plan = None if carbon is None else carbon.plan(self._open_store, config.job_id)
        if plan is not None and plan.delay_s > 0:
            from zeus_airflow.operators.start_trigger import PlannedStartTrigger

            self.log.info(
                "Zeus: deferring the start until %s, the worker slot free meanwhile: %s",
                plan.start_at.isoformat(),
                plan.reason,
            )
            self.defer(
                trigger=PlannedStartTrigger(plan.start_at, plan.to_json()),
                method_name="execute_planned",
                kwargs={"plan": plan.to_json()},
            )
        if plan is not None:
            self.log.info("Zeus: carbon-aware start: %s", plan.reason)
        return self._train_and_publish(context, config, carbon, plan)

    def execute_planned(self, context: Context, event: Any = None, plan: str | None = None) -> Any:
        """Resumed by the triggerer at the chosen start: train now. The plan comes back in the
        deferral's kwargs or, where those were replaced, in the trigger's event."""
        from zeus_airflow.core.carbon.planner import StartPlan

        sent = plan or (event if isinstance(event, str) else None)
        chosen = StartPlan.from_json(sent) if sent else None
        config = self._rendered_config(context)
        if chosen is not None:
            self.log.info(
                "Zeus: starting at the chosen time %s, deferred %.0f s: %s",
                chosen.start_at.isoformat(),
                chosen.delay_s,
                chosen.reason,
            )
        return self._train_and_publish(context, config, self._carbon_service(), chosen)

    def _rendered_config(self, context: Context) -> JobConfig:
        """The job's configuration as rendered, its templated strings checked first, before the
        store or a GPU is touched: one rendered to '' or a NUL byte is refused by name."""
        checks.check_arguments({name: getattr(self, name) for name in checks.TEMPLATED_STRINGS})
        config = self.job_config(resolve_job_id(self, context))
        self.job_id = config.job_id  # shown resolved in the Rendered Templates tab
        self.carbon_source = checks.carbon_source_of(vars(self))  # None: no zone, none used
        return config

    def _train_and_publish(
        self,
        context: Context,
        config: JobConfig,
        carbon: CarbonService | None,
        plan: StartPlan | None,
    ) -> Any:
        # Imported here, not at module level, so that parsing a DAG stays light.
        from zeus_airflow.core.train.recording import Backlog, missed_target
        from zeus_airflow.operators.instances import warn_if_instances_share_the_job
        from zeus_airflow.operators.xcoms import earlier_outbox, keep_outbox, push_own_outputs

        ti, log = context["ti"], cast(logging.Logger, self.log)  # structlog takes stdlib calls
        store = self._open_store()  # fails here, before any GPU setting changes
        # Looked up only when a result may wait: a first run has no outbox to read.
        waiting = store.awaits_late_results(config.job_id, recurrence_key(ti))
        pending, refused = earlier_outbox(ti, log) if waiting else ([], [])
        backlog = Backlog(store, pending, log, refused)
        # Read and checked before training: a bad trace is said now, never after training.
        source = None if carbon is None else carbon.checked_source()
        try:
            # MLflow's run of mlflow_experiment; a failed run's figures (integrations/)
            with self._training_published(context, store, config.job_id):
                result, control = self._train(context, config, store, backlog)
        finally:
            # What the store still cannot take is pushed, even when training failed, for the
            # next run to record (and the try's carbon figures find its span).
            keep_outbox(ti, backlog.settle(), log, backlog.refused)
        result = replace(result, unrecorded=tuple(backlog.unrecorded))
        footprint = None
        if carbon is not None and source is not None:
            footprint = carbon.account(store, recurrence_key(ti), result, source, plan)
        warn_if_instances_share_the_job(store, ti, config.job_id, self.shared_job, log)
        self._publish(context, result, footprint, control)
        self._publish_elsewhere(context, store, result, footprint, control)  # integrations/
        # Read by Airflow once execute returns: a returned dict never takes Zeus's keys.
        self.multiple_outputs = push_own_outputs(
            ti, result.return_value, self.multiple_outputs, log
        )
        if not result.reached_target:
            missed_target(result, self.target_metric, self.fail_on_missed_target, log)
        return result.return_value

    def _train(
        self, context: Context, config: JobConfig, store: Store, backlog: Backlog
    ) -> tuple[RecurrenceResult, str | None]:
        """One recurrence on the task's GPUs, their limits put back whatever happens, and
        how their limits could be changed (``summary.power_control``); the backlog gets the
        results the store could not take."""
        from zeus_airflow.core.decide.policy import ZeusPolicy
        from zeus_airflow.core.devices.spec import open_device, open_host_energy
        from zeus_airflow.core.train.engine import Engine
        from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
        from zeus_airflow.operators.summary import power_control
        from zeus_airflow.operators.xcoms import xcom_check

        device = open_device(parse_device(self.device), self.traces_dir)
        # The host's CPU package and DRAM where readable, beside real GPUs only: a replayed or
        # simulated GPU's clock is not the host's, so their sum would mean nothing.
        host_energy = open_host_energy(device)
        with (
            closing(device),
            closing(host_energy) if host_energy else nullcontext(),
            PowerLimitGuard(device, GPULeases(store), self.log) as guard,
        ):
            self._guard = guard
            try:
                engine = Engine(
                    store,
                    guard.gpus,
                    config,
                    ZeusPolicy(fallback=not self.fail_when_infeasible),
                    seed=self.seed,
                    heartbeat_s=self.heartbeat_s,
                    log=cast(logging.Logger, self.log),
                    check_return=xcom_check if self.do_xcom_push else None,
                    synchronize=self.synchronize,
                    host_energy=host_energy,
                    skip_errors=(AirflowSkipException,),
                )
                try:
                    key = recurrence_key(context["ti"])
                    result = engine.run_recurrence(self._train_function(), key)
                    # Read before leaving the guard, which freezes the limits.
                    return result, power_control(guard.gpus)
                finally:  # an invalid try's measurement too, when the store failed
                    backlog.unrecorded += engine.unrecorded
            finally:
                self._guard = None

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
    def _carbon_service(self) -> CarbonService | None:
        """The carbon service for the rendered options; None without ``carbon_zone``."""
        options = checks.carbon_options(vars(self))
        if options is None:
            return None
        from zeus_airflow.hooks.carbon import carbon_service

        return carbon_service(options, self.carbon_conn_id, cast(logging.Logger, self.log))

    def _open_store(self) -> Store:
        from zeus_airflow.hooks.store import ZeusStoreHook

        return ZeusStoreHook(zeus_conn_id=self.zeus_conn_id).get_store()

    def _train_function(self) -> Callable[..., Any]:
        train, kwargs = self.train, self.train_kwargs
        return functools.partial(train, **kwargs) if kwargs else train

    def _publish(
        self,
        context: Context,
        result: RecurrenceResult,
        footprint: RunCarbon | None = None,
        control: str | None = None,
    ) -> None:
        from zeus_airflow.operators.xcoms import publish

        self.zeus_summary = publish(context["ti"], result, footprint, control, self.log)

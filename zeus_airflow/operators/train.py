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

import dataclasses
import functools
import inspect
import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator

from zeus_airflow.airflow_compat import (
    AirflowSkipException,
    AirflowTaskTerminated,
    OperatorPartial,
    ResolveMixin,
)
from zeus_airflow.core.config import (
    DEFAULT_BETA,
    DEFAULT_CARBON_SOURCE,
    DEFAULT_CARBON_WEIGHT,
    DEFAULT_DRIFT_DETECTION,
    DEFAULT_ETA,
    DEFAULT_EXPLORATION_BUDGET,
    DEFAULT_FALLBACK_G_PER_KWH,
    DEFAULT_MAX_SLOWDOWN,
    DEFAULT_PROFILE_S,
    DEFAULT_PROFILE_STEPS,
    DEFAULT_WARMUP_S,
    DEFAULT_WARMUP_STEPS,
    PARAMETER_CHECKS,
    ConfigError,
    JobConfig,
    PowerLimitMode,
    ProfilerConfig,
    check_bool,
    check_job_id,
    check_kwargs,
    is_blank,
    plain_numbers,
)
from zeus_airflow.core.devices.spec import parse_device
from zeus_airflow.operators.links import ZeusJobLink
from zeus_airflow.operators.naming import UNMAPPED, default_job_id, map_label

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from airflow.sdk import Context

    from zeus_airflow.core.carbon.options import CarbonOptions
    from zeus_airflow.core.carbon.planner import StartPlan
    from zeus_airflow.core.devices.spec import DeviceSpec
    from zeus_airflow.core.domain import PendingResult, RunCarbon
    from zeus_airflow.core.engine import RecurrenceResult
    from zeus_airflow.core.gpu_lease import PowerLimitGuard
    from zeus_airflow.core.run import TrainingRun
    from zeus_airflow.core.store.sql import SQLStore

DEFAULT_CONN_ID = "zeus_default"
DEFAULT_CARBON_CONN_ID = "electricitymaps_default"
PENDING_SUMMARY = "(set when the task has run)"
OUTBOX_KEY = "zeus_outbox"
"""The XCom every run pushes: the results the store could not take (core/domain/outbox.py),
its own and those it could not record either; the next run of the task records them."""


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
    :param drift_detection: look for a change point in each batch size's costs and forget
        what came before it (data drift; docs/drift.md).
    :param max_tries: tries within one task run when batch sizes fail (default: one per batch
        size, plus a last run of the cheapest without the early-stop bound).
    :param exploration_budget: the job's cumulative cost stays within ``1 +`` this fraction
        of what the Default configuration (``default_batch_size`` at the maximum power limit)
        would have cost over the same runs: a size is explored only when a pessimistic
        estimate of its cost fits, else the best known one runs (phase ``exploit``). None
        explores as the paper does, without a budget.
    :param job_id: the job's name in the store (default ``<dag_id>.<task_id>``, and
        ``<dag_id>.<task_id>[<label>]`` for each mapped instance). Templated.
    :param device: ``auto`` (the NVIDIA GPUs the task sees; through zeusd, NVIDIA or AMD,
        where ``ZEUSD_SOCK_PATH``/``ZEUSD_HOST_PORT`` is set), ``nvml:<i>,<j>``,
        ``zeusd:<i>,<j>``, ``replay:<gpu>:<workload>`` or ``simulated:<gpu>[:<workload>]``.
        Templated.
    :param train_kwargs: extra keyword arguments for ``train``. Templated (e.g. ``{{ ds }}``).
    :param power_limit_mode: ``optimize``, ``observe`` or ``measure`` (never change limits).
    :param power_limit_selector: ``zeus``, ``min-energy``, ``min-time`` or
        ``min-energy-within-slowdown`` (with ``max_slowdown``).
    :param warmup_steps: at least this many steps run at each profiled limit before
        measuring.
    :param profile_steps: at least this many steps measured at each profiled limit.
    :param warmup_s: and at least this many seconds (the device's clock) of warm-up at each
        profiled limit.
    :param profile_s: and at least this many seconds (the device's clock) measured at each
        profiled limit.
    :param seed: seed of the job's random decisions (set once, when the job is created).
    :param zeus_conn_id: Airflow connection of the store (falls back to
        ``$ZEUS_AIRFLOW_DB_URL``, then an SQLite file under ``$AIRFLOW_HOME``). Templated.
    :param traces_dir: the paper's traces, for replay and simulated devices (default
        ``$ZEUS_TRACES_DIR``, else the V100 and A40 traces shipped in the package). Templated.
    :param heartbeat_s: how often the running trial tells the store it is alive, in s; a
        trial not heard from for three intervals has lost its worker and expires.
    :param fail_on_missed_target: fail the task when its run ends without reaching
        ``target_metric`` (default: a warning, ``reached_target=False``, the task succeeds,
        as a plain training task that returns would).
    :param fail_when_infeasible: fail the task, before training, when no batch size is left
        to try (default: train the best known size as it would run without Zeus).
    :param shared_job: the instances of this mapped task feed one job on purpose (one
        ``job_id`` for all): no warning that they share it. Without it, the first time a
        second instance feeds a job, its log says so once.
    :param carbon_zone: grid zone (e.g. ``DE``) whose carbon intensity and price the run's
        emissions (gCO2e) and energy cost are computed with; None: no carbon accounting.
        Templated.
    :param carbon_source: ``electricitymaps`` (the API, token in ``carbon_conn_id``),
        ``fixed:<gCO2e/kWh>[:<price/MWh>]`` or ``csv:<path>`` (an hourly trace, or an
        Electricity Maps export). Templated.
    :param carbon_conn_id: Airflow connection holding the Electricity Maps token. Templated.
    :param carbon_fallback_g_per_kwh: intensity used when the source fails (recorded with
        provenance ``fallback``); None: no figure then.
    :param start_deadline: carbon-aware start: the run must finish by then. A duration after
        the task starts (``"8h"``, seconds, a timedelta) or a date and time (a template such as
        ``"{{ data_interval_end.add(hours=8) }}"``). The task defers (freeing its worker slot)
        until the start that minimises ``carbon_objective``. Needs ``carbon_zone``. Templated.
    :param expected_duration: a run's duration, guessed, used while the job has no finished
        run (after that, its history says how long the configuration it chooses takes).
    :param carbon_objective: what the start minimises: ``emissions``, ``cost`` or ``mix``.
    :param carbon_weight: in ``mix``, the share of emissions (the rest is cost), in [0, 1].
    :param cost_includes_cpu: count the host's CPU package and DRAM energy (RAPL, where
        readable) in the cost; by default they are reported beside the GPUs', not optimised.
    :param synchronize: waits for the GPUs' queued work at every measurement window's edge;
        None: PyTorch's ``torch.cuda.synchronize`` on the task's GPUs once PyTorch has
        initialised CUDA. Pass your framework's own (e.g. ``jax.effects_barrier``).
    """

    template_fields: Sequence[str] = (
        "job_id",
        "device",
        "train_kwargs",
        "zeus_conn_id",
        "traces_dir",
        "carbon_zone",
        "carbon_source",
        "carbon_conn_id",
        "start_deadline",
        "zeus_summary",
    )
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
        drift_detection: bool = DEFAULT_DRIFT_DETECTION,
        max_tries: int | None = None,
        exploration_budget: float | None = DEFAULT_EXPLORATION_BUDGET,
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
        carbon_source: str = DEFAULT_CARBON_SOURCE,
        carbon_conn_id: str = DEFAULT_CARBON_CONN_ID,
        carbon_fallback_g_per_kwh: float | None = DEFAULT_FALLBACK_G_PER_KWH,
        start_deadline: str | float | timedelta | datetime | None = None,
        expected_duration: str | float | timedelta | None = None,
        carbon_objective: str = "emissions",
        carbon_weight: float = DEFAULT_CARBON_WEIGHT,
        synchronize: Callable[[], Any] | None = None,
        cost_includes_cpu: bool = False,
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
        self.drift_detection = drift_detection
        self.max_tries = max_tries
        self.exploration_budget = exploration_budget
        self.job_id = job_id
        self.device = device
        self.train_kwargs = check_kwargs("train_kwargs", train_kwargs)
        self.power_limit_mode = power_limit_mode
        self.power_limit_selector = power_limit_selector
        self.max_slowdown = max_slowdown
        self.warmup_steps = warmup_steps
        self.profile_steps = profile_steps
        self.warmup_s = warmup_s
        self.profile_s = profile_s
        self.seed = seed
        self.zeus_conn_id = zeus_conn_id
        self.traces_dir = traces_dir
        self.heartbeat_s = heartbeat_s
        self.fail_on_missed_target = fail_on_missed_target
        self.fail_when_infeasible = fail_when_infeasible
        self.shared_job = shared_job
        self.carbon_zone = carbon_zone
        self.carbon_source = carbon_source
        self.carbon_conn_id = carbon_conn_id
        self.carbon_fallback_g_per_kwh = carbon_fallback_g_per_kwh
        self.start_deadline = start_deadline
        self.expected_duration = expected_duration
        self.carbon_objective = carbon_objective
        self.carbon_weight = carbon_weight
        self.synchronize = synchronize
        self.cost_includes_cpu = cost_includes_cpu
        self.zeus_summary = PENDING_SUMMARY
        self._guard: PowerLimitGuard | None = None
        self._validate()
        for name in _OPERATOR_CHECKS:  # numpy's or Decimal numbers kept as Python's
            setattr(self, name, plain_numbers(getattr(self, name)))

    # --- parse time: checks only -------------------------------------------------------------
    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """``.partial(...)``, with the constructor's parse-time checks.

        Airflow's mapped operators call ``__init__`` only when a mapped instance runs, so
        without this a bad argument given to ``partial()`` would pass parsing and fail every
        mapped instance at run time. Arguments given here are checked one by one, and as a
        whole job configuration once every job field is known (here or in ``expand``).
        """
        _check_arguments(kwargs)
        _check_job(kwargs)
        kwargs = {
            name: plain_numbers(value) if name in _OPERATOR_CHECKS else value
            for name, value in kwargs.items()
        }
        made = super().partial(**kwargs)
        checked = _CheckedPartial(
            operator_class=made.operator_class, kwargs=made.kwargs, params=made.params
        )
        made._expand_called = True  # replaced by ``checked``: no "never mapped" warning
        return checked

    def _validate(self) -> None:
        # Attributes carry the parameters' names and (templates unrendered) values.
        _check_arguments({name: getattr(self, name) for name in _OPERATOR_CHECKS})
        _check_carbon(vars(self))
        if self.job_id is not None:
            job_id = _PLACEHOLDER_JOB_ID if _is_template_value(self.job_id) else self.job_id
        else:
            job_id = default_job_id(self.dag_id, self.task_id)
            try:
                check_job_id(job_id)
            except ConfigError as err:
                raise ConfigError(
                    f"{err}; it is the default (<dag_id>.<task_id>): pass a shorter job_id"
                ) from None
        self.job_config(job_id)  # the checks across parameters (default_batch_size...)

    def job_config(self, job_id: str) -> JobConfig:
        """The core configuration; raises ConfigError naming the first bad parameter."""
        return _job_config(vars(self), job_id)

    # --- run time ----------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        self._check_rendered()
        config = self.job_config(self._resolve_job_id(context))
        self.job_id = config.job_id  # shown resolved in the Rendered Templates tab
        carbon = self._carbon_options()
        plan = None
        if carbon is not None and carbon.start_deadline is not None:
            plan = self._plan_start(carbon, config.job_id)
            if plan.delay_s > 0:
                from airflow.providers.standard.triggers.temporal import DateTimeTrigger

                self.log.info(
                    "Zeus: deferring the start until %s, the worker slot free meanwhile: %s",
                    plan.start_at.isoformat(),
                    plan.reason,
                )
                self.defer(
                    trigger=DateTimeTrigger(moment=plan.start_at),
                    method_name="execute_planned",
                    kwargs={"plan": plan.to_json()},
                )
            self.log.info("Zeus: carbon-aware start: %s", plan.reason)
        return self._train_and_publish(context, config, carbon, plan)

    def execute_planned(self, context: Context, event: Any = None, plan: str | None = None) -> Any:
        """Resumed by the triggerer at the chosen start: train now."""
        from zeus_airflow.core.carbon.planner import StartPlan

        chosen = StartPlan.from_json(plan) if plan else None
        self._check_rendered()
        config = self.job_config(self._resolve_job_id(context))
        self.job_id = config.job_id
        if chosen is not None:
            self.log.info(
                "Zeus: starting at the chosen time %s, deferred %.0f s: %s",
                chosen.start_at.isoformat(),
                chosen.delay_s,
                chosen.reason,
            )
        return self._train_and_publish(context, config, self._carbon_options(), chosen)

    def _train_and_publish(
        self,
        context: Context,
        config: JobConfig,
        carbon: CarbonOptions | None,
        plan: StartPlan | None,
    ) -> Any:
        # Imported here, not at module level, so that parsing a DAG stays light.
        from zeus_airflow.core.engine import record_late

        spec = parse_device(self.device)
        store = self._open_store()  # fails here, before any GPU setting changes
        log = cast(logging.Logger, self.log)  # structlog's logger takes the stdlib calls
        backlog = record_late(store, self._outbox_of_earlier_runs(context), log)
        # Read and checked before training: a bad trace is said now, never after training.
        grid = None if carbon is None else self._checked_grid(carbon)
        unrecorded: list[PendingResult] = []
        try:
            result, control = self._train(context, config, store, spec, unrecorded)
        finally:
            # Once more now: an outage shorter than the rest of the task leaves nothing behind
            # (and the try's carbon figures find its span). What still fails is pushed, even
            # when training failed, for the next run to record.
            unrecorded[:] = record_late(store, unrecorded, log)
            self._keep_outbox(context, [*backlog, *unrecorded])
        result = dataclasses.replace(result, unrecorded=tuple(unrecorded))
        footprint = None if carbon is None else self._account(carbon, grid, plan, result, store)
        self._warn_if_instances_share_the_job(store, context, config.job_id)
        self._publish(context, result, footprint, control)
        if not result.reached_target:
            self._missed_target(result)
        return result.return_value

    def _train(
        self,
        context: Context,
        config: JobConfig,
        store: SQLStore,
        spec: DeviceSpec,
        unrecorded: list[PendingResult],
    ) -> tuple[RecurrenceResult, str | None]:
        """One recurrence on the task's GPUs, their limits put back whatever happens, and
        how their limits could be changed (``summary.power_control``); ``unrecorded`` gets
        the results the store could not take."""
        from contextlib import closing, nullcontext

        from zeus_airflow.core.devices.spec import open_device, open_host_energy
        from zeus_airflow.core.engine import Engine
        from zeus_airflow.core.gpu_lease import GPULeases, PowerLimitGuard
        from zeus_airflow.core.policy import ZeusPolicy
        from zeus_airflow.core.store.base import RecurrenceKey
        from zeus_airflow.operators.summary import power_control

        ti = context["ti"]
        device = open_device(spec, self.traces_dir)
        # The host's CPU package and DRAM where readable, beside real GPUs only: a replayed or
        # simulated GPU's clock is not the host's, so their sum would mean nothing.
        host_energy = open_host_energy(device)
        key = RecurrenceKey(
            run_id=ti.run_id,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            map_index=-1 if ti.map_index is None else ti.map_index,
            try_number=ti.try_number,
        )
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
                    # structlog's logger takes the stdlib calls the engine makes
                    log=cast(logging.Logger, self.log),
                    check_return=_xcom_check if self.do_xcom_push else None,
                    synchronize=self.synchronize,
                    host_energy=host_energy,
                    skip_errors=(AirflowSkipException,),
                )
                try:
                    result = engine.run_recurrence(self._train_function(), key)
                    # Read before leaving the guard, which freezes the limits.
                    return result, power_control(guard.gpus)
                finally:  # an invalid try's measurement too, when the store failed
                    unrecorded += engine.unrecorded
            finally:
                self._guard = None

    # --- the outbox --------------------------------------------------------------------------
    def _outbox_of_earlier_runs(self, context: Context) -> list[PendingResult]:
        """The latest earlier run's outbox (each run carries on what it could not record).
        Unreadable: nothing, said, never a failed task."""
        from zeus_airflow.core.domain import outbox_from_json

        ti = context["ti"]
        try:
            value = ti.xcom_pull(
                task_ids=ti.task_id,
                key=OUTBOX_KEY,
                include_prior_dates=True,
                map_indexes=UNMAPPED if ti.map_index is None else ti.map_index,
            )
            return outbox_from_json(value)
        except Exception as err:  # a value someone else wrote there, an XCom backend's error
            self.log.warning(
                "Zeus: the outbox of earlier runs (XCom %r) cannot be read, its "
                "results stay unrecorded: %s: %s",
                OUTBOX_KEY,
                type(err).__name__,
                err,
            )
            return []

    def _keep_outbox(self, context: Context, pending: list[PendingResult]) -> None:
        from zeus_airflow.core.domain import outbox_to_json

        if pending:
            self.log.warning(
                "Zeus: %d result(s) not in the store yet are kept in the XCom %r; "
                "the next run of this task records them (trials %s)",
                len(pending),
                OUTBOX_KEY,
                [p.trial_id for p in pending],
            )
        try:
            context["ti"].xcom_push(key=OUTBOX_KEY, value=outbox_to_json(pending))
        except Exception as err:  # the first rule: the model is trained; say what is lost
            self.log.error(
                "Zeus: the outbox cannot be kept (%s: %s); results NOT in the store: %s",
                type(err).__name__,
                err,
                outbox_to_json(pending),
            )

    # --- carbon ------------------------------------------------------------------------------
    def _carbon_options(self) -> CarbonOptions | None:
        """The rendered carbon options; None without ``carbon_zone``."""
        _check_carbon(vars(self))
        if self.carbon_zone is None:
            return None
        from zeus_airflow.core.carbon.options import CarbonOptions

        return CarbonOptions(
            self.carbon_zone,
            self.carbon_source,
            self.carbon_fallback_g_per_kwh,
            self.carbon_objective,
            self.carbon_weight,
            self.start_deadline,
            self.expected_duration,
        )

    def _grid(self, carbon: CarbonOptions) -> Any:
        def electricitymaps() -> Any:
            from zeus_airflow.hooks.carbon import ElectricityMapsHook

            return ElectricityMapsHook(self.carbon_conn_id).get_conn()

        return carbon.grid_source(electricitymaps)

    def _plan_start(self, carbon: CarbonOptions, job_id: str) -> StartPlan:
        """When to start, from the job's history and the forecast. Any failure here starts
        the run now, saying why: waiting is an optimisation, never a reason not to train."""
        from datetime import UTC, datetime

        from zeus_airflow.core.carbon.planner import start_now

        now = datetime.now(UTC)
        deadline = carbon.deadline(now)
        assert deadline is not None
        try:
            return self._plan(carbon, job_id, now, deadline)
        except Exception as err:  # the first rule: whatever broke, the run still trains
            self.log.warning("Zeus: the start could not be planned, starting now", exc_info=True)
            return start_now(
                now,
                f"the start could not be planned ({type(err).__name__}: {err}): starting now",
                deadline,
            )

    def _plan(
        self, carbon: CarbonOptions, job_id: str, now: datetime, deadline: datetime
    ) -> StartPlan:
        from zeus_airflow.core.carbon.expected import expected_run
        from zeus_airflow.core.carbon.planner import plan_start, start_now
        from zeus_airflow.core.carbon.signal import SourceError

        with self._open_store().reader() as reader:
            expected = expected_run(reader, job_id, carbon.expected_duration_s)
        if expected is None:
            return start_now(
                now,
                "the job has no finished run yet and no expected_duration was given: starting now",
                deadline,
            )
        try:
            forecast = self._grid(carbon).points(carbon.zone, now, deadline)
        except SourceError as err:
            return start_now(now, f"no forecast ({err}): starting now", deadline, expected)
        return plan_start(
            now, deadline, expected, forecast, cast("Any", carbon.objective), carbon.weight
        )

    def _checked_grid(self, carbon: CarbonOptions) -> Any:
        """The carbon source, or the error that stands for it (the run's figures then fall
        back, labelled ``fallback``): any failure is a warning, never a failed task."""
        from zeus_airflow.core.carbon.signal import SourceError

        try:
            return self._grid(carbon)
        except Exception as err:  # any source's error: the first rule
            fallback = carbon.fallback_g_per_kwh
            self.log.warning(
                "Zeus: the carbon source %r cannot be used (%s); the run's carbon "
                "figures fall back to %s",
                carbon.source,
                err,
                "no figure"
                if fallback is None
                else f"{fallback:g} gCO2e/kWh (provenance fallback)",
            )
            return (
                err if isinstance(err, SourceError) else SourceError(f"{type(err).__name__}: {err}")
            )

    def _account(
        self,
        carbon: CarbonOptions,
        grid: Any,
        plan: StartPlan | None,
        result: RecurrenceResult,
        store: SQLStore,
    ) -> RunCarbon:
        """Each try's emissions over its own span, recorded with it; the run's, returned.
        ``grid``: the source checked before training, or the error standing for it. A failing
        source falls back, saying so; a failure to record them is a warning (the measured run
        is recorded already, or waits in the outbox)."""
        from zeus_airflow.core.carbon.recurrence import TrySpan, account
        from zeus_airflow.core.carbon.signal import SourceError
        from zeus_airflow.core.store.base import StoreError

        try:
            spans = store.trial_spans([t.trial_id for t in result.tries])
        except StoreError as err:
            self.log.warning("Zeus: the tries' spans cannot be read, no carbon figures: %s", err)
            spans = {}
        # A try the store could not take: the span the worker saw (its clock).
        spans |= {
            p.trial_id: (p.started_at, p.finished_at)
            for p in result.unrecorded
            if p.started_at is not None and p.trial_id not in spans
        }
        tries = [
            TrySpan(t.trial_id, t.outcome.energy_j + t.outcome.setup_energy_j, *spans[t.trial_id])
            for t in result.tries
            if t.trial_id in spans
        ]
        try:
            run, per_try = account(grid, carbon.zone, tries, carbon.fallback, plan)
        except Exception as err:  # a source that broke mid-way: the first rule, fall back
            self.log.warning(
                "Zeus: the carbon figures cannot be computed from the source: %s: %s",
                type(err).__name__,
                err,
            )
            run, per_try = account(
                SourceError(f"{type(err).__name__}: {err}"),
                carbon.zone,
                tries,
                carbon.fallback,
                plan,
            )
        if run.provenance == "fallback":
            self.log.warning(
                "Zeus: the run's carbon intensity fell back to %.4g gCO2e/kWh: %s",
                run.intensity_g_per_kwh,
                run.note,
            )
        try:
            store.record_carbon(per_try)
        except StoreError as err:
            self.log.warning(
                "Zeus: the carbon figures are in the XComs but not in the store: %s", err
            )
        return run

    def _missed_target(self, result: RecurrenceResult) -> None:
        """One rule every day: a run that trained but missed the target is a warning, unless
        the DAG asked for a failure."""
        final = result.final.outcome
        message = (
            f"the run ended without reaching target_metric={self.target_metric} "
            f"(last metric {final.last_metric}, {final.stop_reason} after "
            f"{final.epochs} epochs at batch size {final.batch_size})"
        )
        if self.fail_on_missed_target:
            from zeus_airflow.core.run import TargetMissedError

            raise TargetMissedError(
                f"{message}; failing because fail_on_missed_target=True (the run is recorded)"
            )
        self.log.warning(
            "Zeus: %s; the task succeeds (set fail_on_missed_target=True to fail it instead)",
            message,
        )

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
    def _check_rendered(self) -> None:
        """The templated strings as rendered, checked as at parse time, before the store or
        a GPU is touched: a template that renders to '' (or a NUL byte) is refused naming
        its parameter, never read as "not given" (the default job or store)."""
        _check_arguments({name: getattr(self, name) for name in _TEMPLATED_STRINGS})

    def _resolve_job_id(self, context: Context) -> str:
        """The job this task instance feeds: ``job_id`` when given (rendered by now), else
        the task's default, one job per mapped instance."""
        if self.job_id is not None:
            return check_job_id(self.job_id)
        map_index = context["ti"].map_index
        label = map_label(map_index, self._rendered_map_index(context, map_index))
        return default_job_id(self.dag_id, self.task_id, label)

    def _rendered_map_index(self, context: Context, map_index: int | None) -> str | None:
        """The instance's ``map_index_template``, rendered as Airflow's task runner renders it
        (``_render_map_index``). Airflow's final rendering comes after execute, too late to
        name the job that training feeds, so it is rendered here from what the task knows
        before training (its rendered arguments, the run's context)."""
        template = context.get("map_index_template")
        if template is None or map_index is None or map_index == UNMAPPED:
            return None
        try:
            return self.dag.get_template_env().from_string(template).render(context)
        except Exception as err:  # any error of the template: Airflow tolerates it here too
            self.log.warning(
                "Zeus: map_index_template %r cannot be rendered before training (%s: %s), so "
                "this instance's job is named by its map index %d. A template that reads "
                "only the task's arguments (e.g. {{ task.train_kwargs['region'] }}) names "
                "the job as the UI names the instance.",
                template,
                type(err).__name__,
                err,
                map_index,
            )
            return None

    def _warn_if_instances_share_the_job(
        self, store: SQLStore, context: Context, job_id: str
    ) -> None:
        """A mapped task whose instances feed one job (one job_id for all, or a
        map_index_template that renders alike) trains one bandit on every instance's data.
        Allowed, and meant with ``shared_job=True``; otherwise likely a mistake, said once
        in the job's life, by the second instance to have fed it, after its run (its trial
        is in the store then, whether the instances ran one after another or at once).
        Every instance saying so on every run would fill a wide map's logs."""
        ti = context["ti"]
        if self.shared_job or ti.map_index is None or ti.map_index == UNMAPPED:
            return
        try:
            with store.reader() as reader:
                joined = reader.job_instances(job_id, ti.dag_id, ti.task_id)
            first_run = joined[1:2] == [ti.map_index] and _first_run_in(store, job_id, ti)
        except Exception as err:  # after training: a store fault must not fail the task
            self.log.warning(
                "Zeus: cannot check whether mapped instances share job %r: %s: %s",
                job_id,
                type(err).__name__,
                err,
            )
            return
        if first_run:
            self.log.warning(
                "Zeus: mapped instances %s and %d of task %s share one job, %r. For a job "
                "per instance leave job_id unset; if sharing is meant, set shared_job=True.",
                joined[0],
                ti.map_index,
                ti.task_id,
                job_id,
            )

    def _open_store(self) -> SQLStore:
        from zeus_airflow.hooks.store import ZeusStoreHook

        return ZeusStoreHook(zeus_conn_id=self.zeus_conn_id).get_store()

    def _train_function(self) -> Callable[[TrainingRun], Any]:
        return (
            functools.partial(self.train, **self.train_kwargs) if self.train_kwargs else self.train
        )

    def _publish(
        self,
        context: Context,
        result: RecurrenceResult,
        footprint: RunCarbon | None = None,
        control: str | None = None,
    ) -> None:
        from zeus_airflow.operators.metrics import emit_run_metrics
        from zeus_airflow.operators.summary import carbon_xcom_values, summary_line, xcom_values

        ti = context["ti"]
        values = xcom_values(result, control)
        if footprint is not None:
            values.update(carbon_xcom_values(footprint))
        for key, value in values.items():
            ti.xcom_push(key=key, value=value)
        self.zeus_summary = summary_line(result, footprint, control)
        self.log.info(
            "Zeus: %s (job %s, %s phase)", self.zeus_summary, result.job.job_id, result.final.phase
        )
        emit_run_metrics(result, dag_id=ti.dag_id, task_id=ti.task_id, log=self.log)


def _xcom_check(value: Any) -> None:
    """Raises if Airflow's XCom backend cannot store the train function's return value, so
    that the try is judged before it is recorded as succeeded."""
    from airflow.sdk.execution_time.xcom import XCom

    XCom.serialize_value(value)


def _is_template(text: str) -> bool:
    return "{{" in text or "{%" in text


# --- parse-time checks shared by the constructor, partial() and expand() -----------------------
_PLACEHOLDER_JOB_ID = "templated-job-id"
"""Stands for a templated job_id in the checks across parameters (rendered only at run time)."""
_JOB_FIELDS = ("batch_sizes", "default_batch_size", "target_metric", "max_epochs")
"""The required job parameters: with all of them known, the whole configuration is checked."""
_MAX_EXPANSIONS_CHECKED = 256
"""expand() of literal lists checks each combination as a whole job up to this many."""


def _check_train(value: object) -> None:
    if not callable(value):
        raise ConfigError(f"train={value!r} is invalid: expected a function taking a TrainingRun")


def _check_conn_id(value: object, name: str = "zeus_conn_id") -> None:
    if is_blank(value):
        raise ConfigError(
            f"{name}={value!r} is invalid: expected the id of an Airflow "
            "connection (a non-empty string without NUL bytes)"
        )


def _check_traces_dir(value: object) -> None:
    # '' (a template rendering to nothing) is missing, not "the default traces"
    if value is not None and (
        not isinstance(value, str | os.PathLike) or (isinstance(value, str) and is_blank(value))
    ):
        raise ConfigError(
            f"traces_dir={value!r} is invalid: expected None ($ZEUS_TRACES_DIR or "
            "the packaged traces) or the path of the traces folder (not empty)"
        )


def _first_run_in(store: SQLStore, job_id: str, ti: Any) -> bool:
    """Whether a mapped task instance's run is its first in the job (later ones say
    nothing)."""
    with store.reader() as reader:
        return reader.job_instance_runs(job_id, ti.dag_id, ti.task_id, ti.map_index) == 1


def _check_carbon(values: Mapping[str, Any]) -> None:
    """A carbon-aware start needs a zone to read the forecast of."""
    if values.get("start_deadline") is not None and values.get("carbon_zone") is None:
        raise ConfigError(
            f"start_deadline={values['start_deadline']!r} is invalid without "
            "carbon_zone: expected carbon_zone set to a grid zone (e.g. 'DE'), "
            "or start_deadline=None"
        )


def _check_optional_job_id(value: object) -> None:
    if value is not None:  # None: the default, checked once dag_id and task_id are known
        check_job_id(value)


_OPERATOR_CHECKS: dict[str, Callable[[Any], object]] = {
    **PARAMETER_CHECKS,
    "job_id": _check_optional_job_id,
    "train": _check_train,
    "device": parse_device,
    "train_kwargs": lambda v: check_kwargs("train_kwargs", v),
    "zeus_conn_id": _check_conn_id,
    "carbon_conn_id": lambda v: _check_conn_id(v, "carbon_conn_id"),
    "traces_dir": _check_traces_dir,
    "fail_on_missed_target": lambda v: check_bool("fail_on_missed_target", v),
    "fail_when_infeasible": lambda v: check_bool("fail_when_infeasible", v),
    "shared_job": lambda v: check_bool("shared_job", v),
}
"""A check for each of the operator's own parameters (Airflow checks BaseOperator's)."""


def _is_template_value(value: object) -> bool:
    return isinstance(value, str) and _is_template(value)


_TEMPLATED_STRINGS = (
    "job_id",
    "device",
    "zeus_conn_id",
    "traces_dir",
    "carbon_zone",
    "carbon_source",
    "carbon_conn_id",
    "start_deadline",
)
"""Templated parameters whose value is one string: a template there is rendered at run time.
(``train_kwargs`` is templated too, but its values are: it must be a mapping already.)"""


def _unknown_yet(name: str, value: object) -> bool:
    """Whether a value is only known at run time: an XCom or mapped argument, or a template
    in a templated string."""
    return isinstance(value, ResolveMixin) or (
        name in _TEMPLATED_STRINGS and _is_template_value(value)
    )


def _check_arguments(given: Mapping[str, Any]) -> None:
    """Check each of the operator's parameters in ``given`` on its own; others are skipped."""
    for name, value in given.items():
        check = _OPERATOR_CHECKS.get(name)
        if check is not None and not _unknown_yet(name, value):
            check(value)
    if "train" not in given or "train_kwargs" not in given:
        return  # partial(): the other may come from expand(), checked when an instance runs
    train, train_kwargs = given["train"], given["train_kwargs"]
    if not isinstance(train, ResolveMixin) and not isinstance(train_kwargs, ResolveMixin):
        _check_call(train, check_kwargs("train_kwargs", train_kwargs))


def _check_call(train: Callable[..., Any], train_kwargs: Mapping[str, Any]) -> None:
    """``train(run, **train_kwargs)`` must bind: a keyword train does not take (or one that
    is also its TrainingRun parameter) would fail every run with a bare TypeError."""
    try:
        signature = inspect.signature(train)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check
        return
    try:
        signature.bind(None, **train_kwargs)
    except TypeError as err:
        name = getattr(train, "__name__", repr(train))
        raise ConfigError(
            f"train_kwargs={dict(train_kwargs)!r} is invalid: {name}(run, "
            f"**train_kwargs) cannot be called ({err}); expected keyword "
            "arguments that the train function takes besides its TrainingRun"
        ) from None


@functools.cache
def _defaults() -> dict[str, Any]:
    """The constructor's defaults of its own parameters."""
    parameters = inspect.signature(ZeusTrainOperator.__init__).parameters
    return {
        name: p.default
        for name, p in parameters.items()
        if name in _OPERATOR_CHECKS and p.default is not inspect.Parameter.empty
    }


def _check_job(given: Mapping[str, Any]) -> None:
    """The checks across parameters, once every required job field is known."""
    if not all(name in given for name in _JOB_FIELDS):
        return
    values = {**_defaults(), **given}
    if any(isinstance(values[name], ResolveMixin) for name in _OPERATOR_CHECKS if name in values):
        return  # an XCom stands for one of them
    job_id = values["job_id"]
    if job_id is None or _is_template_value(job_id):
        # A mapped instance's default id depends on its map index: checked when it runs.
        job_id = _PLACEHOLDER_JOB_ID
    _job_config(values, job_id)


def _check_expand(partial_kwargs: Mapping[str, Any], mapped: Mapping[str, Any]) -> None:
    """expand(name=[...]): each literal element on its own, then (when few enough) each
    combination with the partial() arguments as a whole job."""
    literal = {
        name: value
        for name, value in mapped.items()
        if isinstance(value, list | tuple) and name in _OPERATOR_CHECKS
    }
    for name, values in literal.items():
        for value in values:
            if not _unknown_yet(name, value):
                _OPERATOR_CHECKS[name](value)
    if len(literal) != len(mapped) or not all(literal.values()):
        return  # an XCom (or an empty list) decides at run time
    names = list(literal)
    combinations = 1
    for values in literal.values():
        combinations *= len(values)
    if combinations > _MAX_EXPANSIONS_CHECKED:
        return
    for combination in itertools.product(*literal.values()):
        _check_job({**partial_kwargs, **dict(zip(names, combination, strict=True))})


def _check_expand_kwargs(partial_kwargs: Mapping[str, Any], kwargs: object) -> None:
    """expand_kwargs([{...}, ...]): each literal mapping with the partial() arguments."""
    if not isinstance(kwargs, list | tuple):
        return  # an XCom: known at run time
    for item in kwargs:
        if isinstance(item, Mapping):
            _check_arguments(item)
            _check_job({**partial_kwargs, **item})


class _CheckedPartial(OperatorPartial):
    """What ``ZeusTrainOperator.partial()`` returns: ``expand`` and ``expand_kwargs`` check
    the literal values they are given before Airflow maps them."""

    def expand(self, **mapped_kwargs: Any) -> Any:
        self._expand_called = True  # a refused expand() is reported by its error, not a warning
        _check_expand(self.kwargs, mapped_kwargs)
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> Any:
        self._expand_called = True
        _check_expand_kwargs(self.kwargs, kwargs)
        return super().expand_kwargs(kwargs, strict=strict)


def _job_config(values: Mapping[str, Any], job_id: str) -> JobConfig:
    """The core configuration from the operator's parameters (attributes or arguments)."""
    return JobConfig(
        job_id=job_id,
        batch_sizes=values["batch_sizes"],
        default_batch_size=values["default_batch_size"],
        target_metric=values["target_metric"],
        max_epochs=values["max_epochs"],
        higher_is_better=values["higher_is_better"],
        eta=values["eta"],
        beta=values["beta"],
        window_size=values["window_size"],
        drift_detection=values["drift_detection"],
        max_tries=values["max_tries"],
        exploration_budget=values["exploration_budget"],
        cost_includes_cpu=values["cost_includes_cpu"],
        profiler=ProfilerConfig(
            warmup_steps=values["warmup_steps"],
            profile_steps=values["profile_steps"],
            warmup_s=values["warmup_s"],
            profile_s=values["profile_s"],
            mode=cast(PowerLimitMode, values["power_limit_mode"]),
            selector=values["power_limit_selector"],
            max_slowdown=values["max_slowdown"],
        ),
    )

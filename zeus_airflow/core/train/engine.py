"""One recurrence of a job, end to end: decide, run, record, retry after a failure.

This is the whole product minus Airflow: the operator, the CLI, the simulator and the tests
all call :meth:`Engine.run_recurrence`. Whatever happens inside the train function, the
GPUs' power limits are put back and a started trial is recorded (finished, invalid or
errored); a result the store cannot take waits in the outbox (``core/domain/outbox.py``) for
a later run to record, and never fails the recurrence. Every domain call is made here: the
store offers a unit of work (``Store.begin_trial``) and the engine's ``decide``
(:func:`decided_by`: the fleet translation, then the policy) runs inside it.

The first rule (docs/algorithm.md): whatever state the optimizer is in, a recurrence whose
train function works trains a model. With no batch size left in play the policy falls back to
the best known one, unbounded, at the GPUs' current limits; the recurrence's last allowed try
runs without the early-stop bound; a train function that breaks its contract (run.CONTRACT)
fails the recurrence without judging its batch size.
"""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.decide.budget import ProfilingCredit, budget_after, profiling_credit
from zeus_airflow.core.decide.policy import NoFeasibleBatchSizeError, Policy, ZeusPolicy
from zeus_airflow.core.decide.snapshot import job_snapshot
from zeus_airflow.core.devices.base import GPUGroup, MeasurementKind
from zeus_airflow.core.devices.sync import Synchronize
from zeus_airflow.core.domain import (
    STOPPED_REASONS,
    TRY_FIGURES,
    BudgetLedger,
    BudgetStatus,
    Decide,
    Decision,
    DeviceInfo,
    JobRef,
    JobState,
    PendingResult,
    PowerProfile,
    RecurrenceKey,
    RefusedResult,
    RunOutcome,
    SliceInProgress,
    TrainingFigures,
    counts_as_observation,
    outcome_problem,
    pending_problem,
    run_batch_size,
    run_of,
)
from zeus_airflow.core.domain.figures import figure_problem
from zeus_airflow.core.store.base import LateRecord, Store, StoreError, UnrecordedResultError
from zeus_airflow.core.train.books_notice import books_notice
from zeus_airflow.core.train.monitor import HostEnergyMeter
from zeus_airflow.core.train.profile_notice import profile_notice, step_s
from zeus_airflow.core.train.profiler import ProfileProgress
from zeus_airflow.core.train.run import (
    CONTRACT,
    TrainContractError,
    TrainingRun,
    open_run,
    unrun_body,
)

TrainFunction = Callable[[TrainingRun], Any]
T = TypeVar("T")
ReturnCheck = Callable[[Any], None]
"""Raises when the train function's return value cannot be published (e.g. as an XCom)."""


def _keeps_books(policy: Policy, config: JobConfig) -> bool:
    """Whether the job's tries are priced against an exploration budget (Zeus's policy)."""
    return config.exploration_budget is not None and isinstance(policy, ZeusPolicy)


def _opening(config: JobConfig, books: BudgetLedger | None) -> BudgetStatus | None:
    """The budget before Default's cost is known (``Decision.books``): only its books count
    (``budget.budget_after`` carries the try into them and reckons the budget from them; the
    totals here are none yet). None without books."""
    if books is None or config.exploration_budget is None:
        return None
    return BudgetStatus(
        default_total=0.0,
        default_total_before=0.0,
        spent=books.spent_cost,
        default_cost=float("nan"),
        fraction=config.exploration_budget,
        exploring_fraction=0.0,
        ledger=books,
    )


def decided_by(policy: Policy) -> Decide:
    """The engine's part of a decision, for the store's unit of work
    (:meth:`~zeus_airflow.core.store.base.Store.begin_trial`): the stored state, with runs
    on other GPU setups translated (``core/decide/translation.py``), decided by ``policy``."""

    def decide(state: JobState, rng: np.random.Generator) -> Decision:
        decision = policy.decide(job_snapshot(state), rng)
        if decision.budget is None and _keeps_books(policy, state.job.config):
            return replace(decision, books=state.ledger)  # run 1's figure: _with_budget
        return decision

    return decide


@dataclass(frozen=True)
class TrialReport:
    """One try within a recurrence."""

    trial_id: int
    attempt: int
    phase: str
    outcome: RunOutcome
    budget: BudgetStatus | None = None
    """The exploration budget when the try was decided."""
    judged: bool = True
    """False: recorded ``invalid`` without failing the task (``TrainingRun.not_judged_because``:
    too few steps, or the user's own cap)."""
    profile_progress: ProfileProgress | None = None
    """How far the size's power profile got, when the try ended before it was complete."""
    job_phase: str | None = None
    """Where the job stood once the try was recorded (``Policy.job_phase``); None when the
    policy has none, or the store did not take the try or the phase."""


@dataclass(frozen=True)
class RecurrenceResult:
    """A whole recurrence: every try, summed, and the train function's last return value."""

    job: JobRef
    tries: tuple[TrialReport, ...]
    measurement: MeasurementKind
    return_value: Any = None
    unrecorded: tuple[PendingResult, ...] = ()
    """Tries whose result the store could not take (``core/domain/outbox.py``): the caller
    keeps them for a later run to record."""

    @property
    def final(self) -> TrialReport:
        return self.tries[-1]

    @property
    def reached_target(self) -> bool:
        return self.final.outcome.reached_target

    @property
    def batch_size(self) -> int:
        """The run's (``domain.run_batch_size``: its last try's)."""
        return run_batch_size([t.outcome.batch_size for t in self.tries])

    @property
    def power_limit_w(self) -> int:
        return self.final.outcome.power_limit_w

    @property
    def optimal_power_limit_w(self) -> int | None:
        """The optimum the last try's profile gives (see ``RunOutcome``)."""
        return self.final.outcome.optimal_power_limit_w

    @property
    def profile_unfinished(self) -> bool:
        """The last try trained at the limits being profiled (see ``RunOutcome``)."""
        return self.final.outcome.profile_unfinished

    @property
    def profile_progress(self) -> ProfileProgress | None:
        """How far the last try's unfinished profile got (None: complete, or not profiled)."""
        return self.final.profile_progress

    @functools.cached_property
    def figures(self) -> TrainingFigures:
        """The recurrence's figures from its tries' (``domain.run_of``): energy in J and time
        in s of every try, the last try's limit, ... (no carbon figures: the carbon code
        computes those)."""
        return TrainingFigures(**run_of([t.outcome for t in self.tries], TRY_FIGURES))

    @property
    def energy_j(self) -> float:
        return _known(self.figures.energy_j)

    @property
    def time_s(self) -> float:
        return _known(self.figures.time_s)

    @property
    def cost(self) -> float:
        return _known(self.figures.cost)

    @property
    def epochs(self) -> int:
        return _known(self.figures.epochs)

    @property
    def budget_left_runs(self) -> float | None:
        """The exploration budget left after this recurrence, in Default runs' worth
        (negative: over budget); None without a budget or an estimate of Default's cost."""
        return self.figures.budget_left_runs

    @property
    def job_phase(self) -> str | None:
        """Where the job stands after this recurrence, as its policy reckons it (its latest
        try's ``TrialReport.job_phase``): ``pruning``, ``sampling`` or ``infeasible``."""
        return next((t.job_phase for t in reversed(self.tries) if t.job_phase), None)

    @property
    def exploited_for_budget(self) -> bool:
        """The last try ran the best known size because exploring would have gone over the
        exploration budget."""
        return self.final.phase == "exploit"

    @property
    def fell_back(self) -> bool:
        """No batch size was left in play: the last try trained the best known one."""
        return self.final.phase == "fallback"


def _known(value: T | None) -> T:
    """A figure every finished try measures, summed over a recurrence's (never empty) tries."""
    assert value is not None
    return value


@dataclass(frozen=True)
class _Try:
    """One try of a recurrence as the engine records it: its trial, its decision, and when it
    began (the span of a result the store cannot take, for the outbox)."""

    job: JobRef
    key: RecurrenceKey
    trial_id: int
    attempt: int
    decision: Decision
    began: datetime

    def pending(
        self, outcome: RunOutcome, observed: bool, invalid_reason: str | None
    ) -> PendingResult:
        """The try's result as the store records it, or the outbox keeps it, finished now."""
        return PendingResult(
            self.trial_id,
            self.job.id,
            self.key,
            self.attempt,
            outcome,
            observed,
            datetime.now(UTC),
            "",
            invalid_reason,
            self.began,
        )


class Engine:
    """Runs recurrences of one job on one GPU group, keeping state in a store.

    ``synchronize`` waits for the GPUs' queued work at every measurement window's edge
    (profiling slices, tries, the recurrence); None uses the device group's own hook (CUDA
    through PyTorch on NVML GPUs). ``host_energy`` measures the CPU package and DRAM over the
    same windows (``devices/rapl.py``); None leaves them unmeasured.
    """

    def __init__(
        self,
        store: Store,
        device: GPUGroup,
        config: JobConfig,
        policy: Policy | None = None,
        *,
        seed: int | None = None,
        heartbeat_s: float | None = 60.0,
        log: logging.Logger | None = None,
        check_return: ReturnCheck | None = None,
        synchronize: Synchronize | None = None,
        host_energy: HostEnergyMeter | None = None,
        skip_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.check_return = check_return
        self.skip_errors = skip_errors
        """Exceptions that skip the task (the scheduler's, e.g. AirflowSkipException): a try
        ending by one is recorded ``skipped``, not ``error``."""
        self.synchronize = synchronize
        self.host_energy = host_energy
        self.store = store
        self.device = device
        self.config = config
        self.policy = policy or ZeusPolicy()
        self.decide = decided_by(self.policy)
        self.seed = seed
        self.heartbeat_s = heartbeat_s
        self.log = log or logging.getLogger("zeus_airflow")
        self.device_info = DeviceInfo(
            device.model, device.count, device.measurement, device.candidate_power_limits_w()
        )
        self.unrecorded: list[PendingResult] = []
        """The current recurrence's results the store could not take, for the outbox; read
        it after a recurrence that raised too (an invalid try's measurement)."""
        self._books_said = False

    def run_recurrence(self, train: TrainFunction, key: RecurrenceKey) -> RecurrenceResult:
        self.unrecorded = []
        task = f"{key.dag_id}.{key.task_id}" if key.dag_id or key.task_id else None
        job = self.store.register_job(self.config, seed=self.seed, task=task)
        self._say_if_limits_are_fixed()
        failed: set[int] = set()
        missed: set[int] = set()
        reports: list[TrialReport] = []
        value: Any = None
        tries = self.config.tries_per_recurrence
        for attempt in range(1, tries + 1):
            try:
                start = self.store.begin_trial(
                    job,
                    key,
                    attempt,
                    self.decide,
                    self._device_now(),
                    frozenset(failed),
                    self.heartbeat_s,
                    missed=frozenset(missed),
                )
            except NoFeasibleBatchSizeError as err:
                if not reports:
                    raise
                # The tries already made are the recurrence's result (recorded).
                self.log.warning(
                    "no batch size left to try in this recurrence: %s; it ends "
                    "with its last try's result (batch size %d)",
                    err,
                    reports[-1].outcome.batch_size,
                )
                break
            decision = start.decision
            self._say_books(job, decision)
            if attempt == tries and decision.early_stop_cost is not None:
                # The last allowed try must yield a model: it runs to the target or max epochs.
                decision = replace(decision, early_stop_cost=None, budget_cap=None, final=True)
            self._say_why(decision)
            report, value = self._run_trial(job, key, start.trial_id, decision, attempt, train)
            report = self._with_job_phase(job, report)
            reports.append(report)
            trained = report.outcome.stop_reason != "no_steps"  # a final try too: no model
            if report.outcome.reached_target or (decision.final and trained) or not report.judged:
                break  # an unjudged try would be unjudged again on the same data
            failed.add(report.outcome.batch_size)
            if report.outcome.stop_reason not in STOPPED_REASONS:
                missed.add(report.outcome.batch_size)
            self._say_failed(report.outcome)
        return RecurrenceResult(
            job, tuple(reports), self.device.measurement, value, tuple(self.unrecorded)
        )

    def _with_job_phase(self, job: JobRef, report: TrialReport) -> TrialReport:
        """``report`` with where the job stands now that its try is recorded, as the policy
        reckons it, written beside the try: the fleet page, the job page, the report and the
        XComs all show this one figure, and none of them replays the job's history to get
        it. Best effort: the run has trained its model, and a figure for people never fails
        it (a store that fails, or a policy that cannot say, leaves the job's earlier phase
        shown, with a warning)."""
        if not self.policy.has_job_phase:
            return report  # a baseline: nothing to read the job's state for
        if any(p.trial_id == report.trial_id for p in self.unrecorded):
            return report  # in the outbox: the store does not hold the try yet
        try:
            with self.store.reader() as reader:
                state = reader.job_state(job, self._device_now())
            phase = self.policy.job_phase(job_snapshot(state))
            if phase is not None:
                self.store.record_job_phase(report.trial_id, phase)
        except Exception as err:  # StoreError most often; never the run's failure
            self.log.warning(
                "could not record the job's phase after this try (%s: %s); the job's pages "
                "show its earlier one until a later try records it",
                type(err).__name__,
                err,
            )
            return report
        return replace(report, job_phase=phase)

    def _say_failed(self, outcome: RunOutcome) -> None:
        """The log line of a try that failed its batch size; a try stopped at the budget's
        cap did not fail it: stopped on purpose, it is said at INFO."""
        if outcome.stop_reason == "budget_cap":
            self.log.info(
                "batch size %d stopped at the exploration budget's cap after %d epochs, as "
                "planned: it costs more than the budget could pay for now (no verdict on the "
                "size); another size trains",
                outcome.batch_size,
                outcome.epochs,
            )
            return
        if outcome.stop_reason == "no_steps":
            self.log.warning(
                "batch size %d trained no step (an empty DataLoader: fewer samples than the "
                "batch size, with drop_last?): it is unusable for this data and counts as a "
                "failed try; another size trains",
                outcome.batch_size,
            )
            return
        self.log.warning(
            "batch size %d did not reach the target (%s after %d epochs)%s",
            outcome.batch_size,
            outcome.stop_reason,
            outcome.epochs,
            ""
            if outcome.stop_reason in STOPPED_REASONS
            else "; it is not tried again in this recurrence: on the same data it would miss again",
        )

    def _say_books(self, job: JobRef, decision: Decision) -> None:
        """Warn, once per engine (a task run), of a budget whose books cannot be right."""
        if self._books_said or not _keeps_books(self.policy, self.config):
            return
        notice = books_notice(self.store, job, self.device_info, decision)
        if notice is not None:
            self._books_said = True
            self.log.warning("%s", notice)

    def _say_why(self, decision: Decision) -> None:
        """The log line of a decision that is not the usual one."""
        if decision.phase == "fallback":
            self.log.warning(
                "%s; training batch size %d as it would run without Zeus "
                "(current power limit, no early-stop bound)",
                decision.reason,
                decision.batch_size,
            )
        elif decision.reason:
            self.log.info("%s: batch size %d", decision.reason, decision.batch_size)

    def _run_trial(
        self,
        job: JobRef,
        key: RecurrenceKey,
        trial_id: int,
        decision: Decision,
        attempt: int,
        train: TrainFunction,
    ) -> tuple[TrialReport, Any]:
        self._say_try(attempt, decision)
        profile = self._profile_for(job, decision)
        # Read before training moves it on: what the store held of this profile.
        stored = _profile_mark(profile)
        began = datetime.now(UTC)  # the span of a result the store cannot take (outbox)
        trial = _Try(job, key, trial_id, attempt, decision, began)
        run, value, outcome = self._train(trial, profile, stored, train)
        report = self._judge(trial, run, value, outcome)
        if decision.power_limit_w is not None:  # a baseline's fixed limit: no profile
            return report, value
        progress = run.profiler.progress(step_s(outcome))
        if progress is not None:
            level, line = profile_notice(
                outcome,
                progress,
                self.config.profiler,
                first=stored == (0, None),
                progressed=stored != _profile_mark(profile),
            )
            # A replayed GPU's steps are the paper's traces: no slice setting or longer run
            # of the user's would change them, so the advice is no warning (issue 47: the
            # demo printed it, 879 characters).
            replayed = self.device.measurement == "replayed"
            self.log.log(min(level, logging.INFO) if replayed else level, line)
        return replace(report, profile_progress=progress), value

    def _say_try(self, attempt: int, decision: Decision) -> None:
        self.log.info(
            "try %d: batch size %d (%s)%s",
            attempt,
            decision.batch_size,
            decision.phase,
            f", early stop above training cost {decision.early_stop_cost:.4g}"
            if decision.early_stop_cost
            else "",
        )

    def _profile_for(self, job: JobRef, decision: Decision) -> PowerProfile:
        """The power profile the try runs with: the stored one of its batch size, or a
        baseline's fixed limit as a one-limit profile that is never stored."""
        if decision.power_limit_w is None:
            return self.store.load_profile(job, decision.batch_size, self.device_info)
        return PowerProfile(
            decision.batch_size, self.device.model, self.device.count, (decision.power_limit_w,)
        )

    def _train(
        self, trial: _Try, profile: PowerProfile, stored: ProfileMark, train: TrainFunction
    ) -> tuple[TrainingRun, Any, RunOutcome]:
        """Run the train function on the GPUs; an exception is recorded (an invalid try, or
        an error that does not count against its size) and raised. The profile is saved
        whatever happens, when the try measured some of it (``stored``: what the store held
        of it before)."""
        decision = trial.decision
        measured: RunOutcome | None = None
        try:
            with self._open_run(decision, profile) as run:
                try:
                    with _Heartbeat(self.store, trial.trial_id, self.heartbeat_s):
                        value = train(run)
                        outcome = run.finish()
                except TrainContractError:  # e.g. report_metric(nan): invalid, not an error
                    outcome = run.finish()  # measured up to here, before the limits go back
                    raise
                except BaseException:
                    measured = _measured_so_far(run)  # the energy spent is kept, not judged
                    raise
        except TrainContractError as err:
            reason = str(err)
            self._record(
                trial.pending(outcome, False, reason),
                lambda: self.store.invalidate_trial(trial.trial_id, outcome, reason),
            )
            raise
        except BaseException as err:
            self._fail(trial, measured, err)
            raise
        finally:
            # A slice in progress counts as progress too: short runs finish slices over
            # several runs only if each keeps what it measured.
            if decision.power_limit_w is None and _profile_mark(profile) != stored:
                self.store.save_profile(trial.job, profile)
        return run, value, outcome

    def _open_run(
        self, decision: Decision, profile: PowerProfile
    ) -> AbstractContextManager[TrainingRun]:
        return open_run(
            self.config,
            decision.batch_size,
            self.device,
            profile=profile,
            early_stop_cost=decision.early_stop_cost,
            budget_cap=decision.budget_cap,
            keep_power_limit=decision.keep_power_limit,
            log=self.log,
            synchronize=self.synchronize,
            host_energy=self.host_energy,
            profiling_credit=self._profiling_credit(decision),
        )

    def _fail(self, trial: _Try, measured: RunOutcome | None, err: BaseException) -> None:
        """Record a try the train function (or the scheduler) ended by an exception."""
        skipped = isinstance(err, self.skip_errors)
        self.store.fail_trial(trial.trial_id, traceback.format_exc(), measured, skipped=skipped)
        if not isinstance(err, KeyboardInterrupt | SystemExit) and not skipped:
            self.log.error(
                "try %d (batch size %d) raised %s: recorded as an error, it does "
                "not count against its batch size",
                trial.attempt,
                trial.decision.batch_size,
                type(err).__name__,
            )

    def _judge(self, trial: _Try, run: TrainingRun, value: Any, outcome: RunOutcome) -> TrialReport:
        """Record a try that returned: invalid (its return value or its use of the run
        broke the contract: raised), unjudged (the user's model, but no verdict on the
        size), or finished."""
        decision = trial.decision
        violation = unrun_body(value) or run.contract_violation or self._unpublishable(value)
        outcome = self._with_budget(
            decision, outcome, judged=violation is None and run.not_judged_because is None
        )
        # A try that trained nothing has no cost of training to learn from, in any phase.
        observed = (
            counts_as_observation(decision.phase, outcome.reached_target, outcome.stop_reason)
            and outcome.stop_reason != "no_steps"
        )
        pending = trial.pending(outcome, observed, violation)
        if violation is not None:
            self._record(
                pending, lambda: self.store.invalidate_trial(trial.trial_id, outcome, violation)
            )
            raise TrainContractError(
                f"{violation}. The try (batch size {decision.batch_size}) is recorded as "
                "invalid: it does not count against its batch size, and the job's learning "
                "state is unchanged"
            )
        unjudged = run.not_judged_because or _implausible(outcome, self.device.count)
        if unjudged is not None:  # the user's model, but no verdict on the size
            self._record(
                replace(pending, observed=False, invalid_reason=unjudged),
                lambda: self.store.invalidate_trial(trial.trial_id, outcome, unjudged),
            )
            self.log.warning(
                "try %d (batch size %d) is recorded as invalid, not counted: %s",
                trial.attempt,
                decision.batch_size,
                unjudged,
            )
        else:
            self._record(
                pending, lambda: self.store.finish_trial(trial.trial_id, outcome, observed)
            )
        return TrialReport(
            trial.trial_id,
            trial.attempt,
            decision.phase,
            outcome,
            decision.budget,
            judged=unjudged is None,
        )

    def _with_budget(self, decision: Decision, outcome: RunOutcome, judged: bool) -> RunOutcome:
        """``outcome`` with the exploration budget left after it (``budget.budget_after``):
        the one figure the summary, the XComs, the store and the UI show."""
        status = decision.budget or _opening(self.config, decision.books)
        if status is None:
            return outcome
        after = budget_after(self.config, status, outcome, judged)
        left = None if after is None else after.left_runs()
        if figure_problem("budget_left_runs", left, required=False) is not None:
            left = None  # a figure of the books, not of the try: missing, never invalid
        return replace(outcome, budget_left_runs=left)

    def _profiling_credit(self, decision: Decision) -> ProfilingCredit | None:
        """What profiling may add to a try's cost: bounded by the budget's credit, unless an
        early-stop bound already caps the whole try (the budget priced the try at it); none
        for a probe, which needs only the profile's first slice."""
        cap = decision.budget_cap
        if cap is not None and cap.priced_cap is not None:
            # A probe: its first slice (the highest limit) prices it; slices below would
            # slow it past its cap before an epoch ends.
            return ProfilingCredit(0.0, 0.0)
        if decision.early_stop_cost is not None:
            return None
        return profiling_credit(self.config, decision.budget)

    def _record(self, pending: PendingResult, write: Callable[[], None]) -> None:
        """Write a returned try's result. The first rule puts the model first: a store that
        cannot take it (an outage, a read-only or full database) fails nothing; the result
        waits in the outbox for a later run to record (``core/domain/outbox.py``)."""
        try:
            write()
        except Exception as err:  # any fault of the store; UnrecordedResultError says most
            failure = (
                str(err)
                if isinstance(err, UnrecordedResultError)
                else f"could not record trial {pending.trial_id}: {type(err).__name__}: {err}"
            )
            self.log.warning(
                "%s; it is kept in the outbox and the next run records it late", failure
            )
            self.unrecorded.append(replace(pending, failure=failure))

    def _device_now(self) -> DeviceInfo:
        """The GPUs as the next decision sees them: whether their limits can be changed may
        change within a recurrence (a refusal freezes them)."""
        return replace(self.device_info, limits_fixed=self.device.limits_fixed_because is not None)

    def _say_if_limits_are_fixed(self) -> None:
        """Once per recurrence (a task): the GPUs' limits cannot be changed (a MIG instance,
        a limit another task holds), so every try measures at the current limits; the
        profilers then never call the setter."""
        fixed = self.device.limits_fixed_because
        if fixed is None:
            return
        if self.config.profiler.mode == "measure":
            self.log.info("%s; power_limit_mode='measure' changes nothing anyway", fixed)
        else:
            self.log.warning(
                "%s: training at the GPUs' current limits without changing them (measure mode)",
                fixed,
            )

    def _unpublishable(self, value: Any) -> str | None:
        if self.check_return is None:
            return None
        try:
            self.check_return(value)
        except Exception as err:  # the check's own error is the message: any type
            return (
                f"the train function returned a value of type {type(value).__name__} that "
                f"cannot be stored as an XCom ({err}); {CONTRACT}"
            )
        return None


def record_late(
    store: Store,
    pending: Sequence[PendingResult],
    log: logging.Logger,
    refused: list[RefusedResult] | None = None,
) -> list[PendingResult]:
    """Record the results earlier recurrences could not (their outbox), before the next
    decision, so that it sees them; touches no GPU. Returns those the store still cannot
    take (a store that fails here has just answered, so it is rare). An entry that is not
    plausible (``outbox.pending_problem``) or not its trial's (the store's check) is
    untrusted input: refused with a warning, added to ``refused`` for inspection, never
    stored and never carried on."""
    left: list[PendingResult] = []
    for result in pending:
        problem = pending_problem(result)
        if problem is None:
            try:
                done = store.record_late(result)
            except StoreError as err:
                log.warning(
                    "the result of trial %d is still not in the store (%s); kept for the next run",
                    result.trial_id,
                    err,
                )
                left.append(replace(result, failure=str(err)))
                continue
            problem = done.refused
        if problem is not None:
            _refuse(result, problem, log, refused)
            continue
        _say_late(result, done, log)
    return left


def _refuse(
    result: PendingResult, problem: str, log: logging.Logger, refused: list[RefusedResult] | None
) -> None:
    log.warning(
        "the outbox's result for trial %s is refused and NOT stored: %s. It is kept for "
        "inspection (the operator's XCom zeus_outbox_refused); its trial expires unrecorded",
        result.trial_id,
        problem,
    )
    if refused is not None:
        refused.append(RefusedResult(result.to_json(), problem))


def _say_late(result: PendingResult, done: LateRecord, log: logging.Logger) -> None:
    if done.recorded:
        log.warning(
            "trial %d's result (batch size %d), which the store could not take "
            "when it finished (%s), is recorded late: %s",
            result.trial_id,
            result.outcome.batch_size,
            result.failure,
            done.status,
        )
    elif done.status is None:
        log.warning(
            "trial %d is no longer in the store: its result cannot be recorded "
            "(its run's XComs keep its figures): %s",
            result.trial_id,
            result.outcome,
        )
    else:  # drained before: recorded once at most
        log.info("trial %d has its result already (%s)", result.trial_id, done.status)


ProfileMark = tuple[int, SliceInProgress | None]
"""How far a power profile is: limits measured, and the slice in progress."""


def _profile_mark(profile: PowerProfile) -> ProfileMark:
    return len(profile.measurements), profile.partial


def _implausible(outcome: RunOutcome, gpu_count: int) -> str | None:
    """Why a try's own measurement cannot be a cost of training (a NaN from a device's
    counter, a clock that jumped, more energy than ``gpu_count`` GPUs can draw in its time:
    ``outbox.outcome_problem``); None when it can."""
    problem = outcome_problem(outcome, gpu_count)
    if problem is None:
        return None
    return f"its measurement is implausible ({problem}): a fault of the device or the clock"


def _measured_so_far(run: TrainingRun) -> RunOutcome | None:
    """What a try that raised measured up to the exception; None when its windows cannot be
    closed (the exception came from inside the measurement itself)."""
    try:
        return run.finish()
    except Exception:
        logging.getLogger("zeus_airflow").debug("no measurement of the raised try", exc_info=True)
        return None


class _Heartbeat:
    """Tells the store every ``interval_s`` that the trial's worker is alive."""

    def __init__(self, store: Store, trial_id: int, interval_s: float | None) -> None:
        self.store, self.trial_id, self.interval_s = store, trial_id, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Heartbeat:
        if self.interval_s:
            self._thread = threading.Thread(
                target=self._beat, daemon=True, name=f"zeus-heartbeat-{self.trial_id}"
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        assert self.interval_s
        while not self._stop.wait(self.interval_s):
            try:
                self.store.heartbeat(self.trial_id, self.interval_s)
            except Exception:  # a missed beat must not kill training; the lease is generous
                logging.getLogger("zeus_airflow").warning("heartbeat failed", exc_info=True)

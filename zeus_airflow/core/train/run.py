"""The object a user's train function drives: epochs, steps and metric reports.

```python
def train(run: TrainingRun):
    loader = DataLoader(dataset, batch_size=run.batch_size, shuffle=True)
    for epoch in run.epochs():       # stops at the target, max epochs or the early-stop bound
        for batch in run.steps(loader):
            ...                      # one optimisation step
        run.report_metric(evaluate(model))
```

Each step is reported to the power profiler; each epoch boundary checks the target, the
epoch budget and the early-stop bound (paper §4.4): a run stops before an epoch whose
predicted training cost would take it over the bound the policy set.

Setup (imports, data loading, building the model) is measured apart: training starts at the
first ``run.epochs()`` step, or at :meth:`TrainingRun.start_training` for code that cannot
use it. Only training counts in the try's cost and in the early-stop comparison, so a slow
setup on a busy machine never gets a good batch size early-stopped.

The contract a train function keeps: it iterates ``run.epochs()`` once, trains at least
:data:`MIN_STEPS_PER_EPOCH` step in each epoch through ``run.steps()`` (or ``end_step``) and
reports a finite metric with ``run.report_metric`` in each epoch; an epoch's metric is its
last report. A try that breaks it is *invalid* (:attr:`TrainingRun.contract_violation`): it
says nothing about its batch size. Two kinds of try are invalid without failing the task
(:attr:`TrainingRun.not_judged_because`): one with an epoch that trained fewer steps than the
floor while others trained (its cost is no cost of training), and one whose own cap (a
``break``, a framework's ``max_steps``) ended it before the target, ``max_epochs`` or the
early-stop bound: the model is the one the user asked for, but it says nothing about the batch
size.

A try that trained no step at all is evidence, not a breach: its batch size is unusable for
the job's data (an empty DataLoader, e.g. 40 samples at batch size 64 with ``drop_last``). It
stops after its first epoch with the stop reason ``no_steps`` and ``reached_target=False``
whatever metric was reported, so the size counts as a failed try and the walk moves on: a job
can never settle on a size that trains nothing.

Code that does not own its loop (a Hugging Face or Lightning ``Trainer``, a DDP launcher)
drives the same run through its step/epoch API, from the framework's hooks:
``begin_epoch()`` / ``end_step()`` / ``end_epoch()`` / ``report_metric()`` / ``should_stop()``.
``epochs()`` and ``steps()`` are built on it, so the profiler, the monitor and the early-stop
check see one sequence of calls either way (zeus_airflow/integrations/, docs/frameworks.md).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TypeVar

from zeus_airflow.core.common.config import (
    DB_INT_MAX,
    JobConfig,
    finite_number,
    real_number,
    short_repr,
)
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.decide.budget import (
    CostEstimate,
    PricedCap,
    ProfilingCredit,
    cannot_beat,
    cost_range,
    priced_verdict,
)
from zeus_airflow.core.decide.translation import pricing_cost_per_step
from zeus_airflow.core.devices.base import GPUGroup, max_power_w, power_control
from zeus_airflow.core.devices.sync import Synchronize
from zeus_airflow.core.domain import (
    BUDGET_STOPS,
    BudgetCap,
    PowerProfile,
    RunOutcome,
    StopReason,
)
from zeus_airflow.core.domain.physics import trusted
from zeus_airflow.core.train.monitor import EnergyMonitor, HostEnergyMeter, TimeEnergy
from zeus_airflow.core.train.profiler import PowerLimitProfiler

T = TypeVar("T")

_SETUP_WINDOW = "zeus.setup"
_RUN_WINDOW = "zeus.run"
_EPOCH_WINDOW = "zeus.epoch"

MIN_STEPS_PER_EPOCH = 1
"""The floor: an epoch that trained fewer steps trained nothing its cost could be judged by."""

CONTRACT = (
    "a train function iterates run.epochs() once, trains at least one step in each "
    "epoch through run.steps() or run.end_step(n), calls run.report_metric(value) "
    "with a finite number in each epoch (the epoch's last report counts), and returns "
    "a value Airflow can store as an XCom (or None)"
)
"""What the engine expects of a train function; quoted by every error about breaking it."""


class TrainContractError(ValueError):
    """The train function broke :data:`CONTRACT`; the message says how."""


class TargetMissedError(RuntimeError):
    """A run ended without reaching its target, and the job was asked to fail then."""


class TrainingRun:
    """One try of one batch size. Created by the engine; handed to the train function."""

    def __init__(
        self,
        config: JobConfig,
        batch_size: int,
        device: GPUGroup,
        monitor: EnergyMonitor,
        profiler: PowerLimitProfiler,
        early_stop_cost: float | None,
        budget_cap: BudgetCap | None = None,
    ) -> None:
        self.config = config
        self.batch_size = batch_size
        self.device = device
        self.monitor = monitor
        self.profiler = profiler
        self.early_stop_cost = early_stop_cost
        """Stop before the run's training cost would exceed this (None: no bound)."""
        self.budget_cap = budget_cap
        """Set: ``early_stop_cost`` is the exploration budget's cap, a stop is censored."""
        self._priced = False
        """Whether the try was priced from its cost per sample (``_priced_at``)."""
        self._payback_cap: float | None = None
        """The cap its price says pays back most (``_paid_back``), once priced."""
        self.epoch = 0
        self.last_metric: float | None = None
        self.reached_target = False
        self.stop_reason: StopReason | None = None
        self._max_power_w = max_power_w(device)
        self._last_epoch: TimeEnergy | None = None
        self._last_epoch_steps = 0
        self._steps_this_epoch = 0
        self.steps_trained = 0
        """Training steps so far, every epoch's."""
        self._last_epoch_profiled = False
        self._this_epoch_profiled = False
        self._in_epoch = False
        self._setup: TimeEnergy | None = None
        """Set when training starts: the setup window's measurement."""
        self._epochs_iterated = False
        self.empty_epochs = 0
        """Epochs that trained fewer than MIN_STEPS_PER_EPOCH steps."""
        self.own_cap: str | None = None
        """What ended training before the run said stop, when a framework's callback knows
        (e.g. "the Trainer's max_steps=2"); see :meth:`capped_by`."""

    # --- what the train function uses --------------------------------------------------------
    @property
    def power_limit_w(self) -> int:
        return self.profiler.power_limit_w

    @property
    def training_started(self) -> bool:
        return self._setup is not None

    def start_training(self) -> None:
        """Setup is over: measure from here on as training (cost, early stop, profiling).

        ``run.epochs()`` calls it before the first epoch; call it yourself only if the first
        step must come before the loop. Calling it again does nothing."""
        if self._setup is not None:
            return
        self._setup = self.monitor.end_window(_SETUP_WINDOW)
        self.monitor.begin_window(_RUN_WINDOW)
        self.profiler.start()

    def epochs(self) -> Iterator[int]:
        """Yield epoch numbers (1-based) until the target, max epochs or the early-stop bound.

        Built on the public step/epoch API below (:meth:`begin_epoch`, :meth:`end_epoch`,
        :meth:`should_stop`), which a framework's callback drives instead. A run's epochs are
        one loop: a second call raises (it would silently get no epoch)."""
        if self._epochs_iterated:
            raise TrainContractError(
                f"run.epochs() was called a second time (after {self.epoch} epoch(s)): a "
                f"run's epochs are one loop, which ends when the run says stop ({CONTRACT})"
            )
        self._epochs_iterated = True
        return self._epochs()

    def _epochs(self) -> Iterator[int]:
        self.start_training()
        while True:
            if self.in_epoch:
                self.end_epoch()
            if self.should_stop() is not None:
                return
            yield self.begin_epoch()

    def steps(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield each batch; every yielded batch is one training step."""
        self.start_training()
        for batch in batches:
            yield batch
            self.end_step()
            if self.budget_stopped:
                return

    def run_steps(self, count: int, work: Callable[[int], None]) -> None:
        """Run ``count`` steps by calling ``work(k)`` for chunks of k steps; chunks end where
        the profiler must switch limits. For workloads that step in bulk (trace replay)."""
        left = _step_count("run_steps", count)
        self.start_training()
        while left > 0 and not self.budget_stopped:
            chunk = self.profiler.steps_until_transition() or (1 if self._unpriced else left)
            chunk = min(chunk, left)
            work(chunk)
            self.end_step(chunk)
            left -= chunk

    # --- the step/epoch API a framework drives (a Trainer callback, a DDP launcher) ----------
    @property
    def in_epoch(self) -> bool:
        """Between :meth:`begin_epoch` and :meth:`end_epoch`."""
        return self._in_epoch

    def begin_epoch(self) -> int:
        """An epoch starts (training starts with the first one); returns its number (1-based).

        Call :meth:`should_stop` at the previous epoch's end first: an epoch begun after the
        run was told to stop is a bug in the caller, and raises."""
        self.start_training()
        if self._in_epoch:
            raise RuntimeError(
                f"begin_epoch() called inside epoch {self.epoch}: call end_epoch() first"
            )
        if self.stop_reason is not None:
            raise RuntimeError(f"begin_epoch() called after the run stopped ({self.stop_reason})")
        self.epoch += 1
        self._in_epoch = True
        self._steps_this_epoch = 0
        self._this_epoch_profiled = self.profiler.is_profiling
        self.monitor.begin_window(_EPOCH_WINDOW)
        return self.epoch

    def end_step(self, steps: int = 1) -> None:
        """``steps`` training steps finished (the profiler may switch the limit here): an
        integer >= 0 (a negative or fractional count raises TrainContractError)."""
        steps = _step_count("end_step", steps)
        self._steps_this_epoch += steps
        self.steps_trained += steps
        if self.profiler.is_profiling:
            self.profiler.on_steps_done(steps)
        if self._unpriced and self.stop_reason is None:
            self.stop_reason = self._priced_now() or self._past_the_probe()

    @property
    def _unpriced(self) -> bool:
        """A price is pending (``_priced_now``): bulk steps stop for it."""
        cap = self.budget_cap
        return (
            not self._priced
            and cap is not None
            and (
                cap.reference is not None
                or cap.lowest_cost is not None
                or cap.priced_cap is not None
            )
        )

    def _past_the_probe(self) -> StopReason | None:
        """A probe not priced yet that has spent its cap stops now, inside its epoch
        (``budget_cap``): its cap holds step by step, not only between epochs."""
        if self.early_stop_cost is None or not self.training_started:
            return None
        so_far = self.cost_of(self.monitor.peek_window(_RUN_WINDOW))
        return "budget_cap" if so_far > self.early_stop_cost else None

    def _priced_now(self) -> StopReason | None:
        """The try's price, as soon as there is one: a size an earlier try priced as unable
        to beat the best stops at its first step (``cannot_win``); else once its cost per
        sample at the highest limit is measured (``_priced_at``). A price that lets the try
        go on raises a probe's cap to the cap the budget pays for."""
        cap = self.budget_cap
        assert cap is not None
        if cap.lowest_cost is not None and cannot_beat(cap.lowest_cost, cap.best_cost):
            self._priced = True
            return "cannot_win"
        per_step = pricing_cost_per_step(self.profiler.profile, self.config.eta)
        if cap.reference is None or per_step is None:
            return None  # at once, or when the profile's first slice ends
        self._priced = True
        stop = self._priced_at(per_step / self.batch_size)
        if stop is None and cap.priced_cap is not None:
            self.early_stop_cost = cap.priced_cap
            self.profiler.release_credit()
        if stop is None and self._payback_cap is not None and self.early_stop_cost is not None:
            self.early_stop_cost = min(self.early_stop_cost, self._payback_cap)
        return stop

    @property
    def budget_stopped(self) -> bool:
        """The exploration budget stopped the try (inside an epoch, possibly): a framework's
        callback ends training at once (``should_stop`` says why)."""
        return self.stop_reason in BUDGET_STOPS

    def end_epoch(self) -> None:
        """The epoch's training (and, ideally, its evaluation) is over: close its measurement.
        Then ask :meth:`should_stop`."""
        if not self._in_epoch:
            raise RuntimeError("end_epoch() called outside an epoch: call begin_epoch() first")
        self._in_epoch = False
        self._last_epoch = self.monitor.end_window(_EPOCH_WINDOW)
        self._last_epoch_steps = self._steps_this_epoch
        if self._steps_this_epoch < MIN_STEPS_PER_EPOCH:
            self.empty_epochs += 1
        self._last_epoch_profiled = self._this_epoch_profiled
        self.profiler.on_epoch_end()

    def should_stop(self) -> StopReason | None:
        """Whether training must stop now, and why; the reason is kept as the run's.

        Between epochs: the target, the epoch budget (``max_epochs``) and the early-stop bound
        (paper §4.4). Inside an epoch (a framework evaluating every N steps): the target only,
        because the budget and the bound are judged per epoch."""
        if self.stop_reason is not None:
            return self.stop_reason
        if self._in_epoch:
            stop: StopReason | None = "target" if self.reached_target else None
        else:
            stop = self._stop_between_epochs()
        self.stop_reason = stop
        return stop

    def report_metric(self, value: float) -> None:
        """Report the validation metric of the epoch just trained: a finite real number
        (numpy's and Decimal too, a 0-d tensor through ``.item()``). The epoch's last report
        is its metric: a later report of the same epoch replaces an earlier one, so a
        target reached and then lost again within an epoch is not reached. A report after
        the run stopped between epochs (a test-set evaluation after the loop) changes
        nothing: the verdict was taken at the last epoch's end."""
        number = finite_number(value)
        if number is None:
            raise TrainContractError(
                f"report_metric(value={short_repr(value)}) is invalid: expected a finite "
                f"number a float can hold ({CONTRACT})"
            )
        if self.stop_reason is not None and (not self._in_epoch or self.budget_stopped):
            return
        self.last_metric = float(number)
        self.reached_target = self.config.reached(number)
        if self.stop_reason == "target" and not self.reached_target:
            self.stop_reason = None  # the report that stopped the run was taken back

    def capped_by(self, cap: str) -> None:
        """A framework's own cap (``cap`` names it, e.g. "the Trainer's max_steps=2") is
        ending training before the run said stop: the try is then the user's, not judged
        against its batch size (see :attr:`not_judged_because`)."""
        self.own_cap = cap

    # --- engine side -------------------------------------------------------------------------
    def begin(self) -> None:
        """The train function is about to be called: setup starts."""
        self.monitor.begin_window(_SETUP_WINDOW)

    @property
    def contract_violation(self) -> str | None:
        """How the finished train function broke :data:`CONTRACT`, or None."""
        if self.own_cap is not None or self.budget_stopped:
            return None  # a framework's cap, or the budget, ended training before a metric
        if self.epoch == 0:
            return f"the train function returned without iterating run.epochs() ({CONTRACT})"
        if self.last_metric is None:
            return (
                f"the train function trained {self.epoch} epoch(s) but never called "
                f"run.report_metric ({CONTRACT})"
            )
        return None

    @property
    def trained_nothing(self) -> bool:
        """Epochs ran, and not one step (``no_steps``): the size cannot train on the job's
        data. A framework's own cap (``limit_train_batches=0``) is the user's choice, not
        this."""
        return self.epoch > 0 and self.steps_trained == 0 and self.own_cap is None

    @property
    def not_judged_because(self) -> str | None:
        """Why the finished try says nothing about its batch size although the train function
        kept its contract, or None: it trained fewer steps than the floor (its cost is no
        cost of training), or its own cap ended it before the run said stop (the target,
        ``max_epochs``, the early-stop bound). Recorded ``invalid``, the task succeeds."""
        capped = self.stop_reason == "returned" and not self.reached_target
        if capped and self.own_cap is not None:
            return self._capped_message(self.own_cap)
        if self.empty_epochs and not self.trained_nothing:
            return (
                f"{self.empty_epochs} of its {self.epoch} epoch(s) trained fewer than "
                f"{MIN_STEPS_PER_EPOCH} step ({self.steps_trained} steps in all: an empty "
                "DataLoader, or steps not reported through run.steps())"
            )
        if capped:
            return self._capped_message("the train function returned from inside run.epochs()")
        return None

    def _capped_message(self, cap: str) -> str:
        return (
            f"training ended by the user's own cap ({cap}) after {self.epoch} of "
            f"max_epochs={self.config.max_epochs} epoch(s), before the target"
        )

    def finish(self) -> RunOutcome:
        """Close the run's windows and summarise it (the limits are restored by the engine).
        A run that never started training is all setup: zero training energy and time."""
        if self.monitor.is_open(_EPOCH_WINDOW):
            self.monitor.end_window(_EPOCH_WINDOW)
            if self._in_epoch and self._steps_this_epoch < MIN_STEPS_PER_EPOCH:
                self.empty_epochs += 1  # an epoch left open counts by the same floor
        if self._setup is None:
            setup, total = self.monitor.end_window(_SETUP_WINDOW), TimeEnergy(0.0, 0.0)
        else:
            setup, total = self._setup, self.monitor.end_window(_RUN_WINDOW)
        if self.trained_nothing:  # whatever the function reported: no step, no model
            self.stop_reason, self.reached_target = "no_steps", False
        if self.stop_reason is None:
            self.stop_reason = "target" if self.reached_target else "returned"
        # A profile that contradicts physics saves nothing, not even in observe mode.
        observer = self.profiler.observer_report() if self._profile_trusted() else None
        return RunOutcome(
            batch_size=self.batch_size,
            power_limit_w=self.power_limit_w,
            energy_j=total.energy_j,
            time_s=total.time_s,
            cost=self.cost_of(total),
            epochs=self.epoch,
            reached_target=self.reached_target,
            stop_reason=self.stop_reason,
            last_metric=self.last_metric,
            setup_energy_j=setup.energy_j,
            setup_time_s=setup.time_s,
            early_stop_cost=self.early_stop_cost,
            optimal_power_limit_w=self.profiler.optimal_power_limit_w,
            observer=observer,
            profile_unfinished=self.profiler.profile_unfinished,
            cpu_energy_j=total.cpu_energy_j,
            dram_energy_j=total.dram_energy_j,
            default_cost=self._cost_at_max_power(total),
            power_control=power_control(self.device, self.profiler.mode == "measure"),
            steps=self.steps_trained,
        )

    def cost_of(self, measurement: TimeEnergy) -> float:
        """The Zeus cost of a measurement: the GPUs' energy, and the host's CPU and DRAM
        energy (where measured) only when the job sets ``cost_includes_cpu``."""
        energy_j = measurement.energy_j
        if self.config.cost_includes_cpu:
            energy_j += (measurement.cpu_energy_j or 0.0) + (measurement.dram_energy_j or 0.0)
        return zeus_cost(energy_j, measurement.time_s, self.config.eta, self._max_power_w)

    # --- internals ---------------------------------------------------------------------------
    def _profile_trusted(self) -> bool:
        """Whether the profile's ratios may price anything (``domain.physics``)."""
        return trusted(self.profiler.profile.measurements)

    def _cost_at_max_power(self, total: TimeEnergy) -> float:
        """``RunOutcome.default_cost``: the run's measured cost, each step trained at a lower
        limit the profile measured repriced at the per-step cost it measured at the highest
        candidate. The rest of the run (evaluation, data loading, the host's energy, the
        machine's noise) Default would have paid too, so it stays as measured. The measured
        cost itself when no limit was changed (measure mode, a fallback), nothing priced
        the maximum, or the profile contradicts physics (``domain.physics``: its ratios
        would price the load, not the limits)."""
        cost = self.cost_of(total)
        profile = self.profiler.profile
        top_w = max(profile.candidates_w, default=0)
        at_max = profile.measurements.get(top_w)
        if (
            self.profiler.mode == "measure"
            or at_max is None
            or self.steps_trained == 0
            or not self._profile_trusted()
        ):
            return cost
        eta, max_power_w = self.config.eta, self._max_power_w
        for limit_w, steps in self.profiler.steps_by_limit(self.steps_trained).items():
            measured = profile.measurements.get(limit_w)
            if measured is not None and limit_w != top_w:
                cost += steps * (
                    at_max.cost_per_step(eta, max_power_w)
                    - measured.cost_per_step(eta, max_power_w)
                )
        return cost

    def _stop_between_epochs(self) -> StopReason | None:
        if self.trained_nothing:
            return "no_steps"
        if self.reached_target:
            return "target"
        if self.epoch >= self.config.max_epochs:
            return "max_epochs"
        if self.early_stop_cost is not None and self.epoch > 0:
            so_far = self.cost_of(self.monitor.peek_window(_RUN_WINDOW))
            next_epoch = self._predicted_epoch_cost()
            if so_far + next_epoch > self.early_stop_cost:
                return self._at_cap()
            return self._hopeless(so_far, next_epoch)
        return None

    def _at_cap(self) -> StopReason:
        """Why the try stops at ``early_stop_cost``: its early-stop bound (``early_stop``),
        or the budget's cap, which says the size cannot win when the cap is at or past the
        cost at which it could (``cannot_win``), and only that it costs more (``budget_cap``)
        below it."""
        cap = self.budget_cap
        assert self.early_stop_cost is not None
        if cap is None or (cap.bound is not None and self.early_stop_cost >= cap.bound):
            return "early_stop"
        return "cannot_win" if self.early_stop_cost >= cap.verdict_cost else "budget_cap"

    def _priced_at(self, sample_cost: float) -> StopReason | None:
        """The try's cost per sample at the highest limit is measured (at its first step,
        or when its profile's first slice ends): under the budget's cap, price the try from
        it against the reference size (``budget.cost_range``). A size that cannot win, or
        cannot beat the best size, even at its most favourable stops now (``cannot_win``);
        one not expected to finish within a cap too low to judge it stops too
        (``budget_cap``); the rest train on."""
        cap = self.budget_cap
        assert cap is not None and cap.reference is not None
        estimate = cost_range(cap.reference, self.batch_size, sample_cost)
        if estimate.lowest > cap.verdict_cost or cannot_beat(estimate.lowest, cap.best_cost):
            return "cannot_win"
        room = cap.priced_cap if cap.priced_cap is not None else self.early_stop_cost
        if cap.horizon_runs is not None:
            return self._paid_back(estimate, room)
        if room is not None and estimate.expected > room < cap.verdict_cost:
            return "budget_cap"  # under a cap that could judge it, it runs to the verdict
        return None

    def _paid_back(self, estimate: CostEstimate, room: float | None) -> StopReason | None:
        """Whether a priced try goes on (``budget.priced_verdict``): one that cannot pay back
        within its horizon under any cap stops (``cannot_win``: a verdict, which only its
        neighbours' runs may overturn), one not worth trying under ``room`` (what the books
        pay) yet stops too (``budget_cap``: no verdict); the rest go on under the cap that
        pays back most."""
        cap = self.budget_cap
        assert cap is not None and cap.horizon_runs is not None
        verdict = priced_verdict(
            estimate,
            cap.best_cost,
            cap.horizon_runs,
            math.inf if room is None else room,
            cap.cost_margin,
            cap.cap_growth,
        )
        if verdict in ("never", "doubt"):
            return "cannot_win"
        if verdict == "wait":  # no verdict: its size's turn comes again (``walk_order``)
            return "budget_cap"
        assert isinstance(verdict, PricedCap)
        self._payback_cap = verdict.cap
        return None

    def _hopeless(self, so_far: float, next_epoch: float) -> StopReason | None:
        """A budget-capped try whose cost, predicted from its epochs so far at its most
        favourable (the fewest epochs its size can need), passes the cost at which its size
        could win (``cannot_win``: a verdict), or the cap (``budget_cap``: it cannot finish
        within what the budget pays for, so it stops before it spends more); or, not priced
        from its profile yet, is not expected to fit a cap too low to judge it."""
        cap = self.budget_cap
        if cap is None or self.early_stop_cost is None:
            return None
        if cap.min_epochs is not None:
            at_best = so_far + next_epoch * max(cap.min_epochs - self.epoch, 1.0)
            if at_best > cap.verdict_cost:
                return "cannot_win"
            if at_best > self.early_stop_cost:
                return "budget_cap"
        if not self._priced and cap.expected_epochs is not None:
            expected = so_far + next_epoch * max(cap.expected_epochs - self.epoch, 1.0)
            if expected > self.early_stop_cost < cap.verdict_cost:
                return "budget_cap"
        return None

    def _predicted_epoch_cost(self) -> float:
        """Cost of the next epoch: the last epoch's measured cost, or, when the last epoch was
        spent partly profiling, its steps at the per-step cost of the limit now in force."""
        assert self._last_epoch is not None
        profile = self.profiler.profile
        limit = self.profiler.power_limit_w
        if self._last_epoch_profiled and limit in profile.measurements:
            per_step = profile.measurements[limit].cost_per_step(self.config.eta, self._max_power_w)
            # The profile is the GPUs' alone; the host's part, when it counts, is the
            # last epoch's as measured.
            host = self.cost_of(self._last_epoch) - self.cost_of(
                TimeEnergy(self._last_epoch.time_s, self._last_epoch.energy_j)
            )
            return per_step * self._last_epoch_steps + host
        return self.cost_of(self._last_epoch)


def unrun_body(value: object) -> str | None:
    """Why a train function's return value shows that none of its body ran: a generator or
    a coroutine (it is a ``def`` with ``yield``, or an ``async def``); None otherwise."""
    if inspect.isgenerator(value) or inspect.iscoroutine(value):
        value.close()  # no "never awaited" warning: the message below says it
        kind = "a generator" if inspect.isgenerator(value) else "a coroutine"
    elif inspect.isasyncgen(value):
        kind = "an async generator"
    else:
        return None
    return (
        f"the train function returned {kind}, so none of its body ran: it is a generator "
        "or async function (def with yield, async def); expected a plain function that "
        f"iterates run.epochs() itself ({CONTRACT})"
    )


def check_run(run: object, caller: str) -> TrainingRun:
    """``run`` is the TrainingRun a framework's callback is built on (not None, not the
    Trainer): refused at once, before any training, naming the callback."""
    if not isinstance(run, TrainingRun):
        raise TypeError(
            f"{caller}(run={run!r}) is invalid: expected the TrainingRun the "
            "operator handed to the train function (def train(run): ...)"
        )
    return run


def _step_count(name: str, steps: object) -> int:
    """A count of steps: an integer in [0, DB_INT_MAX] (numpy's too); anything else breaks
    the contract."""
    count = real_number(steps)
    if not isinstance(count, int) or not 0 <= count <= DB_INT_MAX:
        raise TrainContractError(
            f"{name}(steps={short_repr(steps)}) is invalid: expected an integer in "
            f"[0, {DB_INT_MAX}], the number of training steps just done ({CONTRACT})"
        )
    return count


@contextmanager
def open_run(
    config: JobConfig,
    batch_size: int,
    device: GPUGroup,
    *,
    profile: PowerProfile | None = None,
    early_stop_cost: float | None = None,
    budget_cap: BudgetCap | None = None,
    keep_power_limit: bool = False,
    log: logging.Logger | None = None,
    synchronize: Synchronize | None = None,
    host_energy: HostEnergyMeter | None = None,
    profiling_credit: ProfilingCredit | None = None,
) -> Iterator[TrainingRun]:
    """One try of ``batch_size`` on ``device``, wired as the engine runs it: its energy
    monitor and power-limit profiler, its setup window open. Hand the run to a train function,
    then call :meth:`TrainingRun.finish`; leaving the block puts the GPUs' limits back.

    ``profile``: what is known of this size's power profile (default: nothing, so the run
    profiles every candidate limit). ``keep_power_limit``: change no setting (the profiler
    measures at the current limits). ``early_stop_cost``: the bound (None: unbounded);
    ``budget_cap``: set when it is the exploration budget's cap (a stop there is censored).
    ``synchronize``: waits for the GPUs' queued work at each window edge (None: the device's
    own hook). ``host_energy``: the host's CPU and DRAM meter (RAPL), None: not measured.
    ``profiling_credit``: what profiling may add to the run's cost (None: no limit)."""
    if profile is None:
        profile = PowerProfile(
            batch_size, device.model, device.count, device.candidate_power_limits_w()
        )
    profiler_config = (
        replace(config.profiler, mode="measure") if keep_power_limit else config.profiler
    )
    monitor = EnergyMonitor(device, synchronize=synchronize, host=host_energy)
    profiler = PowerLimitProfiler(
        device, monitor, profiler_config, config.eta, profile, log, profiling_credit
    )
    run = TrainingRun(config, batch_size, device, monitor, profiler, early_stop_cost, budget_cap)
    try:
        run.begin()
        yield run
    finally:
        profiler.restore()

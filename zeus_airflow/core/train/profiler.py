"""The just-in-time power-limit profiler (paper §4.2).

For a batch size never profiled on this GPU model, the first steps of training are sliced
over candidate power limits: at each limit, a warm-up to settle, then a measured slice. A
warm-up ends once at least ``warmup_steps`` steps and ``warmup_s`` seconds ran at the limit; a
slice once at least ``profile_steps`` steps and ``profile_s`` seconds were measured (seconds on
the device's clock: the monitor's window time), and at least ``SLICE_COUNTER_UPDATES`` updates
of a real GPU's energy counter, which advances in steps (every 0.1 s on an H200). The limits
measured are chosen by a search (core/common/limit_search.py): the maximum first, then a
golden-section search on the selector's objective. When it has converged, the best measured
limit (paper Eq. 7, or another selector) is applied for the rest of the run, and the profile
is kept so that later runs of the same batch size start at the optimum directly.

Robustness the design asks for:
- an epoch that ends mid-slice banks the steps measured so far and, after a fresh warm-up
  (by steps only: the limit did not change), the slice goes on in the next epoch; a run that
  ends mid-slice keeps the slice's measured part with the profile (``PowerProfile.partial``,
  stored), and the next run of the size continues that slice after its own warm-up, so runs
  and epochs shorter than a slice still get profiled;
- the limits found at start are put back by :meth:`restore` (the engine calls it on every
  exit path), not the maximum;
- limits that cannot be set (no permission, not supported, a MIG instance, a limit another
  task holds): one warning, then measurement at the current limit; the setter is never called
  when the device says so beforehand (``limits_fixed_because``);
- every limit set lies inside the device's range as read now: a stored profile's candidates
  or optimum from a GPU of the same model with another range are clamped (said once), and a
  GPU that narrows its range mid-run has it read again.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement, zeus_cost
from zeus_airflow.core.common.limit_search import LimitObjective, next_limit_w
from zeus_airflow.core.decide.budget import ProfilingCredit
from zeus_airflow.core.devices.base import (
    GPUGroup,
    PowerLimitPermissionError,
    PowerLimitRangeChangedError,
    PowerLimitUnavailableError,
    max_power_w,
    set_uniform_power_limit,
)
from zeus_airflow.core.domain import ObserverReport, PowerProfile, SliceInProgress
from zeus_airflow.core.train.monitor import EnergyMonitor, TimeEnergy

SLICE_COUNTER_UPDATES = 20
"""A slice spans at least this many updates of the energy counter. A window's edges each
fall somewhere inside an update, so it reads up to one update's energy too much or too little:
at 20 updates a slice errs by at most 5 % of its energy, about 2 % typically."""

_WARMUP_WINDOW = "zeus.profiler.warmup"
_SLICE_WINDOW = "zeus.profiler.slice"
_TRAIN_WINDOW = "zeus.profiler.after"


@dataclass(frozen=True)
class ProfileProgress:
    """How far a batch size's unfinished power profile got by the end of a try (over every
    run of the size so far), and what each limit it measures takes."""

    measured: int
    """Limits measured so far."""
    at_most: int
    """Limits the search may measure (its candidates); a converging search measures fewer."""
    limit_s: float
    """Seconds (device clock) a limit takes at least: its warm-up and its measured slice,
    each the longer of its seconds' floor (``warmup_s``; ``profile_s`` or the energy
    counter's updates) and its steps' floor (``warmup_steps``, ``profile_steps``) at the
    try's time per step."""
    waiting_for_budget: bool
    """Profiling paused: the exploration budget could not pay for the next slice."""

    @property
    def need_s(self) -> float:
        """Seconds the whole search may take, at most, in one run."""
        return self.at_most * self.limit_s


@dataclass
class _Phase:
    """A warm-up or a measured slice: over once at least ``min_steps`` steps and ``min_s``
    seconds (device clock) have passed in it."""

    min_steps: int
    min_s: float
    steps: int = 0
    time_s: float = 0.0

    @property
    def done(self) -> bool:
        return self.steps >= self.min_steps and self.time_s >= self.min_s

    def steps_left(self) -> int:
        """Steps until the phase may be over: the floor's, then an estimate from the time per
        step so far (at least 1: the profiler re-checks when told)."""
        if self.steps < self.min_steps:
            return self.min_steps - self.steps
        if self.steps == 0 or self.time_s <= 0:
            return 1
        per_step_s = self.time_s / self.steps
        return max(1, math.ceil((self.min_s - self.time_s) / per_step_s))


class PowerLimitProfiler:
    """Drives the power limit of one training run. Call the ``on_*`` hooks from the run."""

    def __init__(
        self,
        device: GPUGroup,
        monitor: EnergyMonitor,
        config: ProfilerConfig,
        eta: float,
        profile: PowerProfile,
        log: logging.Logger | None = None,
        credit: ProfilingCredit | None = None,
    ) -> None:
        self.device = device
        self.monitor = monitor
        self.config = config
        self.eta = eta
        self.profile = profile
        self.log = log or logging.getLogger(__name__)
        self.mode = config.mode
        self.optimal_power_limit_w: int | None = None
        self._original_w: tuple[int, ...] | None = None
        self._current_w: int | None = None
        self._objective = LimitObjective.of(config, eta, max_power_w(device))
        profile.search = self._objective
        self._warmup: _Phase | None = None
        """The warm-up under way; None while measuring."""
        self._slice = _Phase(config.profile_steps, config.profile_s)
        """The measured slice at the current limit, its banked part included."""
        self._profiling = False
        self._banked = TimeEnergy(0.0, 0.0)
        """Measured part of the current slice from earlier epochs."""
        self._at_last_step = TimeEnergy(0.0, 0.0)
        """The open slice window as of its last bookmark (a step's end): what an epoch's end
        banks, so that the evaluation run between the last step and the epoch's end stays
        out."""
        self._steps_at_bookmark = 0
        """The slice's steps (banked part included) as of that bookmark."""
        self._said_outside = False
        self.credit = credit
        """What slices may add to the run's cost (``core/decide/budget.py``); None: no limit."""
        self._waiting = False
        """Profiling is paused until the credit affords the next slice."""
        self._steps_run = 0
        self._steps_at: dict[int, int] = {}
        """Steps run while profiling, per limit (W): what the slices have added so far."""

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Remember the GPUs' limits, then begin profiling or apply the known optimum."""
        self._original_w = self.device.get_power_limits_w()
        if self.mode != "measure" and self.device.limits_fixed_because is not None:
            # The engine has said why, once per task; no setter is called.
            self.mode = "measure"
        if self.mode == "measure":
            self.log.info(
                "power-limit mode 'measure': training at the GPUs' current limits %s W",
                list(self._original_w),
            )
            self._price_at_current_limit()
            return
        self._profiling = True
        self._go_to(self._next_w())

    def _price_at_current_limit(self) -> None:
        """Measure mode: one slice at the limit the GPUs train at, never set, where the
        profile has none yet. Every size trains at that limit, so its cost per step there
        prices one size against another (``core/decide/budget.py``, ``cost_range``) where
        no limit can move; the slice costs nothing, for no setting changes. Only at a
        candidate limit the GPUs share (a limit set by hand between candidates, or one
        per GPU, prices nothing: the job then explores with what it saved)."""
        limits = set(self._original_w or ())
        if len(limits) != 1:
            return
        (limit_w,) = limits
        if limit_w not in self.profile.candidates_w or limit_w in self.profile.measurements:
            return
        self._current_w = limit_w
        self._profiling = True
        self._begin_measured_slice()
        self._start_warmup(limit_changed=False)

    def restore(self) -> None:
        """Put back the limits found at start. Safe to call twice and on any exit path."""
        if self._original_w is None or self._current_w is None:
            return
        if self._profiling and not self._waiting:  # mid-slice: keep it for the next run
            self._bank_open_slice()
        self._cancel_windows()
        try:
            if self.device.get_power_limits_w() != self._original_w:
                self.device.set_power_limits_w(self._original_w)
                self.log.info("power limits restored to %s W", list(self._original_w))
        except PowerLimitUnavailableError as err:
            # The setter went away mid-run (zeusd stopped): the try's figures stand, and the
            # task's lease puts the limits back once they can be set again.
            self.log.warning(
                "power limits could not be restored to %s W now: %s", list(self._original_w), err
            )
        self._current_w = None

    @property
    def is_profiling(self) -> bool:
        return self._profiling

    @property
    def profile_unfinished(self) -> bool:
        """Whether training has so far run at the limits being profiled, no optimum found
        yet: the try ended before its size's profile was complete (never in measure mode)."""
        return self.mode != "measure" and self.optimal_power_limit_w is None

    def progress(self, step_s: float) -> ProfileProgress | None:
        """How far the profile got, with training at ``step_s`` seconds a step; None once it
        is complete (or never profiled: measure mode)."""
        if not self.profile_unfinished:
            return None
        warmup_s = max(self.config.warmup_s, self.config.warmup_steps * step_s)
        slice_s = max(self._measure_s(), self.config.profile_steps * step_s)
        return ProfileProgress(
            len(self.profile.measurements),
            len(self.profile.candidates_w),
            warmup_s + slice_s,
            self._waiting,
        )

    @property
    def power_limit_w(self) -> int:
        """The limit training runs at now (W)."""
        if self._current_w is not None:
            return self._current_w
        return self.device.get_power_limits_w()[0]

    def steps_by_limit(self, steps_trained: int) -> dict[int, int]:
        """How many of the run's ``steps_trained`` steps ran at each limit (W): those counted
        while profiling at theirs, the rest at the limit in force now."""
        by_limit = dict(self._steps_at)
        rest = steps_trained - sum(by_limit.values())
        if rest > 0:
            by_limit[self.power_limit_w] = by_limit.get(self.power_limit_w, 0) + rest
        return by_limit

    def release_credit(self) -> None:
        """From here the try's own cap bounds what profiling adds (a probe that its price let
        go on): the search goes on without the credit."""
        self.credit = None

    # --- hooks from the training loop --------------------------------------------------------
    def steps_until_transition(self) -> int | None:
        """Steps that may run before the profiler must be told; None once it is done."""
        if not self._profiling:
            return None
        if self._waiting:
            return self._steps_until_affordable()
        return (self._warmup or self._slice).steps_left()

    def on_steps_done(self, steps: int) -> None:
        """``steps`` training steps finished (at most ``steps_until_transition()``)."""
        if not self._profiling:
            return
        self._count_steps(steps)
        if self._waiting:
            next_w = self._next_w()
            if next_w is None or self._affordable_probe(next_w) is not None:
                self._go_to(next_w)
            return
        if self._warmup is not None:
            self._warmup.steps += steps
            if self._warmup.min_s > 0:
                self._warmup.time_s = self.monitor.peek_time_s(_WARMUP_WINDOW)
            if self._warmup.done:
                self._end_warmup()
            return
        self._slice.steps += steps
        self._bookmark()
        self._slice.min_s = self._measure_s()  # the counter's period shows itself as it runs
        if self._slice.done:
            self._record_slice(self._banked + self.monitor.end_window(_SLICE_WINDOW))

    def _bookmark(self) -> None:
        """Keep the open slice as of this step's end (steps, time, energy), for an epoch's end
        to bank without the evaluation after it. Energy is read at most once per update of a
        real GPU's counter (every step on simulated GPUs): between updates it reads the same,
        and one reading costs 2.4 ms on an H200, as long as a small model's whole step."""
        elapsed_s = self.monitor.peek_time_s(_SLICE_WINDOW)
        self._slice.time_s = self._banked.time_s + elapsed_s
        period_s = self.device.energy_update_period_s()
        if period_s == 0 or elapsed_s - self._at_last_step.time_s >= period_s:
            self._at_last_step = self.monitor.peek_window(_SLICE_WINDOW, synchronize=False)
            self._steps_at_bookmark = self._slice.steps

    def on_epoch_end(self) -> None:
        """An epoch ended mid-slice: bank what the slice measured, and warm up again before
        measuring on, so that evaluation and the data loader's restart stay out of it."""
        if not self._profiling or self._waiting or self._current_w is None:
            return
        self._bank_open_slice()
        # The limit is unchanged, so no settling time: only the pipeline's restart (data
        # loader, caches) is kept out, by steps. A time floor here would swallow whole epochs
        # of short jobs.
        self._start_warmup(limit_changed=False)

    def observer_report(self) -> ObserverReport | None:
        """In observe mode with a finished profile: savings the optimum would have brought
        over the steps trained after profiling, from the measured per-step ratios."""
        if (
            self.mode != "observe"
            or self.optimal_power_limit_w is None
            or not self.monitor.is_open(_TRAIN_WINDOW)
        ):
            return None
        after = self.monitor.peek_window(_TRAIN_WINDOW)
        at_opt = self.profile.measurements[self.optimal_power_limit_w]
        at_train = self.profile.measurements.get(self.power_limit_w)
        if at_train is None:
            return None
        energy_ratio = at_opt.energy_per_step_j / at_train.energy_per_step_j
        time_ratio = at_opt.time_per_step_s / at_train.time_per_step_s
        return ObserverReport(after.energy_j * (1 - energy_ratio), after.time_s * (1 - time_ratio))

    # --- internals ---------------------------------------------------------------------------
    def _next_w(self) -> int | None:
        """The limit the search measures next, None once it has converged. It searches the
        candidates the device accepts now and those measured already; unmeasured ones
        outside the range (a profile made on a GPU of the same model whose range was wider)
        are skipped, said once."""
        low, high = self.device.power_limit_range_w()
        measured = self.profile.measurements
        usable = [w for w in self.profile.candidates_w if low <= w <= high or w in measured]
        skipped = set(self.profile.candidates_w) - set(usable)
        if skipped and not self._said_outside:
            self._said_outside = True
            self.log.warning(
                "power limits %s W of the stored profile lie outside this GPU's "
                "range [%d, %d] W: not profiled",
                sorted(skipped),
                low,
                high,
            )
        return next_limit_w(usable, measured, self._objective)

    def _clamped(self, limit_w: int) -> int:
        low, high = self.device.power_limit_range_w()
        clamped = min(max(limit_w, low), high)
        if clamped != limit_w:
            self.log.warning(
                "power limit %d W is outside this GPU's range [%d, %d] W: using %d W",
                limit_w,
                low,
                high,
                clamped,
            )
        return clamped

    def _set_limit(self, limit_w: int) -> bool:
        """Set ``limit_w`` (clamped into the range); False when limits cannot be set."""
        for _attempt in range(2):
            limit_w = self._clamped(limit_w)
            try:
                set_uniform_power_limit(self.device, limit_w)
            except PowerLimitUnavailableError as err:
                self._fall_back_to_measuring(err)
                return False
            except PowerLimitRangeChangedError as err:
                # NVML narrowed the range since it was read: clamp to the new one, once.
                self.log.warning("%s", err)
                continue
            self._current_w = limit_w
            return True
        self._fall_back_to_measuring(
            PowerLimitUnavailableError(f"the GPUs refused {limit_w} W twice")
        )
        return False

    def _fall_back_to_measuring(self, err: PowerLimitUnavailableError) -> None:
        hint = (
            " Grant CAP_SYS_ADMIN or run as root to let Zeus optimise them."
            if isinstance(err, PowerLimitPermissionError)
            else ""
        )
        self.log.warning(
            "cannot set GPU power limits (%s): continuing in measure mode at the current limits.%s",
            err,
            hint,
        )
        self.mode = "measure"
        self._profiling = False
        self._cancel_windows()
        if self._current_w is None:  # nothing was set: the GPUs are where they started
            self._price_at_current_limit()

    def _cancel_windows(self) -> None:
        self.monitor.cancel_window(_WARMUP_WINDOW)
        self.monitor.cancel_window(_SLICE_WINDOW)

    def _begin_slice(self, limit_w: int) -> None:
        """Set ``limit_w`` and warm up; the slice continues an earlier run's part at it."""
        if not self._set_limit(limit_w):
            return
        self._begin_measured_slice()
        self._start_warmup(limit_changed=True)

    def _begin_measured_slice(self) -> None:
        """A new slice at the current limit, continuing an earlier run's part at it."""
        self._slice = _Phase(self.config.profile_steps, self._measure_s())
        self._banked = TimeEnergy(0.0, 0.0)
        partial = self.profile.partial
        if partial is not None and partial.power_limit_w == self._current_w:
            self._slice.steps, self._slice.time_s = partial.steps, partial.time_s
            self._banked = TimeEnergy(partial.time_s, partial.energy_j)
            self.log.info(
                "power limit %d W: continuing its slice (%d steps, %.2f s measured "
                "by an earlier run)",
                partial.power_limit_w,
                partial.steps,
                partial.time_s,
            )

    def _bank_open_slice(self) -> None:
        """Add the open slice window (up to the last step's end) to the banked part, and keep
        that part with the profile, so that a run ending here leaves it to the next run."""
        if self.monitor.is_open(_SLICE_WINDOW):
            self.monitor.cancel_window(_SLICE_WINDOW)
            self._banked = self._banked + self._at_last_step
            self._slice.steps = self._steps_at_bookmark  # steps after it go unmeasured
            self._slice.time_s = self._banked.time_s
            self._at_last_step = TimeEnergy(0.0, 0.0)
        if self._current_w is not None and self._slice.steps > 0 and self._banked.time_s > 0:
            self.profile.partial = SliceInProgress(
                self._current_w, self._slice.steps, self._banked.time_s, self._banked.energy_j
            )

    def _start_warmup(self, limit_changed: bool) -> None:
        """Warm up (again) at the current limit; at once over when its floors are 0. The
        seconds' floor is for a new limit to settle, so only after a change of limit."""
        self._warmup = _Phase(
            self.config.warmup_steps, self.config.warmup_s if limit_changed else 0.0
        )
        self.monitor.cancel_window(_WARMUP_WINDOW)
        if self._warmup.done:
            self._end_warmup()
        elif self._warmup.min_s > 0:
            self.monitor.begin_window(_WARMUP_WINDOW)

    def _end_warmup(self) -> None:
        self._warmup = None
        self.monitor.cancel_window(_WARMUP_WINDOW)
        self.monitor.begin_window(_SLICE_WINDOW)
        self._at_last_step = TimeEnergy(0.0, 0.0)
        self._steps_at_bookmark = self._slice.steps

    def _record_slice(self, measured: TimeEnergy) -> None:
        assert self._current_w is not None
        steps = self._slice.steps
        self.profile.partial = None  # this slice's, or a stale one the search moved past
        self.profile.measurements[self._current_w] = LimitMeasurement(
            power_limit_w=self._current_w,
            avg_power_w=measured.avg_power_w,
            steps_per_s=steps / measured.time_s if measured.time_s > 0 else float("inf"),
        )
        self.log.debug(
            "profiled %d W: %.1f W average, %.3f s/step",
            self._current_w,
            measured.avg_power_w,
            measured.time_s / steps,
        )
        if self.mode == "measure":  # the one slice that prices the size: done
            self._profiling = False
            return
        self._go_to(self._next_w())

    def _go_to(self, next_w: int | None) -> None:
        """Measure ``next_w`` when the credit affords it, else wait at the best limit measured
        so far; apply the optimum once the search has converged (``next_w`` None)."""
        if next_w is None:
            self._profiling = self._waiting = False
            self._apply_optimum()
            return
        probe = self._affordable_probe(next_w)
        if probe is None:
            self._wait_for_credit(next_w)
        else:
            self._waiting = False
            self._begin_slice(probe)

    def _apply_optimum(self) -> None:
        if not self.profile.measurements:  # every candidate lay outside this GPU's range
            self._fall_back_to_measuring(
                PowerLimitUnavailableError(
                    "no candidate limit of the stored profile lies inside this GPU's range"
                )
            )
            return
        optimum = self.profile.optimum_w(self.config, self.eta, max_power_w(self.device))
        self.optimal_power_limit_w = optimum
        train_at = optimum if self.mode == "optimize" else self.device.power_limit_range_w()[1]
        if self._set_limit(train_at):
            self.log.info(
                "batch size %d: optimal power limit %d W (%s), training at %d W",
                self.profile.batch_size,
                optimum,
                self.config.selector,
                train_at,
            )
            self.monitor.begin_window(_TRAIN_WINDOW)

    # --- the credit: slices that fit the exploration budget ----------------------------------
    def _count_steps(self, steps: int) -> None:
        self._steps_run += steps
        if self._current_w is not None:
            self._steps_at[self._current_w] = self._steps_at.get(self._current_w, 0) + steps

    def _top(self) -> LimitMeasurement | None:
        """The measurement at the highest candidate (Default's limit), once it exists."""
        measured = self.profile.measurements
        return measured.get(max(self.profile.candidates_w)) if self.profile.candidates_w else None

    def _step_cost(self, measurement: LimitMeasurement) -> float:
        return measurement.cost_per_step(self.eta, self._objective.max_power_w)

    def _extra_per_step(self, limit_w: int, top: LimitMeasurement) -> float:
        """What a step at ``limit_w`` costs over one at the top limit: measured, or at most
        the dearer of the measured neighbours (the cost is close to unimodal over the
        limit), or with no neighbour below, as if the GPUs drew their limit doing the same
        work per step as at the top (energy per step unchanged, time stretched by the top's
        average power over the limit, never shrunk)."""
        measured = self.profile.measurements
        if limit_w in measured:
            return self._step_cost(measured[limit_w]) - self._step_cost(top)
        below = [w for w in measured if w < limit_w]
        above = [w for w in measured if w > limit_w]
        if below and above:
            dearer = max(
                self._step_cost(measured[max(below)]), self._step_cost(measured[min(above)])
            )
            return dearer - self._step_cost(top)
        stretch = max(1.0, top.avg_power_w / (self.device.count * limit_w))
        time_s = top.time_per_step_s * stretch
        cost = zeus_cost(top.energy_per_step_j, time_s, self.eta, self._objective.max_power_w)
        return cost - self._step_cost(top)

    def _measure_s(self) -> float:
        """Seconds a slice measures at least: ``profile_s``, and enough updates of the GPU's
        energy counter that reading it in whole updates errs by at most one in
        ``SLICE_COUNTER_UPDATES`` (an H200's counter advances every 0.1 s: 2 s a slice)."""
        period_s = self.device.energy_update_period_s()
        return max(self.config.profile_s, SLICE_COUNTER_UPDATES * period_s)

    def _slice_steps_bound(self, limit_w: int, top: LimitMeasurement) -> int:
        """Most steps a warm-up and slice at ``limit_w`` take (a step there is never faster
        than at the top limit), less what an earlier run measured of the slice."""
        per_step_s = top.time_per_step_s
        measured_steps, measured_s = 0, 0.0
        partial = self.profile.partial
        if partial is not None and partial.power_limit_w == limit_w:
            measured_steps, measured_s = partial.steps, partial.time_s
        warmup = max(self.config.warmup_steps, math.ceil(self.config.warmup_s / per_step_s))
        measure = max(
            self.config.profile_steps - measured_steps,
            math.ceil(max(self._measure_s() - measured_s, 0.0) / per_step_s),
        )
        return warmup + max(measure, 0)

    def _credit_left(self, top: LimitMeasurement) -> float:
        assert self.credit is not None
        spent = sum(steps * self._extra_per_step(w, top) for w, steps in self._steps_at.items())
        return self.credit.available(self._steps_run, self._step_cost(top), spent)

    def _affordable_probe(self, next_w: int) -> int | None:
        """The limit to measure now: the search's ``next_w`` when the credit affords it, else
        the highest unmeasured candidate between it and the top that the credit affords (a
        step a little down the curve is cheap to measure, and what it saves funds the
        search's probe; the search reuses it as a point); None when none is affordable.
        Called at every step while waiting: the credit is read once."""
        top = self._top()
        if self.credit is None or top is None:
            return next_w
        credit = self._credit_left(top)
        low, high = self.device.power_limit_range_w()
        measured = self.profile.measurements
        others = [
            w
            for w in sorted(self.profile.candidates_w, reverse=True)
            if next_w < w <= high and w >= low and w not in measured
        ]
        for limit_w in (next_w, *others):
            if limit_w == top.power_limit_w or self._slice_extra(limit_w, top) <= credit:
                return limit_w
        return None

    def _slice_extra(self, limit_w: int, top: LimitMeasurement) -> float:
        """The pessimistic extra cost of a warm-up and slice at ``limit_w``."""
        return self._slice_steps_bound(limit_w, top) * self._extra_per_step(limit_w, top)

    def _steps_until_affordable(self) -> int | None:
        """Steps until the credit affords the next slice; None when it never grows."""
        top, next_w = self._top(), self._next_w()
        if top is None or next_w is None or self.credit is None or self._current_w is None:
            return 1
        gain = self.credit.fraction * self._step_cost(top) - self._extra_per_step(
            self._current_w, top
        )
        if gain <= 0:
            return None
        needed = self._slice_extra(next_w, top)
        return max(1, math.ceil((needed - self._credit_left(top)) / gain))

    def _wait_for_credit(self, next_w: int) -> None:
        """Train at the best limit measured so far (observe mode: the maximum) until the
        credit affords ``next_w``."""
        self._warmup = None
        self._cancel_windows()
        self._slice = _Phase(self.config.profile_steps, self._measure_s())
        self._banked = TimeEnergy(0.0, 0.0)
        train_at = (
            self.profile.optimum_w(self.config, self.eta, self._objective.max_power_w)
            if self.mode == "optimize"
            else self.device.power_limit_range_w()[1]
        )
        if not self._waiting:
            self.log.info(
                "power limit %d W is profiled once the exploration budget affords "
                "its slice: training at %d W meanwhile",
                next_w,
                train_at,
            )
        self._waiting = True
        if self._current_w != train_at:
            self._set_limit(train_at)

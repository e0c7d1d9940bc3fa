"""A simulated GPU for real training on machines without one.

The training steps are real (PyTorch on the CPU, say) and take real wall-clock time; what is
simulated is the GPU: its power draw, and how much slower it runs under a power limit. Both
come from one measured power curve of the paper's traces, ``summary_power_<gpu>.csv``: the
rows of one workload at one batch size (by default the workload's default batch size b0). For a
power limit ``p``, with ``P_max`` the largest traced limit:

- ``slowdown(p) = time_per_epoch(p) / time_per_epoch(P_max)`` (1.0 at the maximum limit);
- ``power(p) = average_power(p)`` in W, as measured; limits between traced ones are
  interpolated linearly (:meth:`~zeus_airflow.core.common.traces.WorkloadTrace.epoch`).

The device's clock is simulated GPU time: every second of work at limit ``p`` counts as
``slowdown(p)`` seconds, that is, this machine stands for the traced GPU at its maximum limit,
and a lower limit stretches the same work as the measured curve says. The work is timed by
this process's own CPU time (``time.process_time``, as ``bench/gpu_recurring.py --simulated``
does), not by the host's wall clock: on a shared machine the wall clock follows the other
processes' load, and a profile timed by it measured the load, not the curve (a lower limit
twice as fast as the maximum, issue 47). Tests that need the wall clock's real noise (a
busy machine, a setup delay slept through) choose it: ``clock=time.monotonic``, or
``$ZEUS_SIMULATED_CLOCK=wall`` for a device opened from its ``device`` string. Energy is
``power(p) x simulated seconds x count``, drawn for as long as the run lasts (evaluation
included). So the profiler sees the trade-off the paper measured while the model really trains.
Every figure it produces is labelled ``simulated``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from zeus_airflow.core.common.traces import EpochPoint, WorkloadTrace
from zeus_airflow.core.devices.base import DeviceError, MeasurementKind
from zeus_airflow.core.devices.traced import TracedGPU

CLOCK_ENV = "ZEUS_SIMULATED_CLOCK"
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.monotonic}
"""What a simulated GPU's work is timed by, by the name ``$ZEUS_SIMULATED_CLOCK`` gives it:
this process's CPU time (the default), or the host's wall clock (for tests of real noise)."""
DEFAULT_CURVE_WORKLOAD = "cifar100"
"""The curve ``simulated:<gpu>`` uses: a small image classifier, the closest paper workload to
the models one trains on a CPU."""


class SimulatedGPU(TracedGPU):
    """``count`` identical simulated GPUs at one limit, following ``trace``'s power curve."""

    measurement: MeasurementKind = "simulated"

    def __init__(
        self,
        trace: WorkloadTrace,
        batch_size: int | None = None,
        count: int = 1,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``batch_size``: whose curve to follow (default: the trace's b0); ``clock``: what
        the work is timed by, in s (default: :func:`chosen_clock`; ``time.monotonic``: the
        host's wall clock, with whatever else the host runs in it)."""
        super().__init__(trace, count, "simulated")
        self.curve_batch_size = trace.default_batch_size if batch_size is None else batch_size
        if self.curve_batch_size not in trace.batch_sizes:
            raise DeviceError(
                f"batch_size={batch_size} is invalid: expected one of "
                f"{list(trace.batch_sizes)} (traced for {trace.workload.name} "
                f"on {trace.gpu})"
            )
        self._full_speed = trace.epoch(self.curve_batch_size, max(trace.power_limits_w))
        self._clock = chosen_clock() if clock is None else clock
        self._real_s = self._clock()
        self._simulated_s = 0.0
        self._energy_j = 0.0

    @property
    def source(self) -> str:
        """Which measured curve the device follows, for logs and docs."""
        return (
            f"summary_power_{self.trace.gpu}.csv, {self.trace.workload.name} at batch size "
            f"{self.curve_batch_size}"
        )

    def slowdown(self, limit_w: float) -> float:
        """Time per step at ``limit_w`` over time per step at the maximum limit (>= ~1)."""
        return self._point(limit_w).time_s / self._full_speed.time_s

    def power_w(self, limit_w: float) -> float:
        """Average power one GPU draws while training at ``limit_w``, in W."""
        return self._point(limit_w).avg_power_w

    # --- the GPUGroup interface -------------------------------------------------------------
    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        if len(set(limits_w)) > 1:
            raise DeviceError(
                f"limits_w={list(limits_w)} is invalid: a simulated group runs "
                "all its GPUs at one limit"
            )
        self._settle()  # the time so far ran at the old limit
        super().set_power_limits_w(limits_w)

    def energy_j(self) -> float:
        self._settle()
        return self._energy_j

    def now_s(self) -> float:
        self._settle()
        return self._simulated_s

    def energy_update_period_s(self) -> float:
        return 0.0

    # --- internals ---------------------------------------------------------------------------
    def _point(self, limit_w: float) -> EpochPoint:
        return self.trace.epoch(self.curve_batch_size, limit_w)

    def _settle(self) -> None:
        """Turn the work timed since the last settlement into simulated time and energy."""
        real_s = self._clock()
        limit_w = self._limits_w[0]
        simulated_s = (real_s - self._real_s) * self.slowdown(limit_w)
        self._simulated_s += simulated_s
        self._energy_j += self.power_w(limit_w) * simulated_s * self.count
        self._real_s = real_s


def chosen_clock() -> Callable[[], float]:
    """The clock ``$ZEUS_SIMULATED_CLOCK`` names (:data:`CLOCKS`; unset: ``cpu``), checked
    when the device opens, before any limit changes."""
    name = os.environ.get(CLOCK_ENV, "cpu")
    if name not in CLOCKS:
        raise DeviceError(
            f"{CLOCK_ENV}={name!r} is invalid: expected one of {', '.join(CLOCKS)} (the "
            "simulated GPU's work timed by this process's CPU time, or by the wall clock)"
        )
    return CLOCKS[name]

"""A virtual GPU that replays the paper's traces on a virtual clock.

Time per step and power follow the trace for the current (workload, batch size, power limit),
so the real profiler, monitor and engine see the same trade-offs the paper measured, and a
hundred recurrences of a days-long job take a fraction of a second. Every figure it produces
is labelled ``replayed``.
"""

from __future__ import annotations

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.base import DeviceError, MeasurementKind
from zeus_airflow.core.devices.traced import TracedGPU


class ReplayGPU(TracedGPU):
    """``count`` identical GPUs of the traced model, all at the same limit and speed."""

    measurement: MeasurementKind = "replayed"

    def __init__(self, trace: WorkloadTrace, count: int = 1) -> None:
        super().__init__(trace, count, "replay")
        self._batch_size = trace.default_batch_size
        self._clock_s = 0.0
        self._energy_j = 0.0

    def energy_j(self) -> float:
        return self._energy_j

    def now_s(self) -> float:
        return self._clock_s

    def energy_update_period_s(self) -> float:
        return 0.0

    # --- replay controls ---------------------------------------------------------------------
    def use_batch_size(self, batch_size: int) -> None:
        """Select which traced batch size the following steps replay."""
        if batch_size not in self.trace.batch_sizes:
            raise DeviceError(
                f"batch_size={batch_size} is not traced for "
                f"{self.trace.workload.name} on {self.trace.gpu}: expected one of "
                f"{list(self.trace.batch_sizes)}"
            )
        self._batch_size = batch_size

    def steps_per_epoch(self) -> int:
        return self.trace.steps_per_epoch(self._batch_size)

    def advance_steps(self, steps: int) -> None:
        """Run ``steps`` training steps: the virtual clock and energy counter move on."""
        point = self.trace.epoch(self._batch_size, self._limits_w[0])
        seconds = point.time_s * steps / self.steps_per_epoch()
        self._clock_s += seconds
        self._energy_j += point.avg_power_w * seconds * self.count

"""A virtual GPU that replays the paper's traces on a virtual clock.

Time per step and power follow the trace for the current (workload, batch size, power limit),
so the real profiler, monitor and engine see the same trade-offs the paper measured, and a
hundred recurrences of a days-long job take a fraction of a second. Every figure it produces
is labelled ``replayed``.
"""

from __future__ import annotations

from collections.abc import Sequence

from zeus_airflow.core.devices.base import DeviceError, Measurement
from zeus_airflow.core.traces import WorkloadTrace


class ReplayGPU:
    """``count`` identical GPUs of the traced model, all at the same limit and speed."""

    measurement: Measurement = "replayed"

    def __init__(self, trace: WorkloadTrace, count: int = 1) -> None:
        if count < 1:
            raise DeviceError(f"count={count} is invalid: expected an integer >= 1")
        self.trace = trace
        self.model = f"{trace.gpu.upper()} (replay)"
        self.count = count
        self.indices = tuple(range(count))
        self._limits_w = [max(trace.power_limits_w)] * count
        self._batch_size = trace.default_batch_size
        self._clock_s = 0.0
        self._energy_j = 0.0

    # --- the GPUGroup interface -------------------------------------------------------------
    def power_limit_range_w(self) -> tuple[int, int]:
        return min(self.trace.power_limits_w), max(self.trace.power_limits_w)

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        return tuple(sorted(self.trace.power_limits_w, reverse=True))

    def get_power_limits_w(self) -> tuple[int, ...]:
        return tuple(self._limits_w)

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        low, high = self.power_limit_range_w()
        if len(limits_w) != self.count:
            raise DeviceError(f"expected {self.count} power limits, got {len(limits_w)}")
        for limit in limits_w:
            if not low <= limit <= high:
                raise DeviceError(f"power limit {limit} W is outside [{low}, {high}] W")
        self._limits_w = list(limits_w)

    def energy_j(self) -> float:
        return self._energy_j

    def now_s(self) -> float:
        return self._clock_s

    limits_fixed_because: str | None = None

    def synchronize(self) -> None:
        """Replayed and simulated work is synchronous: nothing is queued."""

    def close(self) -> None:
        pass

    # --- replay controls ---------------------------------------------------------------------
    def use_batch_size(self, batch_size: int) -> None:
        """Select which traced batch size the following steps replay."""
        if batch_size not in self.trace.batch_sizes:
            raise DeviceError(f"batch_size={batch_size} is not traced for "
                              f"{self.trace.workload.name} on {self.trace.gpu}: expected one of "
                              f"{list(self.trace.batch_sizes)}")
        self._batch_size = batch_size

    def steps_per_epoch(self) -> int:
        return self.trace.steps_per_epoch(self._batch_size)

    def advance_steps(self, steps: int) -> None:
        """Run ``steps`` training steps: the virtual clock and energy counter move on."""
        point = self.trace.epoch(self._batch_size, self._limits_w[0])
        seconds = point.time_s * steps / self.steps_per_epoch()
        self._clock_s += seconds
        self._energy_j += point.avg_power_w * seconds * self.count


"""The power limits of a GPU model the paper traced: what the replayed and the simulated GPU
share. They differ only in how time and energy pass (``replay.py``, ``simulated.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.base import DeviceError, MeasurementKind


class TracedGPU:
    """``count`` identical GPUs of ``trace``'s model, all at one limit; the limits are the
    traced ones (W). Subclasses add the clock (``now_s``) and the energy counter
    (``energy_j``)."""

    measurement: MeasurementKind
    limits_fixed_because: str | None = None

    def __init__(self, trace: WorkloadTrace, count: int, label: str) -> None:
        """``label``: how the model name says it is not a real GPU (``V100 (replay)``)."""
        if count < 1:
            raise DeviceError(f"count={count} is invalid: expected an integer >= 1")
        self.trace = trace
        self.model = f"{trace.gpu.upper()} ({label})"
        self.count = count
        self.indices = tuple(range(count))
        self._limits_w = [max(trace.power_limits_w)] * count

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

    def synchronize(self) -> None:
        """Replayed and simulated work is synchronous: nothing is queued."""

    def close(self) -> None:
        pass

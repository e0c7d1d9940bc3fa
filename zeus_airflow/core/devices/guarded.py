"""Real GPUs whose power limits can be frozen for the rest of a task.

A task that may not change its GPUs' limits (they are leased to another task, zeusd is
unreachable, the task is being killed) still trains and measures on them: the limits are
frozen, and the profiler, which meets :class:`PowerLimitUnavailableError` on the first change,
measures at the current limit instead. The leases that decide when to freeze live in
``core/train/gpu_lease.py``; this wrapper knows nothing of the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from zeus_airflow.core.devices.base import GPUGroup, MeasurementKind, PowerLimitUnavailableError


@runtime_checkable
class LeasableGPUs(GPUGroup, Protocol):
    """Real GPUs, which have UUIDs: the only ones whose limits outlive the task."""

    uuids: tuple[str, ...]


class GuardedGPUs:
    """Real GPUs whose limits can be frozen: after :meth:`freeze`, setting a limit raises
    PowerLimitUnavailableError, which the profiler answers by measuring at the current limit,
    and :attr:`limits_fixed_because` says why, so that the engine never tries."""

    def __init__(self, device: LeasableGPUs) -> None:
        self.device = device
        self.measurement: MeasurementKind = device.measurement
        self.model = device.model
        self.count = device.count
        self.indices = device.indices
        self.uuids = device.uuids
        self.control: str = getattr(device, "control", "nvml")
        """How the limits are set: ``nvml`` or ``zeusd``."""
        self.frozen_because: str | None = None

    def freeze(self, because: str) -> None:
        if self.frozen_because is None:
            self.frozen_because = because

    def power_limit_range_w(self) -> tuple[int, int]:
        return self.device.power_limit_range_w()

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        return self.device.candidate_power_limits_w()

    def get_power_limits_w(self) -> tuple[int, ...]:
        return self.device.get_power_limits_w()

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        if self.frozen_because is not None:
            raise PowerLimitUnavailableError(self.frozen_because)
        self.device.set_power_limits_w(limits_w)

    @property
    def limits_fixed_because(self) -> str | None:
        return self.frozen_because or self.device.limits_fixed_because

    def energy_j(self) -> float:
        return self.device.energy_j()

    def now_s(self) -> float:
        return self.device.now_s()

    def energy_update_period_s(self) -> float:
        return self.device.energy_update_period_s()

    def synchronize(self) -> None:
        self.device.synchronize()

    def close(self) -> None:
        self.device.close()

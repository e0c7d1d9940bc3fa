"""The device interface: the GPUs one training task uses, seen as one group.

The engine, profiler and monitor only talk to this interface, so the same code runs on real
NVIDIA GPUs (``nvml.py``), on the trace-replay GPU (``replay.py``) and on the simulated GPU
used for real CPU training (``simulated.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

MeasurementKind = Literal["measured", "replayed", "simulated"]
"""Where a figure comes from: a real GPU's counters, a replayed trace, or a power model."""

POWER_LIMIT_STEP_W = 25
"""Spacing of candidate power limits, as in the paper (100..250 W on a V100 in steps of 25)."""


class DeviceError(RuntimeError):
    """The GPUs cannot be used as asked (none visible, NVML missing, unknown trace...)."""


class BackendUnavailableError(DeviceError):
    """This backend's library, driver or GPUs are not on this node (no NVIDIA driver on an AMD
    node, say): ``auto`` tries the next backend. Any other DeviceError is the answer."""


class PowerLimitUnavailableError(DeviceError):
    """The GPUs' power limits cannot be changed now (no permission, not supported, a MIG
    instance, a limit another task holds). Training goes on at the current limits."""


class PowerLimitPermissionError(PowerLimitUnavailableError):
    """The process may not change power limits (needs root or CAP_SYS_ADMIN)."""


class PowerLimitRangeChangedError(DeviceError):
    """The GPUs refused a limit inside the range read at start: the range was read again
    (``power_limit_range_w()`` answers the new one, also in :attr:`range_w`), so the caller
    may clamp to it and try once more."""

    def __init__(self, message: str, range_w: tuple[int, int]) -> None:
        super().__init__(message)
        self.range_w = range_w


@runtime_checkable
class GPUGroup(Protocol):
    """The GPUs a task trains on. Every GPU in the group gets the same power limit."""

    measurement: MeasurementKind
    model: str
    """GPU model name, e.g. ``NVIDIA A40``; profiles are keyed by it."""
    count: int
    """How many GPUs the group holds."""
    indices: tuple[int, ...]
    """Device indices of the GPUs (NVML indices for real GPUs)."""

    def power_limit_range_w(self) -> tuple[int, int]:
        """(min, max) power limit one GPU accepts, in W."""
        ...

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        """Limits the profiler tries, highest first, all inside ``power_limit_range_w``."""
        ...

    def get_power_limits_w(self) -> tuple[int, ...]:
        """The current power limit of each GPU, in W."""
        ...

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        """Set each GPU's limit (W). Raises PowerLimitUnavailableError (or its subclass
        PowerLimitPermissionError) when the limits cannot be changed."""
        ...

    @property
    def limits_fixed_because(self) -> str | None:
        """Why the limits cannot be changed, known before trying (a MIG instance, a limit
        another task holds, an earlier refusal); None when they may be. The engine then
        measures at the current limits without calling the setter."""
        ...

    def synchronize(self) -> None:
        """Wait until the work queued on the GPUs has finished (CUDA kernels launched
        asynchronously), so that a measurement window's edge is the work's edge."""
        ...

    def energy_j(self) -> float:
        """Energy consumed by all GPUs of the group since an arbitrary origin, in J."""
        ...

    def now_s(self) -> float:
        """Monotonic time in s on the clock the device's energy follows (virtual for replay)."""
        ...

    def energy_update_period_s(self) -> float:
        """How often ``energy_j`` advances, as seen so far, in s: a real GPU's energy counter
        advances in steps (about 0.1 s on an H200), so shorter windows read whole steps.
        0.0 where it advances continuously (simulated and replayed GPUs, sampled power)."""
        ...

    def close(self) -> None:
        """Release resources (sampling threads, NVML handles). Does not touch limits."""
        ...


def power_control(device: GPUGroup, measuring_only: bool = False) -> str | None:
    """How a task could change ``device``'s power limits: ``zeusd`` (through the daemon),
    ``nvml`` or ``amdsmi`` (directly) or ``none`` (they could not be changed, or
    ``measuring_only``: the profiler measured at the current limits); None for a replayed
    or simulated GPU, whose limits are virtual."""
    if device.measurement != "measured":
        return None
    if measuring_only or device.limits_fixed_because is not None:
        return "none"
    return str(getattr(device, "control", "nvml"))


def max_power_w(device: GPUGroup) -> float:
    """MAXPOWER of the cost metric: the sum of the GPUs' maximum power limits, in W."""
    return float(device.power_limit_range_w()[1] * device.count)


def set_uniform_power_limit(device: GPUGroup, limit_w: int) -> None:
    """Give every GPU of the group the same limit (W)."""
    device.set_power_limits_w([limit_w] * device.count)


def candidate_limits_in_range(
    min_w: int, max_w: int, step_w: int = POWER_LIMIT_STEP_W
) -> tuple[int, ...]:
    """Limits from max down to min in steps of ``step_w``; min is always included.

    Real GPUs report odd ranges (an A100 PCIe: 150..250 W, an H100 SXM: 200..700 W), so the
    grid is anchored at the maximum and clipped into the range rather than assumed.
    """
    if min_w > max_w:
        raise DeviceError(f"power-limit range is empty: min {min_w} W > max {max_w} W")
    limits = list(range(max_w, min_w - 1, -step_w))
    if limits[-1] != min_w:
        limits.append(min_w)
    return tuple(limits)


def one_model(named: Sequence[tuple[int, str]], remedy: str) -> str:
    """The one model of a group's GPUs ((index, model) each); a DeviceError listing each
    GPU's model, and ``remedy``, when they differ: their profiles and ranges differ."""
    if len({model for _, model in named}) > 1:
        listing = ", ".join(f"GPU {index}: {model}" for index, model in named)
        raise DeviceError(f"the GPUs of a group must be one model, got {listing}; {remedy}")
    return named[0][1]

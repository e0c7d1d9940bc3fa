"""Energy and time over named measurement windows, which may nest and overlap.

A window remembers the device's clock and cumulative energy at its start; ending it returns
the difference. Windows are independent, so the profiler's per-limit windows can run inside
the engine's whole-run window and the run's per-epoch windows at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeus_airflow.core.devices.base import GPUGroup


@dataclass(frozen=True)
class Measurement:
    """Energy (J, summed over the group's GPUs) and wall time (s) of one window."""

    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def __add__(self, other: Measurement) -> Measurement:
        return Measurement(self.time_s + other.time_s, self.energy_j + other.energy_j)


class EnergyMonitor:
    """Measurement windows over one GPU group."""

    def __init__(self, device: GPUGroup) -> None:
        self.device = device
        self._open: dict[str, tuple[float, float]] = {}

    def begin_window(self, name: str) -> None:
        if name in self._open:
            raise ValueError(f"measurement window {name!r} is already open")
        self._open[name] = (self.device.now_s(), self.device.energy_j())

    def peek_window(self, name: str) -> Measurement:
        """What the window has measured so far, leaving it open."""
        if name not in self._open:
            raise KeyError(f"measurement window {name!r} is not open")
        start_s, start_j = self._open[name]
        return Measurement(self.device.now_s() - start_s, self.device.energy_j() - start_j)

    def end_window(self, name: str) -> Measurement:
        measurement = self.peek_window(name)
        del self._open[name]
        return measurement

    def cancel_window(self, name: str) -> None:
        """Forget a window without measuring (a profiling slice cut by an epoch's end)."""
        self._open.pop(name, None)

    def is_open(self, name: str) -> bool:
        return name in self._open

"""Energy and time over named measurement windows, which may nest and overlap.

A window remembers the device's clock and cumulative energy at its start; ending it returns
the difference. Windows are independent, so the profiler's per-limit windows can run inside
the engine's whole-run window and the run's per-epoch windows at the same time.

Every window edge first waits for the GPUs' queued work (``synchronize``: the device group's
hook, or the caller's own for frameworks other than PyTorch), as upstream Zeus does: kernels
are launched asynchronously, so without it a window would end before the work it measures,
and the next one (at another power limit) would be charged with it. The host's CPU package
and DRAM energy (RAPL, ``devices/rapl.py``) are measured over the same windows when a reader
is given; they are reported beside the GPUs' energy, never mixed into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from zeus_airflow.core.devices.base import GPUGroup
from zeus_airflow.core.devices.rapl import HostEnergy
from zeus_airflow.core.devices.sync import Synchronize


@dataclass(frozen=True)
class TimeEnergy:
    """Energy (J, summed over the group's GPUs) and wall time (s) of one window; the host's
    CPU package and DRAM energy (J) over the same window, None where not measured."""

    time_s: float
    energy_j: float
    cpu_energy_j: float | None = None
    dram_energy_j: float | None = None

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def __add__(self, other: TimeEnergy) -> TimeEnergy:
        return TimeEnergy(
            self.time_s + other.time_s,
            self.energy_j + other.energy_j,
            _add(self.cpu_energy_j, other.cpu_energy_j),
            _add(self.dram_energy_j, other.dram_energy_j),
        )


class HostEnergyMeter(Protocol):
    """The host's energy since an arbitrary origin (``RAPLReader``)."""

    def read(self) -> HostEnergy: ...


class EnergyMonitor:
    """Measurement windows over one GPU group (and the host's CPU and DRAM, when given)."""

    def __init__(
        self,
        device: GPUGroup,
        *,
        synchronize: Synchronize | None = None,
        host: HostEnergyMeter | None = None,
    ) -> None:
        self.device = device
        self.synchronize: Synchronize = synchronize or device.synchronize
        self.host = host
        self._open: dict[str, tuple[float, float, HostEnergy]] = {}

    def begin_window(self, name: str) -> None:
        if name in self._open:
            raise ValueError(f"measurement window {name!r} is already open")
        self.synchronize()
        self._open[name] = self._read()

    def peek_window(self, name: str, *, synchronize: bool = True) -> TimeEnergy:
        """What the window has measured so far, leaving it open. ``synchronize=False`` reads
        without waiting for queued work (a per-step bookmark must not stall the pipeline)."""
        if name not in self._open:
            raise KeyError(f"measurement window {name!r} is not open")
        if synchronize:
            self.synchronize()
        start_s, start_j, start_host = self._open[name]
        now_s, now_j, now_host = self._read()
        return TimeEnergy(
            now_s - start_s,
            now_j - start_j,
            _sub(now_host.cpu_energy_j, start_host.cpu_energy_j),
            _sub(now_host.dram_energy_j, start_host.dram_energy_j),
        )

    def peek_time_s(self, name: str) -> float:
        """The window's time so far (s), without reading energy: a real GPU's energy reading
        costs 2.4 ms on an H200 (bench/RESULTS.md), its clock next to nothing."""
        if name not in self._open:
            raise KeyError(f"measurement window {name!r} is not open")
        return self.device.now_s() - self._open[name][0]

    def end_window(self, name: str) -> TimeEnergy:
        measurement = self.peek_window(name)
        del self._open[name]
        return measurement

    def cancel_window(self, name: str) -> None:
        """Forget a window without measuring (a profiling slice cut by an epoch's end)."""
        self._open.pop(name, None)

    def is_open(self, name: str) -> bool:
        return name in self._open

    def _read(self) -> tuple[float, float, HostEnergy]:
        host = self.host.read() if self.host is not None else HostEnergy(None, None)
        return self.device.now_s(), self.device.energy_j(), host


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def _sub(now: float | None, start: float | None) -> float | None:
    return None if now is None or start is None else now - start

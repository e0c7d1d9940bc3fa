"""A fake NVML: an object that speaks pynvml's API over GPUs that exist only in memory.

Pass it where the NVML module is expected (``NVMLGPUs(nvml=FakeNVML(...))``). It uses pynvml's
own constants and error classes, so code that handles the real module's errors handles the
fake's. Units are NVML's: power and limits in mW, energy in mJ.

Each GPU draws ``power_model(limit_mw)`` mW. Energy follows power over the fake's clock: real
monotonic time by default, or a :class:`ManualClock` the test advances, so a training loop can
"spend" exact seconds at a limit and every figure is known in advance. Every call that tries
to change a setting is logged in :attr:`FakeNVML.set_calls`, whether NVML allowed it or not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml
from pynvml import (
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVMLError,
)

PowerModel = Callable[[int], float]
"""Power a GPU draws (mW) as a function of its power limit (mW)."""


def draws_90_percent(limit_mw: int) -> float:
    """The default power model: a busy GPU running just under its cap."""
    return 0.9 * limit_mw


class ManualClock:
    """A monotonic clock in s that only moves when the test calls :meth:`advance`."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self._now_s = start_s

    def __call__(self) -> float:
        return self._now_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"seconds={seconds} is invalid: a monotonic clock cannot go back")
        self._now_s += seconds


@dataclass(frozen=True)
class FakeGPUSpec:
    """One fake GPU. Limits in mW; the default limit is the maximum unless given."""

    model: str = "NVIDIA A40"
    min_limit_mw: int = 100_000
    max_limit_mw: int = 300_000
    default_limit_mw: int | None = None
    energy_counter: bool = True
    """Whether nvmlDeviceGetTotalEnergyConsumption works (Volta and newer)."""
    power_model: PowerModel = draws_90_percent

    def __post_init__(self) -> None:
        if not 0 < self.min_limit_mw <= self.max_limit_mw:
            raise ValueError(f"min_limit_mw={self.min_limit_mw}, max_limit_mw="
                             f"{self.max_limit_mw} are invalid: expected 0 < min <= max")
        default = self.default_limit_mw
        if default is not None and not self.min_limit_mw <= default <= self.max_limit_mw:
            raise ValueError(f"default_limit_mw={default} is invalid: expected a value in "
                             f"[{self.min_limit_mw}, {self.max_limit_mw}]")


@dataclass(frozen=True)
class SetLimitCall:
    """One call of nvmlDeviceSetPowerManagementLimit."""

    index: int
    limit_mw: int
    allowed: bool
    """False when NVML refused it (no permission or out of range)."""


class _FakeGPU:
    """The state of one fake GPU; also serves as its NVML handle."""

    def __init__(self, index: int, spec: FakeGPUSpec, clock: Callable[[], float]) -> None:
        self.index = index
        self.spec = spec
        self.uuid = f"GPU-{index:08x}-fa6e-4000-8000-{index:012x}"
        self.limit_mw = spec.default_limit_mw or spec.max_limit_mw
        self._clock = clock
        self._since_s = clock()
        self._energy_mj = 0.0

    def power_mw(self) -> float:
        return self.spec.power_model(self.limit_mw)

    def energy_mj(self) -> float:
        """Exact energy since creation; the limit is constant since the last settlement."""
        now_s = self._clock()
        self._energy_mj += self.power_mw() * (now_s - self._since_s)
        self._since_s = now_s
        return self._energy_mj


class FakeNVML:
    """Module-like fake of pynvml over ``count`` GPUs of ``spec`` (or the given ``gpus``)."""

    def __init__(self, count: int = 1, spec: FakeGPUSpec | None = None, *,
                 gpus: Sequence[FakeGPUSpec] | None = None, can_set_limits: bool = True,
                 clock: Callable[[], float] = time.monotonic, bytes_strings: bool = False,
                 init_error: int | None = None) -> None:
        """``can_set_limits``: whether the process holds CAP_SYS_ADMIN. ``bytes_strings``:
        names and UUIDs come back as bytes, as in nvidia-ml-py before 11.515. ``init_error``:
        the NVML error code nvmlInit raises (no driver, say)."""
        specs = list(gpus) if gpus is not None else [spec or FakeGPUSpec()] * count
        self.clock = clock
        self.can_set_limits = can_set_limits
        self.bytes_strings = bytes_strings
        self.init_error = init_error
        self.set_calls: list[SetLimitCall] = []
        self.init_count = 0
        self._gpus = [_FakeGPU(i, s, clock) for i, s in enumerate(specs)]
        self._lock = threading.Lock()  # the sampling thread reads while the test sets

    # --- inspection for tests ----------------------------------------------------------------
    def gpu_uuids(self) -> list[str]:
        return [gpu.uuid for gpu in self._gpus]

    def limits_mw(self) -> list[int]:
        return [gpu.limit_mw for gpu in self._gpus]

    def true_energy_mj(self, index: int) -> float:
        """Exact energy of one GPU since the fake was made, counter supported or not."""
        with self._lock:
            return self._gpus[index].energy_mj()

    def allowed_sets(self) -> list[tuple[int, int]]:
        """(GPU index, limit in mW) of every set call NVML accepted, in order."""
        return [(c.index, c.limit_mw) for c in self.set_calls if c.allowed]

    # --- the pynvml API ------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.init_count -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _FakeGPU:
        self._check_init()
        if not 0 <= index < len(self._gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _FakeGPU:
        self._check_init()
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self._gpus:
            if gpu.uuid == wanted:
                return gpu
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: _FakeGPU) -> int:
        return self._device(handle).index

    def nvmlDeviceGetName(self, handle: _FakeGPU) -> str | bytes:
        return self._string(self._device(handle).spec.model)

    def nvmlDeviceGetUUID(self, handle: _FakeGPU) -> str | bytes:
        return self._string(self._device(handle).uuid)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: _FakeGPU) -> list[int]:
        spec = self._device(handle).spec
        return [spec.min_limit_mw, spec.max_limit_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _FakeGPU) -> int:
        spec = self._device(handle).spec
        return spec.default_limit_mw or spec.max_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _FakeGPU) -> int:
        return self._device(handle).limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _FakeGPU) -> int:
        return self._device(handle).limit_mw

    def nvmlDeviceSetPowerManagementLimit(self, handle: _FakeGPU, limit: int) -> None:
        gpu = self._device(handle)
        in_range = gpu.spec.min_limit_mw <= limit <= gpu.spec.max_limit_mw
        allowed = self.can_set_limits and in_range
        self.set_calls.append(SetLimitCall(gpu.index, limit, allowed))
        if not self.can_set_limits:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        if not in_range:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            gpu.energy_mj()  # energy so far was drawn at the old limit
            gpu.limit_mw = limit

    def nvmlDeviceGetPowerUsage(self, handle: _FakeGPU) -> int:
        with self._lock:
            return round(self._device(handle).power_mw())

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _FakeGPU) -> int:
        gpu = self._device(handle)
        if not gpu.spec.energy_counter:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            return int(gpu.energy_mj())  # the real counter is a whole number of mJ

    def __getattr__(self, name: str) -> Any:
        """pynvml's own constants and error classes (``fake.NVML_ERROR_NO_PERMISSION``,
        ``fake.NVMLError_NotSupported``), so the same except clauses catch the fake's errors."""
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(f"FakeNVML does not implement {name!r}; add it to "
                             "zeus_airflow/testing/fake_nvml.py if the code under test needs it")

    # --- internals ---------------------------------------------------------------------------
    def _check_init(self) -> None:
        if self.init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _device(self, handle: _FakeGPU) -> _FakeGPU:
        self._check_init()
        if not isinstance(handle, _FakeGPU) or handle not in self._gpus:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle

    def _string(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text

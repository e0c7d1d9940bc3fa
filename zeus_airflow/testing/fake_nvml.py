"""A fake NVML: an object that speaks pynvml's API over GPUs that exist only in memory.

Pass it where the NVML module is expected (``NVMLGPUs(nvml=FakeNVML(...))``). It uses pynvml's
own constants and error classes, so code that handles the real module's errors handles the
fake's. Units are NVML's: power and limits in mW, energy in mJ.

Each GPU draws ``power_model(limit_mw)`` mW. Energy follows power over the fake's clock: real
monotonic time by default, or a :class:`ManualClock` the test advances, so a training loop can
"spend" exact seconds at a limit and every figure is known in advance. Every call that tries
to change a setting is logged in :attr:`FakeNVML.set_calls`, whether NVML allowed it or not,
and every NVML function called is counted in :attr:`FakeNVML.calls`.

What real NVML does and the fake copies (nvidia-ml-py 12/13, the NVML API reference):

- MIG: ``nvmlDeviceGetMigMode`` answers ``[current, pending]`` on Ampere and newer and
  ``NOT_SUPPORTED`` before; a MIG instance is found by its UUID (``MIG-<uuid>``, or the
  older ``MIG-GPU-<gpu uuid>/<gi>/<ci>``) through ``nvmlDeviceGetHandleByUUID``, and its
  parent through ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``. Power, energy and limits
  belong to the parent: on an instance's handle they answer ``NOT_SUPPORTED``.
- No energy counter before Volta: ``nvmlDeviceGetTotalEnergyConsumption`` answers
  ``NOT_SUPPORTED``; ``nvmlDeviceGetPowerUsage`` works.
- Setting a limit: ``NO_PERMISSION`` without root or CAP_SYS_ADMIN, ``INVALID_ARGUMENT``
  outside the constraints, ``NOT_SUPPORTED`` on boards that do not allow it (GeForce, some
  cloud VMs).
- The energy counter (mJ since the driver was loaded) starts again from 0 when the driver is
  reloaded: :meth:`FakeNVML.reload_driver_counters`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml
from pynvml import (
    NVML_DEVICE_ARCH_AMPERE,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
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


def pci_address(index: int) -> str:
    """The PCI address of fake GPU ``index`` as ``lspci -D`` (and zeusd) write it; NVML's
    ``busId`` has the same with an 8-digit domain."""
    return f"0000:{0x11 + index:02x}:00.0"


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
    energy_update_s: float = 0.0
    """How often the energy counter advances (s): it holds the energy as of its last update,
    as real ones do (about 0.1 s on an H200, bench/RESULTS.md); 0 advances at every read."""
    power_model: PowerModel = draws_90_percent
    architecture: int = NVML_DEVICE_ARCH_AMPERE
    """What nvmlDeviceGetArchitecture answers (pynvml's NVML_DEVICE_ARCH_* values)."""
    mig_mode: bool | None = False
    """MIG mode: enabled, disabled, or None where the GPU has no MIG (before Ampere: the
    call answers NOT_SUPPORTED)."""
    mig_instances: int = 0
    """MIG instances on the GPU (with ``mig_mode=True``)."""
    set_limit_error: int | None = None
    """An NVML error code every nvmlDeviceSetPowerManagementLimit answers (e.g.
    NVML_ERROR_NOT_SUPPORTED on a board that does not allow it); None: it works."""

    def __post_init__(self) -> None:
        if not 0 < self.min_limit_mw <= self.max_limit_mw:
            raise ValueError(
                f"min_limit_mw={self.min_limit_mw}, max_limit_mw="
                f"{self.max_limit_mw} are invalid: expected 0 < min <= max"
            )
        default = self.default_limit_mw
        if default is not None and not self.min_limit_mw <= default <= self.max_limit_mw:
            raise ValueError(
                f"default_limit_mw={default} is invalid: expected a value in "
                f"[{self.min_limit_mw}, {self.max_limit_mw}]"
            )
        if self.mig_instances and not self.mig_mode:
            raise ValueError(f"mig_instances={self.mig_instances} is invalid without mig_mode=True")
        if not self.energy_update_s >= 0:
            raise ValueError(f"energy_update_s={self.energy_update_s} is invalid: expected >= 0")


A100_PCIE = FakeGPUSpec(model="NVIDIA A100-PCIE-40GB", min_limit_mw=150_000, max_limit_mw=250_000)
"""An A100 PCIe card's range as NVML reports it (``dataclasses.replace`` for variants)."""
A100_SXM4 = FakeGPUSpec(model="NVIDIA A100-SXM4-40GB", min_limit_mw=100_000, max_limit_mw=400_000)
"""An A100 SXM4 module's range as NVML reports it."""


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
        self.constraints_mw = (spec.min_limit_mw, spec.max_limit_mw)
        self.counter_origin_mj = 0
        """True energy at the driver's last (re)load: the counter counts from there."""
        self.mig = [_FakeMigInstance(self, gi) for gi in range(1, spec.mig_instances + 1)]
        self._clock = clock
        self._since_s = clock()
        self._energy_mj = 0.0
        self._last_reading = (0, 0)
        """(counter origin, last reading): the counter never goes back but at a reload."""

    def power_mw(self) -> float:
        return self.spec.power_model(self.limit_mw)

    def energy_mj(self) -> float:
        """Exact energy since creation; the limit is constant since the last settlement."""
        now_s = self._clock()
        self._energy_mj += self.power_mw() * (now_s - self._since_s)
        self._since_s = now_s
        return self._energy_mj

    def counter_mj(self) -> int:
        """What the energy counter reads now: the energy as of its last update (whole mJ)."""
        energy_mj = self.energy_mj()
        period_s = self.spec.energy_update_s
        if period_s > 0:  # back to the last update, at the power drawn since
            energy_mj -= self.power_mw() * (self._since_s % period_s)
        reading = int(energy_mj) - self.counter_origin_mj
        # A limit changed since the update must not make the counter go backwards.
        origin, last = self._last_reading
        if origin == self.counter_origin_mj:
            reading = max(reading, last)
        self._last_reading = (self.counter_origin_mj, reading)
        return reading


class _FakeMigInstance:
    """A MIG instance (GPU instance ``gi``, compute instance 0); also its NVML handle."""

    def __init__(self, parent: _FakeGPU, gi: int) -> None:
        self.parent = parent
        self.gi = gi
        self.uuid = f"MIG-{parent.index:08x}-319c-5000-8000-{gi:012x}"
        self.legacy_uuid = f"MIG-{parent.uuid}/{gi}/0"
        """The UUID form of drivers before R470, still accepted by CUDA and NVML."""


class FakeNVML:
    """Module-like fake of pynvml over ``count`` GPUs of ``spec`` (or the given ``gpus``)."""

    def __init__(
        self,
        count: int = 1,
        spec: FakeGPUSpec | None = None,
        *,
        gpus: Sequence[FakeGPUSpec] | None = None,
        can_set_limits: bool = True,
        clock: Callable[[], float] = time.monotonic,
        bytes_strings: bool = False,
        init_error: int | None = None,
    ) -> None:
        """``can_set_limits``: whether the process holds CAP_SYS_ADMIN. ``bytes_strings``:
        names and UUIDs come back as bytes, as in nvidia-ml-py before 11.515. ``init_error``:
        the NVML error code nvmlInit raises (no driver, say)."""
        specs = list(gpus) if gpus is not None else [spec or FakeGPUSpec()] * count
        self.clock = clock
        self.can_set_limits = can_set_limits
        self.bytes_strings = bytes_strings
        self.init_error = init_error
        self.set_calls: list[SetLimitCall] = []
        self.calls: Counter[str] = Counter()
        """How many times each NVML function was called."""
        self.init_count = 0
        self.driver_version = "550.54.15"
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

    def mig_uuids(self, index: int, legacy: bool = False) -> list[str]:
        """The UUIDs of one GPU's MIG instances (``legacy``: ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
        return [m.legacy_uuid if legacy else m.uuid for m in self._gpus[index].mig]

    def reload_driver_counters(self, index: int) -> None:
        """The driver was reloaded: the GPU's energy counter starts again from 0."""
        with self._lock:
            gpu = self._gpus[index]
            gpu.counter_origin_mj = int(gpu.energy_mj())

    def set_constraints_mw(self, index: int, min_mw: int, max_mw: int) -> None:
        """The board's accepted range changed (another power cap, a new VBIOS setting)."""
        self._gpus[index].constraints_mw = (min_mw, max_mw)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml"):
            object.__getattribute__(self, "calls")[name] += 1
        return object.__getattribute__(self, name)

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

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _FakeGPU | _FakeMigInstance:
        """Whole GPUs by ``GPU-`` UUID, MIG instances by either MIG form (full UUIDs only:
        prefixes are CUDA's convenience, not NVML's)."""
        self._check_init()
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self._gpus:
            if gpu.uuid == wanted:
                return gpu
            for instance in gpu.mig:
                if wanted in (instance.uuid, instance.legacy_uuid):
                    return instance
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: _FakeGPU) -> int:
        return self._device(handle).index

    def nvmlDeviceGetName(self, handle: _FakeGPU | _FakeMigInstance) -> str | bytes:
        if isinstance(handle, _FakeMigInstance):
            return self._string(f"{self._device(handle.parent).spec.model} MIG 1g.10gb")
        return self._string(self._device(handle).spec.model)

    def nvmlDeviceGetUUID(self, handle: _FakeGPU | _FakeMigInstance) -> str | bytes:
        if isinstance(handle, _FakeMigInstance):
            self._device(handle.parent)
            return self._string(handle.uuid)
        return self._string(self._device(handle).uuid)

    def nvmlDeviceGetPciInfo(self, handle: _FakeGPU) -> Any:
        """Only ``busId``, NVML's form (``00000000:11:00.0``)."""
        return SimpleNamespace(busId=self._string(f"0000{pci_address(self._device(handle).index)}"))

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check_init()
        return self._string(self.driver_version)

    def nvmlDeviceGetArchitecture(self, handle: _FakeGPU) -> int:
        return self._device(handle).spec.architecture

    def nvmlDeviceGetMigMode(self, handle: _FakeGPU) -> list[int]:
        mode = self._device(handle).spec.mig_mode
        if mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        value = NVML_DEVICE_MIG_ENABLE if mode else NVML_DEVICE_MIG_DISABLE
        return [value, value]

    def nvmlDeviceIsMigDeviceHandle(self, handle: _FakeGPU | _FakeMigInstance) -> bool:
        if isinstance(handle, _FakeMigInstance):
            self._device(handle.parent)
            return True
        self._device(handle)
        return False

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, handle: _FakeGPU | _FakeMigInstance
    ) -> _FakeGPU:
        if not isinstance(handle, _FakeMigInstance):
            self._device(handle)
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._device(handle.parent)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _FakeGPU) -> int:
        gpu = self._device(handle)
        if gpu.spec.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7 if gpu.spec.mig_mode else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _FakeGPU, index: int) -> _FakeMigInstance:
        gpu = self._device(handle)
        if not 0 <= index < len(gpu.mig):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return gpu.mig[index]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: _FakeGPU) -> list[int]:
        return list(self._device(handle).constraints_mw)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _FakeGPU) -> int:
        spec = self._device(handle).spec
        return spec.default_limit_mw or spec.max_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _FakeGPU) -> int:
        return self._device(handle).limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _FakeGPU) -> int:
        return self._device(handle).limit_mw

    def nvmlDeviceSetPowerManagementLimit(self, handle: _FakeGPU, limit: int) -> None:
        gpu = self._device(handle)
        low, high = gpu.constraints_mw
        in_range = low <= limit <= high
        refused = gpu.spec.set_limit_error
        allowed = self.can_set_limits and in_range and refused is None
        self.set_calls.append(SetLimitCall(gpu.index, limit, allowed))
        if refused is not None:
            raise NVMLError(refused)
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
        with self._lock:  # the real counter is a whole number of mJ
            return gpu.counter_mj()

    def __getattr__(self, name: str) -> Any:
        """pynvml's own constants and error classes (``fake.NVML_ERROR_NO_PERMISSION``,
        ``fake.NVMLError_NotSupported``), so the same except clauses catch the fake's errors."""
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(
            f"FakeNVML does not implement {name!r}; add it to "
            "zeus_airflow/testing/fake_nvml.py if the code under test needs it"
        )

    # --- internals ---------------------------------------------------------------------------
    def _check_init(self) -> None:
        if self.init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _device(self, handle: object) -> _FakeGPU:
        """The whole GPU a handle names; a MIG instance's handle has no power, energy or
        limits of its own (NOT_SUPPORTED)."""
        self._check_init()
        if isinstance(handle, _FakeMigInstance) and handle.parent in self._gpus:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(handle, _FakeGPU) or handle not in self._gpus:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return handle

    def _string(self, text: str) -> str | bytes:
        return text.encode() if self.bytes_strings else text

"""A fake of AMD SMI's Python API (``import amdsmi``, ROCm's ``amdsmi`` package): the functions,
the exception and the init flags the AMD device uses, over AMD GPUs that exist in memory.

Only the GPU is faked: the names, arguments, return dictionaries and units are AMD SMI's
(``amdsmi_interface.py`` in ROCm/amdsmi, ROCm 6.1 and later), so the device code under test is
the code that runs on an AMD node. The real package cannot be imported without ROCm's
``libamd_smi.so`` (it loads it at import), hence a fake rather than the real module over a
stub library.

- power caps in µW (``amdsmi_get_power_cap_info``, ``amdsmi_set_power_cap(handle, 0, µW)``);
- power in whole W (``amdsmi_get_power_info``: ``current_socket_power``,
  ``average_socket_power``, ``"N/A"`` where the GPU does not report one);
- energy as an accumulator of ticks of ``counter_resolution`` µJ
  (``amdsmi_get_energy_count``: ``energy_accumulator`` since AMD SMI 6.2.1, ``power`` before,
  ``energy_key`` picks which);
- errors as ``AmdSmiLibraryException(code)`` with AMD SMI's status codes (no permission 10,
  not supported 2, invalid 1); a handle that is not one, as ``amdsmi_interface.py`` checks
  it, as ``AmdSmiParameterException`` ("Invalid parameter", before any library call);
- HIP's numbering (``amdsmi_get_gpu_enumeration_info``: ``hip_id``, ``hip_uuid``; AMD SMI
  25.3, ROCm 6.4): ``hip_ids`` gives the HIP index of each GPU in PCI order (an MI350X node
  where the two orders differ), ``enumeration=False`` plays an older AMD SMI without the call;
- an accumulator at the wrong rate (ROCm/amdsmi#38): ``accumulator_rate``.

A dual-die MI250/MI250X shows as two GPUs (two GCDs, two handles); AMD's driver reports the
package's power and energy on the first die only, and 0 W on the second (upstream Zeus #113 and
PR #203): ``FakeAMDSMI(packages, MI250X, dual_die=True)`` plays that.

```python
fake = FakeAMDSMI(2, MI300X, clock=clock)         # two MI300X at 750 W
gpus = AMDSMIGPUs(amdsmi=fake, clock=clock)
clock.advance(10.0)                                 # 10 s drawing 90 % of 750 W each
fake.set_calls                                      # [(handle position, µW, allowed), ...]
```
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from zeus_airflow.testing.fake_nvml import FakeGPUSpec, _FakeGPU

AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
_INFO = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
}

MI300X = FakeGPUSpec(
    model="AMD Instinct MI300X",
    min_limit_mw=200_000,
    max_limit_mw=750_000,
    default_limit_mw=750_000,
)
MI250X = FakeGPUSpec(
    model="AMD Instinct MI250X / MI250",
    min_limit_mw=200_000,
    max_limit_mw=560_000,
    default_limit_mw=560_000,
)
"""One package (two dies): its power cap and draw are the package's."""


class AmdSmiException(Exception):
    """AMD SMI's base exception."""


class AmdSmiLibraryException(AmdSmiException):
    """An error status from the library, as AMD SMI raises it."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _INFO.get(err_code, f"AMDSMI status {err_code}")

    def __str__(self) -> str:
        return f"An error occured with code: {self.err_code}({self.err_info})"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self) -> str:
        return self.err_info


class AmdSmiParameterException(AmdSmiException):
    """A wrong argument type, found by the Python layer before the library is called."""

    def __init__(self, received: object, expected: type) -> None:
        super().__init__(None)
        self.err_msg = (
            f"Invalid parameter:\nActual type: {type(received)}\nExpected type: {expected}"
        )

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


@dataclass(eq=False)
class _Handle:
    """A processor handle: one die; ``package`` is the GPU state it shares with its twin."""

    position: int
    package: _FakeGPU
    second_die: bool
    bdf: str
    uuid: str


class FakeAMDSMI:
    """Module-like fake of ``amdsmi`` over ``count`` GPUs (packages) of ``spec``, each two
    dies with ``dual_die``. ``can_set_limits``: the process's privilege (root, a writable
    /sys); ``energy_key``: the accumulator's key; ``resolution_uj``: µJ per tick;
    ``init_error``: a status ``amdsmi_init`` raises (no driver, say)."""

    # The module's own names, as ``amdsmi.AmdSmiLibraryException`` and the like.
    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags

    def __init__(
        self,
        count: int = 1,
        spec: FakeGPUSpec = MI300X,
        *,
        dual_die: bool = False,
        clock: Callable[[], float] | None = None,
        can_set_limits: bool = True,
        energy_key: Literal["energy_accumulator", "power"] = "energy_accumulator",
        resolution_uj: float = 15.259,
        init_error: int | None = None,
        hip_ids: list[int] | None = None,
        enumeration: bool = True,
        accumulator_rate: float = 1.0,
    ) -> None:
        import time

        self.clock = clock or time.monotonic
        self.can_set_limits = can_set_limits
        self.energy_key = energy_key
        self.resolution_uj = resolution_uj
        self.init_error = init_error
        self.enumeration = enumeration
        self.accumulator_rate = accumulator_rate
        self.packages = [_FakeGPU(i, spec, self.clock) for i in range(count)]
        dies = 2 if dual_die else 1
        self._handles = [
            _Handle(
                position=i * dies + die,
                package=package,
                second_die=die == 1,
                bdf=f"0000:{0xC1 + i * dies + die:02x}:00.0",
                uuid=f"{i * dies + die:08x}-1d6a-4000-8000-a{i:011x}",
            )
            for i, package in enumerate(self.packages)
            for die in range(dies)
        ]
        self.hip_ids = hip_ids or list(range(len(self._handles)))
        self.set_calls: list[tuple[int, int, bool]] = []
        """(handle position, µW, allowed) of every amdsmi_set_power_cap."""
        self.init_count = 0
        self.calls: dict[str, int] = {}

    # --- what tests read ---------------------------------------------------------------------
    def caps_uw(self) -> list[int]:
        """Each package's power cap, in µW."""
        return [p.limit_mw * 1000 for p in self.packages]

    def true_energy_uj(self, package: int) -> float:
        return self.packages[package].energy_mj() * 1000.0

    # --- amdsmi's API --------------------------------------------------------------------------
    def amdsmi_init(self, flags: int = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self._count("amdsmi_init")
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.init_count += 1

    def amdsmi_shut_down(self) -> None:
        self._count("amdsmi_shut_down")
        self.init_count = max(0, self.init_count - 1)

    def amdsmi_get_processor_handles(self) -> list[_Handle]:
        self._check_init("amdsmi_get_processor_handles")
        return list(self._handles)

    @property
    def amdsmi_get_gpu_enumeration_info(self) -> Callable[[_Handle], dict[str, Any]]:
        """Absent (AttributeError, as from the real module) with ``enumeration=False``."""
        if not self.enumeration:
            raise AttributeError(
                "module 'amdsmi' has no attribute 'amdsmi_get_gpu_enumeration_info'"
            )
        return self._enumeration_info

    def _enumeration_info(self, handle: _Handle) -> dict[str, Any]:
        h = self._handle(handle, "amdsmi_get_gpu_enumeration_info")
        hip_id = self.hip_ids[h.position]
        return {
            "drm_render": 128 + h.position,
            "drm_card": 1 + h.position,
            "hsa_id": 2 + h.position,
            "hip_id": hip_id,
            "hip_uuid": f"GPU-{0xA0 + h.position:016x}",
        }

    def amdsmi_get_gpu_asic_info(self, handle: _Handle) -> dict[str, Any]:
        h = self._handle(handle, "amdsmi_get_gpu_asic_info")
        return {"market_name": h.package.spec.model, "vendor_id": "0x1002", "vendor_name": "AMD"}

    def amdsmi_get_gpu_device_bdf(self, handle: _Handle) -> str:
        return self._handle(handle, "amdsmi_get_gpu_device_bdf").bdf

    def amdsmi_get_gpu_device_uuid(self, handle: _Handle) -> str:
        return self._handle(handle, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_power_cap_info(self, handle: _Handle) -> dict[str, int]:
        package = self._handle(handle, "amdsmi_get_power_cap_info").package
        low_mw, high_mw = package.constraints_mw
        default_mw = package.spec.default_limit_mw or package.spec.max_limit_mw
        return {
            "power_cap": package.limit_mw * 1000,
            "default_power_cap": default_mw * 1000,
            "dpm_cap": 0,
            "min_power_cap": low_mw * 1000,
            "max_power_cap": high_mw * 1000,
        }

    def amdsmi_set_power_cap(self, handle: _Handle, sensor_ind: int, cap: int) -> None:
        h = self._handle(handle, "amdsmi_set_power_cap")
        low_mw, high_mw = h.package.constraints_mw
        in_range = low_mw * 1000 <= cap <= high_mw * 1000 and sensor_ind == 0
        self.set_calls.append((h.position, cap, self.can_set_limits and in_range))
        if not self.can_set_limits:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NO_PERM)
        if not in_range:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        h.package.energy_mj()  # energy so far was drawn at the old cap
        h.package.limit_mw = cap // 1000

    def amdsmi_get_power_info(self, handle: _Handle) -> dict[str, Any]:
        h = self._handle(handle, "amdsmi_get_power_info")
        watts = 0 if h.second_die else round(h.package.power_mw() / 1000)
        return {
            "current_socket_power": watts,
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": h.package.limit_mw // 1000,
        }

    def amdsmi_get_energy_count(self, handle: _Handle) -> dict[str, Any]:
        h = self._handle(handle, "amdsmi_get_energy_count")
        energy_uj = 0.0 if h.second_die else h.package.energy_mj() * 1000.0 * self.accumulator_rate
        return {
            self.energy_key: int(energy_uj / self.resolution_uj),
            "counter_resolution": self.resolution_uj,
            "timestamp": int(self.clock() * 1e9),
        }

    # --- internals ---------------------------------------------------------------------------
    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _check_init(self, name: str) -> None:
        self._count(name)
        if self.init_count <= 0:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)

    def _handle(self, handle: object, name: str) -> _Handle:
        self._check_init(name)
        if not isinstance(handle, _Handle):
            raise AmdSmiParameterException(handle, _Handle)
        if handle not in self._handles:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        return handle

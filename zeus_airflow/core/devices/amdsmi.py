"""AMD GPUs through AMD SMI (ROCm's ``amdsmi`` Python package), as one :class:`~.base.GPUGroup`,
for workers that may set power limits themselves (root, or a writable ``/sys``). Unprivileged
tasks on AMD nodes go through zeusd instead (``zeusd.py``; zeusd drives AMD GPUs in builds
after its 0.5.0 release).

AMD SMI speaks µW for power caps, whole W for power and ticks of ``counter_resolution`` µJ for
energy; this module converts at the boundary (mW for the limits, shared with NVML's code in
``milliwatts.py``; J and W above). Energy comes from the GPUs' energy accumulators when every
GPU has one, otherwise from their power, sampled and integrated, as for NVML.

**Dual-die MI250 / MI250X.** Each package shows as two GPUs (two GCDs), and AMD's driver
reports the package's power and energy on the first die and 0 W on the second (upstream Zeus
#113 and PR #203). The two dies also share the package's one power cap. So a die is read
through the first die of its package: a group holding both dies counts the package once and
sets its cap once; a group holding one die (another task may hold its twin) measures the whole
package (``energy_shared``, the twin's work in it) and never sets the cap, which would cap the
twin's work too. A second die that does report its own power (firmware that splits it) is
taken as a GPU of its own.

**Which GPUs HIP uses.** ``HIP_VISIBLE_DEVICES`` (else ``CUDA_VISIBLE_DEVICES``) lists HIP's
device indices, which are not AMD SMI's (PCI) order on every node (MI350X: upstream Zeus #229).
Each GPU's HIP index comes from ``amdsmi_get_gpu_enumeration_info()["hip_id"]`` (AMD SMI 25.3,
ROCm 6.4 and later), as upstream Zeus's ``zeus/device/gpu/amd.py`` maps it since #229; an
older AMD SMI without it falls back to PCI order. Entries are parsed as ``visible.py`` reads
them for every vendor: a bad one names the variable.

**Energy accumulators are checked at start.** Some boards' accumulators run at the wrong rate
(ROCm/amdsmi#38): as upstream Zeus's ``AMDGPUs._init_gpus`` does (``zeus/device/gpu/amd.py``),
each package's accumulator is read over half a second against its power; one off by more than
ten times either way, or a package that reports no power to check against, makes the group
sample power instead (one warning).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from zeus_airflow.core.devices import base, milliwatts
from zeus_airflow.core.devices.base import DeviceError, MeasurementKind, one_model
from zeus_airflow.core.devices.controlled import ControlledGPUs
from zeus_airflow.core.devices.energy import CountedOrSampled, EnergyCounters, PowerIntegrator
from zeus_airflow.core.devices.sync import CUDASynchronizer, Synchronize
from zeus_airflow.core.devices.visible import first_set, strict_positions

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_INTERVAL_S = 0.1
STATUS_INVAL, STATUS_NOT_SUPPORTED, STATUS_NO_PERM = 1, 2, 10
"""AMD SMI's status codes (amdsmi_wrapper.AMDSMI_STATUS_*) this module tells apart."""
LEASE_ID_PREFIX = "amdsmi:"
DUAL_DIE_MODELS = ("MI250",)
VISIBLE_ENVS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
"""Which GPUs HIP (PyTorch on ROCm) uses, as upstream Zeus reads them: HIP's indices."""
COUNTER_CHECK_S = 0.5
COUNTER_RATIO_BOUNDS = (0.1, 10.0)
"""How long, and how far from power x time, an accumulator is checked at start (upstream's)."""


@dataclass(frozen=True)
class _Die:
    """One GPU as AMD SMI lists it; ``reader``: the index whose power, energy and cap are
    this die's package's (itself, or the first die of an MI250 package)."""

    index: int
    handle: Any
    name: str
    reader: int
    twin: int | None


class AMDSMIGPUs(CountedOrSampled, ControlledGPUs):
    """The AMD GPUs of ``indices`` (AMD SMI's), or those HIP uses when None.

    ``amdsmi`` is the module (a fake in tests), ``clock`` the monotonic clock in s energy is
    integrated over, ``sample_interval_s`` the power sampling period where a GPU has no
    energy accumulator, ``energy_source`` ``sampling`` to sample even where accumulators
    exist (some boards' run at the wrong rate: ROCm/amdsmi#38). ``uuids`` are
    ``amdsmi:<uuid>``, what the power-limit leases record.
    """

    measurement: MeasurementKind = "measured"
    control = "amdsmi"
    library_name = "AMD SMI"

    def __init__(
        self,
        indices: Sequence[int] | None = None,
        *,
        amdsmi: Any = None,
        clock: Callable[[], float] = time.monotonic,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        synchronize: Synchronize | None = None,
        energy_source: Literal["auto", "sampling"] = "auto",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if energy_source not in ("auto", "sampling"):
            raise DeviceError(
                f"energy_source={energy_source!r} is invalid: expected auto or sampling"
            )
        self._smi = _load(amdsmi)
        self._clock = clock
        _init(self._smi)
        try:
            self._open(indices, synchronize)
            self._counters, self._sampler = self._energy(energy_source, sample_interval_s, sleep)
        except BaseException:
            self._smi.amdsmi_shut_down()
            raise
        self._closed = False

    def _open(self, indices: Sequence[int] | None, synchronize: Synchronize | None) -> None:
        dies = _dies(self._smi, self._call("amdsmi_get_processor_handles"))
        shown = _shown(self._smi, [d.handle for d in dies], self._call)
        chosen = _checked(shown if indices is None else tuple(indices), len(dies))
        self._dies = [dies[i] for i in chosen]
        self.indices: tuple[int, ...] = tuple(chosen)
        self.count = len(chosen)
        self.model = one_model(
            [(d.index, d.name) for d in self._dies],
            "restrict HIP_VISIBLE_DEVICES or the indices to GPUs of one model",
        )
        self.uuids: tuple[str, ...] = tuple(
            LEASE_ID_PREFIX + str(self._call("amdsmi_get_gpu_device_uuid", d.handle))
            for d in self._dies
        )
        readers = dict.fromkeys(d.reader for d in self._dies)
        self._readers = _Readers(self, [dies[i] for i in readers])
        alone = [d for d in self._dies if d.twin is not None and d.twin not in chosen]
        self.energy_shared = bool(alone)
        """A die of an MI250 package without its twin: the package's energy, the twin's
        work in it (never subtracted)."""
        self._fixed_because: str | None = _alone_because(alone)
        self._range_w = self._limit_range_w()
        self._read_mw: milliwatts.ReadLimits = {}
        # HIP's device numbers in this process: positions among the GPUs HIP shows.
        self._sync = synchronize or CUDASynchronizer(
            tuple(shown.index(i) for i in chosen if i in shown)
        )

    def _energy(
        self, source: str, sample_interval_s: float, sleep: Callable[[float], None]
    ) -> tuple[EnergyCounters | None, PowerIntegrator | None]:
        if source == "auto" and self._readers.have_counters():
            wrong = self._readers.counters_wrong(sleep)
            if wrong is None:
                return EnergyCounters(self._readers), None
            log.warning("AMD GPUs %s: %s; power is sampled instead", self.indices, wrong)
        return None, PowerIntegrator(self._readers.total_power_w, self._clock, sample_interval_s)

    # --- the GPUGroup interface -------------------------------------------------------------
    def get_power_limits_w(self) -> tuple[int, ...]:
        caps = [self._cap_info(d)["power_cap"] for d in self._dies]
        return milliwatts.remember(self._read_mw, [round(uw / 1000) for uw in caps])

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        """Set each package's cap (once per package; every value checked before any GPU
        changes; the exact mW read is written back); when one refuses, those already set go
        back first."""
        if self._fixed_because is not None and self.energy_shared:
            raise base.PowerLimitUnavailableError(self._fixed_because)
        limits_mw = milliwatts.to_mw(
            self._read_mw, limits_w, self._range_w, self.model, self.indices
        )
        before_mw = [round(self._cap_info(d)["power_cap"] / 1000) for d in self._dies]
        self._set_in_turn(limits_mw, before_mw)

    # --- internals ---------------------------------------------------------------------------
    def _release(self) -> None:
        self._smi.amdsmi_shut_down()

    def _library(self) -> tuple[Any, type[BaseException]]:
        return self._smi, self._smi.AmdSmiLibraryException

    def _cap_info(self, die: _Die) -> dict[str, int]:
        reader = next(d for d in self._readers.dies if d.index == die.reader)
        return dict(self._call("amdsmi_get_power_cap_info", reader.handle))

    def _limit_range_w(self) -> tuple[int, int]:
        infos = [self._cap_info(d) for d in self._dies]
        return milliwatts.whole_w_range(
            (round(i["min_power_cap"] / 1000), round(i["max_power_cap"] / 1000)) for i in infos
        )

    def _put(self, position: int, limit_mw: int) -> None:
        """Set the cap of the die's package, once: a twin earlier in the group set it."""
        die = self._dies[position]
        if die.reader in (d.reader for d in self._dies[:position]):
            return
        reader = next(d for d in self._readers.dies if d.index == die.reader)
        try:
            self._smi.amdsmi_set_power_cap(reader.handle, 0, int(limit_mw) * 1000)
        except self._smi.AmdSmiLibraryException as err:
            raise self._refusal(die.index, limit_mw, err) from err

    def _refusal(self, index: int, limit_mw: int, err: Any) -> DeviceError:
        code = err.get_error_code()
        if code == STATUS_NO_PERM:
            return self._fixed(
                f"AMD SMI refused to set the power cap of GPU {index} ({err}): setting it needs "
                "root and a writable /sys; unprivileged tasks go through zeusd",
                base.PowerLimitPermissionError,
            )
        because = f"AMD SMI could not set the power cap of GPU {index}: {err}"
        if code == STATUS_INVAL:
            return self._refused_in_range(index, limit_mw, because)
        return self._fixed(because)


class _Readers:
    """The dies that report power and energy (one per package): what EnergyCounters reads."""

    def __init__(self, gpus: AMDSMIGPUs, dies: list[_Die]) -> None:
        self._gpus = gpus
        self.dies = dies
        self.indices = tuple(d.index for d in dies)

    def have_counters(self) -> bool:
        try:
            self.read_counters_mj()
        except DeviceError as err:
            if err.__cause__ is not None and _code(err.__cause__) == STATUS_NOT_SUPPORTED:
                return False
            raise
        return True

    def counters_wrong(self, sleep: Callable[[float], None]) -> str | None:
        """Why the accumulators cannot be trusted (ROCm/amdsmi#38), or None: each package's
        advance over :data:`COUNTER_CHECK_S` against its power times the time that passed."""
        power_w = self.power_w()
        start_s, start_mj = self.now_s(), self.read_counters_mj()
        sleep(COUNTER_CHECK_S)
        elapsed_s, end_mj = self.now_s() - start_s, self.read_counters_mj()
        low, high = COUNTER_RATIO_BOUNDS
        for die, watts, before, after in zip(self.dies, power_w, start_mj, end_mj, strict=True):
            expected_mj = watts * elapsed_s * 1000
            if expected_mj < 1.0:
                return f"GPU {die.index} reports no power to check its energy accumulator against"
            if not low < (after - before) / expected_mj < high:
                return (
                    f"GPU {die.index}'s energy accumulator advanced {after - before} mJ in "
                    f"{elapsed_s:.2f} s at {watts:.0f} W (expected about {expected_mj:.0f} mJ): "
                    "it runs at the wrong rate (ROCm/amdsmi#38)"
                )
        return None

    def read_counters_mj(self) -> list[int]:
        readings = [self._gpus._call("amdsmi_get_energy_count", d.handle) for d in self.dies]
        return [int(_ticks(r) * float(r["counter_resolution"]) / 1000) for r in readings]

    def power_w(self) -> list[float]:
        return [_watts(self._gpus._call("amdsmi_get_power_info", d.handle), d) for d in self.dies]

    def total_power_w(self) -> float:
        return sum(self.power_w())

    def now_s(self) -> float:
        return self._gpus.now_s()


def _load(amdsmi: Any) -> Any:
    if amdsmi is not None:
        return amdsmi
    try:
        # amdsmi prints to stdout on import when libamd_smi.so is missing; it raises
        # ImportError, OSError (no library) or AttributeError (a ROCm it does not match).
        with contextlib.redirect_stdout(None):
            import amdsmi as module
    except Exception as err:
        raise base.BackendUnavailableError(
            f"cannot load AMD SMI ({type(err).__name__}: {err}): install ROCm's amdsmi "
            "package matching the node's ROCm (its libamd_smi.so must load)"
        ) from err
    return module


def _init(smi: Any) -> None:
    try:
        smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except smi.AmdSmiLibraryException as err:
        raise base.BackendUnavailableError(
            f"cannot initialise AMD SMI ({err}): is the amdgpu driver loaded, and /dev/kfd "
            "and /dev/dri given to this container?"
        ) from err


def _dies(smi: Any, handles: Sequence[Any]) -> list[_Die]:
    """Every GPU with the die its package is read through (module docstring)."""
    names = [str(smi.amdsmi_get_gpu_asic_info(h)["market_name"]) for h in handles]
    dual = [i for i, name in enumerate(names) if any(m in name for m in DUAL_DIE_MODELS)]
    pairs: dict[int, int] = {}
    for first, second in zip(dual[0::2], dual[1::2], strict=False):
        if _watts(smi.amdsmi_get_power_info(handles[second]), None) == 0.0:
            pairs[first], pairs[second] = second, first
    return [
        _Die(i, h, names[i], reader=min(i, pairs.get(i, i)), twin=pairs.get(i))
        for i, h in enumerate(handles)
    ]


def _watts(info: dict[str, Any], die: _Die | None) -> float:
    for key in ("current_socket_power", "average_socket_power"):
        if isinstance(info.get(key), int | float):
            return float(info[key])
    if die is None:
        return 0.0
    raise DeviceError(f"AMD SMI reports no power for GPU {die.index} ({die.name}): {info}")


def _ticks(reading: dict[str, Any]) -> int:
    """The accumulator: ``energy_accumulator`` since AMD SMI 6.2.1, ``power`` before."""
    return int(
        reading["energy_accumulator"] if "energy_accumulator" in reading else reading["power"]
    )


def _code(err: BaseException) -> int | None:
    get = getattr(err, "get_error_code", None)
    return int(get()) if callable(get) else None


def _shown(smi: Any, handles: Sequence[Any], call: Callable[..., Any]) -> tuple[int, ...]:
    """AMD SMI's indices of the GPUs HIP shows this process, in HIP's order (its device
    numbers): every GPU when the visibility variables are unset (module docstring). UUID
    entries are HIP's (``hip_uuid``), else AMD SMI's."""
    hip = _enumeration(smi, handles)
    in_hip_order = sorted(range(len(handles)), key=lambda i: hip[i][0])
    chosen = first_set(os.environ, VISIBLE_ENVS)
    if chosen is None:
        return tuple(in_hip_order)
    uuids = [hip[i][1] or str(call("amdsmi_get_gpu_device_uuid", handles[i])) for i in in_hip_order]
    positions = strict_positions(*chosen, len(handles), uuids)
    return tuple(in_hip_order[p] for p in positions)


def _enumeration(smi: Any, handles: Sequence[Any]) -> list[tuple[int, str | None]]:
    """Each GPU's HIP index and UUID (``hip_id``, ``hip_uuid``); PCI order and no UUID from
    an AMD SMI before 25.3, which lacks the call, or one whose indices are not a numbering
    of the GPUs."""
    enumeration = getattr(smi, "amdsmi_get_gpu_enumeration_info", None)
    pci_order: list[tuple[int, str | None]] = [(i, None) for i in range(len(handles))]
    if enumeration is None:
        return pci_order
    try:
        infos = [enumeration(h) for h in handles]
        hip = [(int(i["hip_id"]), str(i["hip_uuid"]) if i.get("hip_uuid") else None) for i in infos]
    except (smi.AmdSmiException, KeyError, TypeError, ValueError) as err:
        log.info("AMD SMI gives no HIP index (%s): PCI order is taken as HIP's", err)
        return pci_order
    if sorted(h for h, _ in hip) != list(range(len(handles))):
        log.warning("AMD SMI's HIP indices %s are not a numbering: PCI order is taken", hip)
        return pci_order
    return hip


def _checked(indices: Sequence[int], count: int) -> tuple[int, ...]:
    chosen = tuple(indices)
    if count == 0:
        raise base.BackendUnavailableError(
            "AMD SMI sees no GPU (amd-smi list): none is visible to this process"
        )
    if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= i < count for i in chosen):
        raise DeviceError(
            f"indices={list(indices)} is invalid: expected distinct GPU indices in "
            f"[0, {count - 1}] (AMD SMI sees {count} GPUs)"
        )
    return chosen


def _alone_because(alone: Sequence[_Die]) -> str | None:
    if not alone:
        return None
    die = alone[0]
    return (
        f"GPU {die.index} is one die of a dual-die {die.name} whose other die, GPU {die.twin}, "
        "is not in this task: the package's power cap and power reading are shared, so the "
        "cap is never set (it would cap the other die's work too) and energy is the whole "
        "package's"
    )

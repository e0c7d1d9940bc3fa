"""NVIDIA GPUs through NVML (nvidia-ml-py), as one :class:`~.base.GPUGroup`.

NVML speaks mW and mJ; this module converts at the boundary, so everything above it sees W,
J and s. Energy comes from the GPUs' energy counters (Volta and newer) when every GPU of the
group has one, otherwise from a thread that samples power and integrates it (trapezoid).

NVML itself ignores ``CUDA_VISIBLE_DEVICES``; :func:`visible_gpus` applies it the way CUDA
does, so the GPUs measured are the GPUs the training process trains on.

NVML as it is on real nodes (docs/devices.md, "Real GPUs"):

- a MIG instance (``CUDA_VISIBLE_DEVICES=MIG-...``, or a whole GPU in MIG mode) is measured
  through its parent GPU, whose energy the other instances share (``energy_shared``); its
  limits are never set (``limits_fixed_because``);
- ``NO_PERMISSION`` or ``NOT_SUPPORTED`` from the setter makes the limits fixed for the rest of
  the task (:class:`~.base.PowerLimitUnavailableError`); a GPU that refuses a limit inside the
  range read at start has its range read again, so the caller can clamp to it;
- an energy counter that goes backwards (the driver was reloaded) is bridged with power times
  time for that interval, with one warning.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pynvml

from zeus_airflow.core.devices import milliwatts
from zeus_airflow.core.devices.base import (
    BackendUnavailableError,
    DeviceError,
    MeasurementKind,
    one_model,
)
from zeus_airflow.core.devices.base import PowerLimitPermissionError as NoPermission
from zeus_airflow.core.devices.base import PowerLimitUnavailableError as Unavailable
from zeus_airflow.core.devices.controlled import ControlledGPUs
from zeus_airflow.core.devices.energy import CountedOrSampled, EnergyCounters, PowerIntegrator
from zeus_airflow.core.devices.sync import CUDASynchronizer, Synchronize
from zeus_airflow.core.devices.visible import index_of, uuid_match

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_INTERVAL_S = 0.1
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Visible:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` exposes: NVML indices in CUDA's order, and the MIG
    instance's UUID when it names one (CUDA then sees that one instance, as device 0)."""

    indices: tuple[int, ...]
    mig_instance: str | None = None


class NVMLGPUs(CountedOrSampled, ControlledGPUs):
    """The GPUs of ``indices`` (NVML indices), or those visible to the process when None.

    ``nvml`` is the NVML module (a fake in tests); ``clock`` is the monotonic clock in s that
    energy is integrated over (the fake's clock in tests); ``sample_interval_s`` is the power
    sampling period used when a GPU has no energy counter. ``uuids`` holds each GPU's UUID,
    which, unlike an index, names the same GPU across reboots and ``CUDA_VISIBLE_DEVICES``.
    ``synchronize`` waits for the GPUs' queued work at each measurement window's edge; by
    default PyTorch's CUDA devices of the group, when PyTorch has initialised CUDA
    (``core/devices/sync.py``). ``energy_source`` forces ``sampling`` even where counters
    exist (``bench/gpu_check.py`` compares the two); ``auto`` prefers the counters.
    """

    measurement: MeasurementKind = "measured"
    control = "nvml"
    """How limits are set (zeusd's group says ``zeusd``)."""
    library_name = "NVML"

    def __init__(
        self,
        indices: Sequence[int] | None = None,
        *,
        nvml: Any = pynvml,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        synchronize: Synchronize | None = None,
        energy_source: Literal["auto", "sampling"] = "auto",
    ) -> None:
        if energy_source not in ("auto", "sampling"):
            raise DeviceError(
                f"energy_source={energy_source!r} is invalid: expected auto or sampling"
            )
        self._force_sampling = energy_source == "sampling"
        if not sample_interval_s > 0:
            raise DeviceError(
                f"sample_interval_s={sample_interval_s!r} is invalid: "
                "expected a number of seconds > 0"
            )
        self._nvml = nvml
        self._clock = clock
        _init(nvml)
        try:
            self._open(indices, sample_interval_s)
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self._sync = synchronize or CUDASynchronizer(self.cuda_ordinals)
        self._closed = False

    def _open(self, indices: Sequence[int] | None, sample_interval_s: float) -> None:
        nvml = self._nvml
        count = nvml.nvmlDeviceGetCount()
        all_uuids = [
            milliwatts.text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        ]
        env = os.environ.get(VISIBLE_DEVICES_ENV)
        visible = _visible(nvml, env, all_uuids)
        chosen = (
            _checked_indices(indices, count) if indices is not None else _required(visible, env)
        )
        self.indices: tuple[int, ...] = chosen
        self.count = len(chosen)
        self.uuids: tuple[str, ...] = tuple(all_uuids[i] for i in chosen)
        self.mig_instance: str | None = visible.mig_instance if indices is None else None
        """The MIG instance the process trains on (its UUID), or None for whole GPUs."""
        self.cuda_ordinals: tuple[int, ...] = _cuda_ordinals(chosen, visible, env)
        """CUDA's device numbers of the group's GPUs in this process (for synchronising)."""
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in chosen]
        self.model: str = _one_model(nvml, self._handles, chosen)
        in_mig_mode = [
            i for i, h in zip(chosen, self._handles, strict=True) if mig_enabled(nvml, h)
        ]
        self.energy_shared = self.mig_instance is not None or bool(in_mig_mode)
        """The energy measured is a whole GPU's that MIG instances share: other tenants' work
        is in it (never subtracted; docs/devices.md)."""
        self._fixed_because: str | None = None
        """Why limits cannot be changed: MIG (known at start), or NVML's refusal."""
        self._mig_because: str | None = None
        if self.energy_shared:
            where = (
                f"MIG instance {self.mig_instance}"
                if self.mig_instance
                else f"GPUs {in_mig_mode} are in MIG mode"
            )
            self._mig_because = self._fixed_because = (
                f"{where}: a power limit belongs to the whole GPU, which the MIG instances "
                "share, and cannot be set per instance; energy is the whole GPU's, shared "
                "with the other instances"
            )
        self._range_w = self._limit_range_w()
        self._read_mw: milliwatts.ReadLimits = {}
        use_counters = not self._force_sampling and self._counters_supported()
        self._counters = EnergyCounters(self) if use_counters else None
        self._sampler = (
            None
            if self._counters is not None
            else PowerIntegrator(self._total_power_w, self._clock, sample_interval_s)
        )

    # --- the GPUGroup interface -------------------------------------------------------------
    def get_power_limits_w(self) -> tuple[int, ...]:
        limits_mw = [self._call("nvmlDeviceGetPowerManagementLimit", h) for h in self._handles]
        return milliwatts.remember(self._read_mw, limits_mw)

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        """Set each GPU's limit; every value is checked before any GPU changes. A value read
        from a GPU before writes back the exact mW read, so an odd limit (187.5 W, read as
        188 W) is restored exactly, even just above the whole-W range. When one GPU refuses,
        those already set go back to what they had, so the group keeps one limit. On MIG the
        setter is never called. After a refusal it still is (to restore what was set)."""
        if self._mig_because is not None:
            raise Unavailable(self._mig_because)
        limits_mw = milliwatts.to_mw(
            self._read_mw, limits_w, self._range_w, self.model, self.indices
        )
        before_mw = [self._call("nvmlDeviceGetPowerManagementLimit", h) for h in self._handles]
        self._set_in_turn(limits_mw, before_mw)

    # --- internals ---------------------------------------------------------------------------
    def _release(self) -> None:
        self._nvml.nvmlShutdown()

    def _library(self) -> tuple[Any, type[BaseException]]:
        return self._nvml, self._nvml.NVMLError

    def _limit_range_w(self) -> tuple[int, int]:
        """The range every GPU accepts, rounded inwards to whole W."""
        return milliwatts.whole_w_range(
            self._call("nvmlDeviceGetPowerManagementLimitConstraints", h) for h in self._handles
        )

    def _put(self, position: int, limit_mw: int) -> None:
        nvml, index = self._nvml, self.indices[position]
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(self._handles[position], limit_mw)
        except nvml.NVMLError as err:
            code = err.value
            if code == nvml.NVML_ERROR_NO_PERMISSION:
                raise self._fixed(
                    f"NVML refused to set the power limit of GPU {index} ({err}): setting "
                    "power limits needs root or the CAP_SYS_ADMIN capability",
                    NoPermission,
                ) from err
            if code == nvml.NVML_ERROR_NOT_SUPPORTED:
                raise self._fixed(
                    f"GPU {index} ({self.model}) does not support setting its power limit ({err})"
                ) from err
            if code == nvml.NVML_ERROR_INVALID_ARGUMENT:
                raise self._refused_in_range(
                    index,
                    limit_mw,
                    f"GPU {index} refused a power limit of {limit_mw} mW "
                    f"inside its range {list(self._range_w)} W ({err})",
                ) from err
            raise DeviceError(
                f"nvmlDeviceSetPowerManagementLimit(GPU {index}, {limit_mw} mW) failed: {err}"
            ) from err

    def _counters_supported(self) -> bool:
        """Whether every GPU has an energy counter (Volta and newer)."""
        nvml = self._nvml
        try:
            for handle in self._handles:
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nvml.NVMLError as err:
            if err.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return False
            raise DeviceError(f"nvmlDeviceGetTotalEnergyConsumption failed: {err}") from err
        return True

    def read_counters_mj(self) -> list[int]:
        return [self._call("nvmlDeviceGetTotalEnergyConsumption", h) for h in self._handles]

    def power_w(self) -> list[float]:
        return [self._call("nvmlDeviceGetPowerUsage", h) / 1000.0 for h in self._handles]

    def _total_power_w(self) -> float:
        return sum(self.power_w())


def visible_gpus(nvml: Any = pynvml, **options: Any) -> NVMLGPUs:
    """The GPUs this process may use (``device="auto"``); options as for :class:`NVMLGPUs`."""
    return NVMLGPUs(None, nvml=nvml, **options)


class NVMLUnavailableError(BackendUnavailableError):
    """NVML cannot be initialised here: no NVIDIA driver or library (an AMD node, say)."""


def _init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NVMLUnavailableError(
            f"cannot initialise NVML ({err}): is the NVIDIA driver installed and "
            "libnvidia-ml.so.1 loadable? In a container, start it with the NVIDIA container "
            "toolkit (docker --gpus / the compose file's GPU reservation)"
        ) from err


def _checked_indices(indices: Sequence[int], count: int) -> tuple[int, ...]:
    chosen = tuple(indices)
    if count == 0:
        raise DeviceError(f"indices={list(indices)} is invalid: NVML sees no GPU (nvidia-smi)")
    if (
        not chosen
        or len(set(chosen)) != len(chosen)
        or not all(isinstance(i, int) and 0 <= i < count for i in chosen)
    ):
        raise DeviceError(
            f"indices={list(indices)} is invalid: expected distinct GPU indices "
            f"in [0, {count - 1}] (NVML sees {count} GPUs)"
        )
    return chosen


def _visible(nvml: Any, env_value: str | None, uuids: Sequence[str]) -> Visible:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` exposes, as CUDA reads it: entries are indices,
    (unique prefixes of) ``GPU-`` UUIDs or a MIG instance's UUID; the first entry that names
    no GPU hides itself and every entry after it (``-1`` hides all GPUs). CUDA enumerates one
    MIG instance at most: a MIG entry ends the list. Unset: every GPU, in NVML's order."""
    if env_value is None:
        return Visible(tuple(range(len(uuids))))
    chosen: list[int] = []
    entries = [e.strip() for e in env_value.split(",")]
    for position, entry in enumerate(entries):
        if entry.upper().startswith("MIG-"):
            parent = _mig_parent_index(nvml, entry) if not chosen else None
            if parent is not None:
                if position + 1 < len(entries):
                    log.warning(
                        "%s: CUDA uses one MIG instance per process; entries after %r are ignored",
                        VISIBLE_DEVICES_ENV,
                        entry,
                    )
                return Visible((parent,), entry)
            index = None
        else:
            index = _entry_index(entry, uuids)
        if index is None or index in chosen:
            if entry:
                log.warning(
                    "%s entry %r names no GPU (or repeats one): like CUDA, it and the "
                    "entries after it are ignored",
                    VISIBLE_DEVICES_ENV,
                    entry,
                )
            break
        chosen.append(index)
    return Visible(tuple(chosen))


def visible_indices(nvml: Any, env_value: str | None, uuids: Sequence[str]) -> tuple[int, ...]:
    """The NVML indices ``CUDA_VISIBLE_DEVICES`` (``env_value``) keeps, in CUDA's order."""
    return _visible(nvml, env_value, uuids).indices


def _required(visible: Visible, env_value: str | None) -> tuple[int, ...]:
    if not visible.indices:
        where = (
            "NVML sees no GPU"
            if env_value is None
            else f"{VISIBLE_DEVICES_ENV}={env_value!r} hides every GPU"
        )
        raise DeviceError(
            f"no GPU is visible to this process: {where}. Check "
            f"{VISIBLE_DEVICES_ENV} and that the driver sees the GPUs (nvidia-smi)"
        )
    return visible.indices


def _cuda_ordinals(
    chosen: Sequence[int], visible: Visible, env_value: str | None
) -> tuple[int, ...]:
    """CUDA's device number of each chosen GPU that CUDA sees in this process: its position
    in ``CUDA_VISIBLE_DEVICES`` (the NVML index when unset, which assumes CUDA's order is
    NVML's: set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on nodes with mixed models)."""
    if env_value is None:
        return tuple(chosen)
    return tuple(visible.indices.index(i) for i in chosen if i in visible.indices)


def _mig_parent_index(nvml: Any, entry: str) -> int | None:
    """The NVML index of the GPU a MIG UUID belongs to, or None when NVML knows no such
    instance (either UUID form: ``MIG-<uuid>``, or ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    try:
        instance = nvml.nvmlDeviceGetHandleByUUID(entry)
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(instance)
        return int(nvml.nvmlDeviceGetIndex(parent))
    except nvml.NVMLError as err:
        if err.value in (
            nvml.NVML_ERROR_NOT_FOUND,
            nvml.NVML_ERROR_INVALID_ARGUMENT,
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        ):
            return None
        raise DeviceError(f"cannot look up MIG instance {entry!r} in NVML: {err}") from err


def mig_enabled(nvml: Any, handle: Any) -> bool:
    """Whether a whole GPU runs in MIG mode (GPUs before Ampere answer NOT_SUPPORTED)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as err:
        if err.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return False
        raise DeviceError(f"nvmlDeviceGetMigMode failed: {err}") from err
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _entry_index(entry: str, uuids: Sequence[str]) -> int | None:
    """An index, or a unique prefix of a ``GPU-`` UUID (CUDA takes no bare hex), as
    ``visible.py`` reads entries for every vendor."""
    if entry.upper().startswith("GPU-"):
        return uuid_match(entry, uuids)
    return index_of(entry, len(uuids))


def _one_model(nvml: Any, handles: Sequence[Any], indices: Sequence[int]) -> str:
    models = [milliwatts.text(nvml.nvmlDeviceGetName(h)) for h in handles]
    return one_model(
        list(zip(indices, models, strict=True)),
        f"restrict {VISIBLE_DEVICES_ENV} or the indices to GPUs of one model",
    )

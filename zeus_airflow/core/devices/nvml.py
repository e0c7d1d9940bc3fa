"""NVIDIA GPUs through NVML (nvidia-ml-py), as one :class:`~.base.GPUGroup`.

NVML speaks mW and mJ; this module converts at the boundary, so everything above it sees W,
J and s. Energy comes from the GPUs' energy counters (Volta and newer) when every GPU of the
group has one, otherwise from a thread that samples power and integrates it (trapezoid).

NVML itself ignores ``CUDA_VISIBLE_DEVICES``; :func:`visible_gpus` applies it the way CUDA
does, so the GPUs measured are the GPUs the training process trains on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from zeus_airflow.core.devices.base import (
    DeviceError,
    Measurement,
    PowerLimitPermissionError,
    candidate_limits_in_range,
)

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_INTERVAL_S = 0.1
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


class NVMLGPUs:
    """The GPUs of ``indices`` (NVML indices), or those visible to the process when None.

    ``nvml`` is the NVML module (a fake in tests); ``clock`` is the monotonic clock in s that
    energy is integrated over (the fake's clock in tests); ``sample_interval_s`` is the power
    sampling period used when a GPU has no energy counter. ``uuids`` holds each GPU's UUID,
    which, unlike an index, names the same GPU across reboots and ``CUDA_VISIBLE_DEVICES``.
    """

    measurement: Measurement = "measured"

    def __init__(self, indices: Sequence[int] | None = None, *, nvml: Any = pynvml,
                 sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not sample_interval_s > 0:
            raise DeviceError(f"sample_interval_s={sample_interval_s!r} is invalid: "
                              "expected a number of seconds > 0")
        self._nvml = nvml
        self._clock = clock
        _init(nvml)
        try:
            self._open(indices, sample_interval_s)
        except BaseException:
            nvml.nvmlShutdown()
            raise
        self._closed = False

    def _open(self, indices: Sequence[int] | None, sample_interval_s: float) -> None:
        nvml = self._nvml
        count = nvml.nvmlDeviceGetCount()
        all_uuids = [_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(count)]
        chosen = _checked_indices(indices, count) if indices is not None \
            else _visible_indices(os.environ.get(VISIBLE_DEVICES_ENV), all_uuids)
        self.indices: tuple[int, ...] = chosen
        self.count = len(chosen)
        self.uuids: tuple[str, ...] = tuple(all_uuids[i] for i in chosen)
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in chosen]
        self.model: str = _one_model(nvml, self._handles, chosen)
        self._range_w = self._limit_range_w()
        self._read_mw: dict[tuple[int, int], int] = {}
        """(position in the group, W) -> the exact mW read from that GPU."""
        self._counter_start_mj = self._energy_counters_mj()
        self._sampler = None if self._counter_start_mj is not None else _PowerIntegrator(
            self._total_power_w, self._clock, sample_interval_s)

    # --- the GPUGroup interface -------------------------------------------------------------
    def power_limit_range_w(self) -> tuple[int, int]:
        return self._range_w

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        return candidate_limits_in_range(*self._range_w)

    def get_power_limits_w(self) -> tuple[int, ...]:
        limits_mw = [self._call("nvmlDeviceGetPowerManagementLimit", h) for h in self._handles]
        for position, limit_mw in enumerate(limits_mw):
            self._read_mw[position, _w_from_mw(limit_mw)] = limit_mw
        return tuple(_w_from_mw(mw) for mw in limits_mw)

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        """Set each GPU's limit; every value is checked before any GPU changes. A value read
        from a GPU before writes back the exact mW read, so an odd limit (187.5 W, read as
        188 W) is restored exactly, even just above the whole-W range."""
        limits_mw = [self._to_mw(position, limit_w) for position, limit_w in
                     enumerate(self._checked_count(limits_w))]
        for index, handle, limit_mw in zip(self.indices, self._handles, limits_mw, strict=True):
            try:
                self._nvml.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
            except self._nvml.NVMLError as err:
                if err.value == self._nvml.NVML_ERROR_NO_PERMISSION:
                    raise PowerLimitPermissionError(
                        f"NVML refused to set the power limit of GPU {index} ({err}): setting "
                        "power limits needs root or the CAP_SYS_ADMIN capability") from err
                raise DeviceError(f"nvmlDeviceSetPowerManagementLimit(GPU {index}, "
                                  f"{limit_mw} mW) failed: {err}") from err

    def energy_j(self) -> float:
        if self._sampler is not None:
            return self._sampler.energy_j()
        start_mj = self._counter_start_mj
        assert start_mj is not None
        now_mj = self._energy_counters_mj()
        assert now_mj is not None
        return sum(now - start for now, start in zip(now_mj, start_mj, strict=True)) / 1000.0

    def now_s(self) -> float:
        return self._clock()

    def close(self) -> None:
        """Stop the sampling thread and release NVML. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._sampler is not None:
            self._sampler.stop()
        self._nvml.nvmlShutdown()

    @property
    def energy_source(self) -> str:
        """``counter`` (the GPUs' energy counters) or ``sampling`` (integrated power)."""
        return "sampling" if self._sampler is not None else "counter"

    # --- internals ---------------------------------------------------------------------------
    def _call(self, function: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, function)(*args)
        except self._nvml.NVMLError as err:
            raise DeviceError(f"{function} failed on GPUs {list(self.indices)}: {err}") from err

    def _limit_range_w(self) -> tuple[int, int]:
        """The range every GPU accepts, rounded inwards to whole W."""
        ranges_mw = [self._call("nvmlDeviceGetPowerManagementLimitConstraints", h)
                     for h in self._handles]
        low_mw = max(low for low, _ in ranges_mw)
        high_mw = min(high for _, high in ranges_mw)
        return -(-low_mw // 1000), high_mw // 1000

    def _checked_count(self, limits_w: Sequence[int]) -> Sequence[int]:
        if len(limits_w) != self.count:
            raise DeviceError(f"limits_w={list(limits_w)} is invalid: expected {self.count} "
                              f"limits, one per GPU {list(self.indices)}")
        return limits_w

    def _to_mw(self, position: int, limit_w: int) -> int:
        read_mw = self._read_mw.get((position, limit_w))
        if read_mw is not None:
            return read_mw
        low, high = self._range_w
        if not low <= limit_w <= high:
            raise DeviceError(f"power limit {limit_w} W is invalid for {self.model}: "
                              f"expected a value in [{low}, {high}] W")
        return int(limit_w) * 1000

    def _energy_counters_mj(self) -> list[int] | None:
        """Every GPU's energy counter (mJ), or None when one of them has none."""
        nvml = self._nvml
        try:
            return [nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles]
        except nvml.NVMLError as err:
            if err.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return None
            raise DeviceError(f"nvmlDeviceGetTotalEnergyConsumption failed: {err}") from err

    def _total_power_w(self) -> float:
        return sum(self._call("nvmlDeviceGetPowerUsage", h) for h in self._handles) / 1000.0


def visible_gpus(nvml: Any = pynvml, **options: Any) -> NVMLGPUs:
    """The GPUs this process may use (``device="auto"``); options as for :class:`NVMLGPUs`."""
    return NVMLGPUs(None, nvml=nvml, **options)


class _PowerIntegrator:
    """Energy (J) as the trapezoid integral of sampled power over the clock.

    The thread starts on the first reading and samples every ``interval_s``; each reading also
    takes a sample, so a measurement window's edges are exact in time.
    """

    def __init__(self, read_power_w: Callable[[], float], clock: Callable[[], float],
                 interval_s: float) -> None:
        self._read_power_w = read_power_w
        self._clock = clock
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._energy_j = 0.0
        self._last: tuple[float, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def energy_j(self) -> float:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="zeus-power-sampler")
            self._sample()
            self._thread.start()
        return self._sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> float:
        with self._lock:
            now_s, power_w = self._clock(), self._read_power_w()
            if self._last is not None:
                last_s, last_w = self._last
                self._energy_j += (now_s - last_s) * (power_w + last_w) / 2.0
            self._last = (now_s, power_w)
            return self._energy_j


def _init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise DeviceError(
            f"cannot initialise NVML ({err}): is the NVIDIA driver installed and "
            "libnvidia-ml.so.1 loadable? In a container, start it with the NVIDIA container "
            "toolkit (docker --gpus / the compose file's GPU reservation)") from err


def _checked_indices(indices: Sequence[int], count: int) -> tuple[int, ...]:
    chosen = tuple(indices)
    if count == 0:
        raise DeviceError(f"indices={list(indices)} is invalid: NVML sees no GPU (nvidia-smi)")
    if not chosen or len(set(chosen)) != len(chosen) \
            or not all(isinstance(i, int) and 0 <= i < count for i in chosen):
        raise DeviceError(f"indices={list(indices)} is invalid: expected distinct GPU indices "
                          f"in [0, {count - 1}] (NVML sees {count} GPUs)")
    return chosen


def _visible_indices(env_value: str | None, uuids: Sequence[str]) -> tuple[int, ...]:
    """NVML indices of the GPUs ``CUDA_VISIBLE_DEVICES`` exposes, in its order.

    As in CUDA, entries are indices or (prefixes of) ``GPU-`` UUIDs, and the first entry that
    names no GPU hides itself and every entry after it (``-1`` hides all GPUs).
    """
    if env_value is None:
        chosen, where = tuple(range(len(uuids))), "NVML sees no GPU"
    else:
        chosen = _parse_visible(env_value, uuids)
        where = f"{VISIBLE_DEVICES_ENV}={env_value!r} hides every GPU"
    if not chosen:
        raise DeviceError(f"no GPU is visible to this process: {where}. Check "
                          f"{VISIBLE_DEVICES_ENV} and that the driver sees the GPUs (nvidia-smi)")
    return chosen


def _parse_visible(env_value: str, uuids: Sequence[str]) -> tuple[int, ...]:
    chosen: list[int] = []
    for entry in (e.strip() for e in env_value.split(",")):
        if entry.upper().startswith("MIG-"):
            raise DeviceError(f"{VISIBLE_DEVICES_ENV} entry {entry!r} is a MIG instance: power "
                              "limits and energy belong to the whole GPU, so MIG is not "
                              "supported; expose whole GPUs")
        index = _entry_index(entry, uuids)
        if index is None or index in chosen:
            if entry:
                log.warning("%s entry %r names no GPU (or repeats one): like CUDA, it and the "
                            "entries after it are ignored", VISIBLE_DEVICES_ENV, entry)
            break
        chosen.append(index)
    return tuple(chosen)


def _entry_index(entry: str, uuids: Sequence[str]) -> int | None:
    try:
        index = int(entry)
    except ValueError:
        matches = [i for i, uuid in enumerate(uuids)
                   if entry.upper().startswith("GPU-") and uuid.upper().startswith(entry.upper())]
        return matches[0] if len(matches) == 1 else None
    return index if 0 <= index < len(uuids) else None


def _one_model(nvml: Any, handles: Sequence[Any], indices: Sequence[int]) -> str:
    models = [_text(nvml.nvmlDeviceGetName(h)) for h in handles]
    if len(set(models)) > 1:
        listing = ", ".join(f"GPU {i}: {m}" for i, m in zip(indices, models, strict=True))
        raise DeviceError(f"the GPUs of a group must be one model, got {listing}. Restrict "
                          f"{VISIBLE_DEVICES_ENV} or the indices to GPUs of one model")
    return models[0]


def _text(value: str | bytes) -> str:
    """nvidia-ml-py before 11.515 returns bytes for names and UUIDs."""
    return value.decode() if isinstance(value, bytes) else value


def _w_from_mw(limit_mw: int) -> int:
    return round(limit_mw / 1000)

"""The skeleton the real GPU backends share (NVML, AMD SMI, zeusd): a range read at start,
limits set one GPU at a time and rolled back when one refuses, a refusal that makes the limits
fixed for the rest of the task, and a close that is safe twice.

Each backend keeps only what is its own: how one GPU's limit is set (:meth:`_put`), how the
range is read (:meth:`_limit_range_w`) and what its refusals mean. Where the backend is a
library, :meth:`_call` turns the library's error into a :class:`~.base.DeviceError` naming
the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from zeus_airflow.core.devices.base import (
    DeviceError,
    PowerLimitRangeChangedError,
    PowerLimitUnavailableError,
    candidate_limits_in_range,
)
from zeus_airflow.core.devices.energy import EnergyCounters, PowerIntegrator

log = logging.getLogger(__name__)


class ControlledGPUs:
    """Real GPUs whose limits the task may set (subclasses: ``nvml.py``, ``amdsmi.py``,
    ``zeusd.py``)."""

    library_name: ClassVar[str] = ""
    """How :meth:`_call`'s errors name the library (``NVML``, ``AMD SMI``)."""
    indices: tuple[int, ...]
    _range_w: tuple[int, int]
    _fixed_because: str | None
    _counters: EnergyCounters | None
    _sampler: PowerIntegrator | None
    _sync: Callable[[], None]
    _closed: bool = False

    # --- the GPUGroup interface -------------------------------------------------------------
    def power_limit_range_w(self) -> tuple[int, int]:
        return self._range_w

    def candidate_power_limits_w(self) -> tuple[int, ...]:
        return candidate_limits_in_range(*self._range_w)

    @property
    def limits_fixed_because(self) -> str | None:
        return self._fixed_because

    def energy_update_period_s(self) -> float:
        return self._counters.update_period_s() if self._counters is not None else 0.0

    def synchronize(self) -> None:
        self._sync()

    @property
    def energy_source(self) -> str:
        """``counter`` (the GPUs' energy counters, or the daemon's) or ``sampling``
        (integrated power)."""
        return "sampling" if self._sampler is not None else "counter"

    def close(self) -> None:
        """Stop the sampling thread and release the library. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._sampler is not None:
            self._sampler.stop()
        self._release()

    # --- what a backend gives -----------------------------------------------------------------
    def _release(self) -> None:
        """Release the library (NVML's and AMD SMI's shut-down); nothing by default."""

    def _library(self) -> tuple[Any, type[BaseException]]:
        """The library module and the error it raises, for :meth:`_call`."""
        raise NotImplementedError

    def _limit_range_w(self) -> tuple[int, int]:
        """The range every GPU accepts now, rounded inwards to whole W."""
        raise NotImplementedError

    def _put(self, position: int, limit_mw: int) -> None:
        """Set the limit of the group's GPU at ``position``; a DeviceError when refused."""
        raise NotImplementedError

    # --- the shared skeleton ------------------------------------------------------------------
    def _call(self, function: str, *args: Any) -> Any:
        library, error = self._library()
        try:
            return getattr(library, function)(*args)
        except error as err:
            raise DeviceError(
                f"{self.library_name}'s {function} failed on GPUs {list(self.indices)}: {err}"
            ) from err

    def _set_in_turn(self, limits_mw: Sequence[int], before_mw: Sequence[int]) -> None:
        """Set each GPU's limit in turn; when one refuses, those already set go back to
        ``before_mw`` first, so the group keeps one limit."""
        for position, limit_mw in enumerate(limits_mw):
            try:
                self._put(position, limit_mw)
            except DeviceError:
                self._roll_back(before_mw[:position])
                raise

    def _roll_back(self, before_mw: Sequence[int]) -> None:
        for position, limit_mw in enumerate(before_mw):
            try:
                self._put(position, limit_mw)
            except DeviceError:
                log.warning(
                    "could not put GPU %d's power limit back to %d mW after another GPU of "
                    "the group refused its limit",
                    self.indices[position],
                    limit_mw,
                    exc_info=True,
                )

    def _refused_in_range(self, index: int, limit_mw: int, because: str) -> DeviceError:
        """A limit inside the range read at start was refused: the range is read again. A
        moved range is a PowerLimitRangeChangedError (the caller clamps and tries once
        more); an unchanged one fixes the limits for the rest of the task, ``because``."""
        old = self._range_w
        try:
            self._range_w = self._limit_range_w()
        except DeviceError:
            self._range_w = old
        if self._range_w != old:
            return PowerLimitRangeChangedError(
                f"GPU {index} refused {limit_mw} mW: its power-limit range is now "
                f"{list(self._range_w)} W (was {list(old)} W)",
                self._range_w,
            )
        return self._fixed(because)

    def _fixed(
        self, because: str, kind: type[DeviceError] = PowerLimitUnavailableError
    ) -> DeviceError:
        """The limits are fixed for the rest of the task, ``because``."""
        self._fixed_because = because
        return kind(because)

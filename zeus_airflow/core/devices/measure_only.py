"""Opening real GPUs, and what a task does when zeusd cannot be reached as it starts.

The first rule (docs/algorithm.md): Zeus never makes a pipeline worse than the same DAG
without it. A zeusd that is not running, restarting or hanging when a task starts would
otherwise fail the task; instead the task measures only: the GPUs are read through NVML or
AMD SMI in the task's own process (reading needs no privilege), their limits are never
changed (the run is in measure mode, ``power_control`` ``none``), and one warning says why.
Only where the process cannot read its GPUs itself either is it an error: then nothing can
measure them.

``auto`` on a node without NVML (no NVIDIA driver) takes the AMD GPUs AMD SMI shows, when it
loads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from zeus_airflow.core.devices.base import DeviceError, GPUGroup
from zeus_airflow.core.devices.guarded import GuardedGPUs
from zeus_airflow.core.devices.visible import VisibleDevicesError

log = logging.getLogger(__name__)


def open_local(backend: str, indices: Sequence[int] | None) -> GPUGroup:
    """``nvml`` (``auto`` when ``indices`` is None) or ``amdsmi`` GPUs of this process."""
    from zeus_airflow.core.devices import nvml

    if backend == "amdsmi":
        return _amd(indices)
    try:
        return nvml.NVMLGPUs(indices)
    except nvml.NVMLUnavailableError as err:
        if indices is not None:
            raise
        try:
            return _amd(None)
        except VisibleDevicesError:
            raise  # AMD GPUs are here, and the variable that picks them is wrong: say that
        except DeviceError as amd_err:
            log.debug("no AMD GPU either: %s", amd_err)
        raise err from None


def open_zeusd_or_measure(ids: Sequence[int] | None) -> GPUGroup:
    """The GPUs through zeusd; where it cannot be reached now, the task's GPUs read here,
    their limits fixed (module docstring)."""
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs
    from zeus_airflow.core.devices.zeusd_client import ZeusdUnreachableError

    try:
        return ZeusdGPUs(ids)
    except ZeusdUnreachableError as err:
        return measure_only(ids, err)


def measure_only(ids: Sequence[int] | None, cause: DeviceError) -> GPUGroup:
    """This process's GPUs (``ids``: the daemon's, which were asked for), read through NVML,
    else AMD SMI, frozen at their current limits with ``cause`` as the reason."""
    problems = []
    for name, opener in (("NVML", lambda: _nvml_for(ids)), ("AMD SMI", lambda: _amd(None))):
        try:
            gpus = opener()
        except DeviceError as err:
            problems.append(f"{name}: {err}")
            continue
        reason = (
            f"{cause}. This task measures only, through {name} (read-only), at the GPUs' "
            "current power limits: none is changed"
        )
        log.warning("Zeus: %s", reason)
        guarded = GuardedGPUs(gpus)  # type: ignore[arg-type]
        guarded.freeze(reason)
        return guarded
    raise DeviceError(
        f"{cause}; and this process cannot read its GPUs itself ({'; '.join(problems)}), so "
        "nothing can measure them: start zeusd, or give the task NVML (the NVIDIA "
        "container toolkit's utility capability) or AMD SMI"
    )


def _nvml_for(ids: Sequence[int] | None) -> GPUGroup:
    """The GPUs the process uses: its visible ones, unless it sees more than the daemon's
    ``ids`` name (a process that sees the node's GPUs: then NVML's indices are the host's)."""
    from zeus_airflow.core.devices import nvml

    visible = nvml.NVMLGPUs(None)
    if ids is None or visible.count == len(ids):
        return visible
    visible.close()
    return nvml.NVMLGPUs(ids)


def _amd(indices: Sequence[int] | None) -> GPUGroup:
    from zeus_airflow.core.devices.amdsmi import AMDSMIGPUs

    return AMDSMIGPUs(indices)

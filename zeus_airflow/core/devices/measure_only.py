"""Opening real GPUs, and what a task does when zeusd cannot be reached as it starts.

The first rule (docs/algorithm.md): Zeus never makes a pipeline worse than the same DAG
without it. A zeusd that is not running, restarting or hanging when a task starts would
otherwise fail the task; instead the task measures only: the GPUs are read through a backend
the task's own process can read (NVML, else AMD SMI: ``backends.local_readers``; reading
needs no privilege), their limits are never changed (the run is in measure mode,
``power_control`` ``none``), and one warning says why. Only where the process cannot read its
GPUs itself either is it an error: then nothing can measure them.

``auto`` on a node without NVML (no NVIDIA driver) takes the AMD GPUs AMD SMI shows, when it
loads: each local reader is tried in the table's order, and only one whose library, driver or
GPUs are missing (:class:`~.base.BackendUnavailableError`) passes on to the next. Any other
error (a visibility variable that names no GPU, say) is the answer, naming its cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from zeus_airflow.core.devices.base import BackendUnavailableError, DeviceError, GPUGroup
from zeus_airflow.core.devices.guarded import GuardedGPUs

log = logging.getLogger(__name__)

Indices = Sequence[int] | None


class LocalReader(Protocol):
    """A backend a process reads its GPUs through itself (``backends.local_readers``)."""

    @property
    def read_locally(self) -> Callable[[Indices], GPUGroup] | None: ...

    @property
    def reader_name(self) -> str: ...


def open_first_local(readers: Sequence[LocalReader]) -> GPUGroup:
    """Every GPU this process sees, through the first of ``readers`` that is here."""
    first: BackendUnavailableError | None = None
    for backend in readers:
        assert backend.read_locally is not None
        try:
            return backend.read_locally(None)
        except BackendUnavailableError as err:
            log.debug("no GPU through %s: %s", backend.reader_name, err)
            first = first or err
    assert first is not None, "the table has local readers"
    raise first


def open_zeusd_or_measure(ids: Indices, readers: Sequence[LocalReader]) -> GPUGroup:
    """The GPUs through zeusd; where it cannot be reached now, the task's GPUs read here
    through the first of ``readers`` that can, their limits fixed (module docstring)."""
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs
    from zeus_airflow.core.devices.zeusd_client import ZeusdUnreachableError

    try:
        return ZeusdGPUs(ids)
    except ZeusdUnreachableError as err:
        return measure_only(ids, err, readers)


def measure_only(ids: Indices, cause: DeviceError, readers: Sequence[LocalReader]) -> GPUGroup:
    """This process's GPUs (``ids``: the daemon's, which were asked for), read through the
    first of ``readers`` that can, frozen at their current limits with ``cause`` as the
    reason."""
    problems = []
    for backend in readers:
        try:
            gpus = _read_locally(backend.read_locally, ids)
        except DeviceError as err:
            problems.append(f"{backend.reader_name}: {err}")
            continue
        reason = (
            f"{cause}. This task measures only, through {backend.reader_name} (read-only), at "
            "the GPUs' current power limits: none is changed"
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


def _read_locally(read: Callable[[Indices], GPUGroup] | None, ids: Indices) -> GPUGroup:
    """The GPUs the process uses: its visible ones, unless it sees more than the daemon's
    ``ids`` name (a process that sees the node's GPUs: then its indices are the host's)."""
    assert read is not None
    visible = read(None)
    if ids is None or visible.count == len(ids):
        return visible
    visible.close()
    return read(ids)

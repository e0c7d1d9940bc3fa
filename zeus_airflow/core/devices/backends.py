"""Every device backend in one table: its form, its opener, how it opens GPUs read-only when
zeusd is away, and how its power-limit leases are named and restored.

``parse_device`` and ``open_device`` (``spec.py``), the measure-only fallback
(``measure_only.py``) and the lease code (``core/train/gpu_lease.py``) read this table and
name no backend, so a new backend is one module and one entry here (``tests/core/devices/
test_backends.py`` adds one made of test doubles). Openers import their module on use:
parsing needs no driver, and a light install no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zeus_airflow.core.common.config import ConfigError
from zeus_airflow.core.common.traces import (
    WorkloadTrace,
    available_gpus,
    load_workload_trace,
    resolve_traces_dir,
)
from zeus_airflow.core.devices.base import DeviceError, GPUGroup
from zeus_airflow.core.devices.forms import DeviceSpec, Parse, by_indices, by_trace
from zeus_airflow.core.devices.guarded import LeasableGPUs

Indices = Sequence[int] | None


@dataclass(frozen=True)
class Backend:
    """One backend of the ``device`` parameter."""

    form: str
    """How the ``device`` string names it, e.g. ``nvml:<i>[,<j>...]``."""
    parse: Parse
    open: Callable[[DeviceSpec, str | Path | None], GPUGroup]
    """(the spec, ``traces_dir``) -> the GPUs; at run time, where the task runs."""
    read_locally: Callable[[Indices], GPUGroup] | None = None
    """The GPUs this process can read itself without privilege (``indices`` None: those it
    sees): what ``auto`` tries in table order, and what measures when zeusd is away."""
    reader_name: str = ""
    """How messages name the library ``read_locally`` goes through (``NVML``)."""
    lease_prefixes: tuple[str, ...] = ()
    """The prefixes of the GPU ids its leases record (``amdsmi:``); ``""`` matches any id,
    for the backend whose ids are the driver's own (NVML's ``GPU-...``)."""
    restore: Callable[[int], LeasableGPUs] | None = None
    """Opens one GPU by the index a lease recorded, to put its limit back."""
    by_hand: str = ""
    """The command that restores a limit by hand ({index}, {limit_w})."""


def _nvml(spec: DeviceSpec, traces_dir: str | Path | None) -> GPUGroup:
    """``auto`` goes through zeusd where the task's environment names one, else the first
    backend this process can read (NVML, else AMD SMI); ``nvml:<i>`` through NVML."""
    from zeus_airflow.core.devices.measure_only import open_first_local, open_zeusd_or_measure
    from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint

    if spec.indices is None:
        if ZeusdEndpoint.from_env() is not None:
            return open_zeusd_or_measure(None, local_readers())
        return open_first_local(local_readers())
    return _nvml_gpus(spec.indices)


def _nvml_gpus(indices: Indices) -> LeasableGPUs:
    from zeus_airflow.core.devices.nvml import NVMLGPUs

    return NVMLGPUs(indices)


def _amd_gpus(indices: Indices) -> LeasableGPUs:
    from zeus_airflow.core.devices.amdsmi import AMDSMIGPUs

    return AMDSMIGPUs(indices)


def _zeusd(spec: DeviceSpec, traces_dir: str | Path | None) -> GPUGroup:
    from zeus_airflow.core.devices.measure_only import open_zeusd_or_measure

    return open_zeusd_or_measure(spec.indices, local_readers())


def _zeusd_gpu(index: int) -> LeasableGPUs:
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs

    return ZeusdGPUs((index,))


def _replay(spec: DeviceSpec, traces_dir: str | Path | None) -> GPUGroup:
    from zeus_airflow.core.devices.replay import ReplayGPU

    return ReplayGPU(trace_of(spec, traces_dir))


def _simulated(spec: DeviceSpec, traces_dir: str | Path | None) -> GPUGroup:
    from zeus_airflow.core.devices.simulated import SimulatedGPU

    return SimulatedGPU(trace_of(spec, traces_dir))


def trace_of(spec: DeviceSpec, traces_dir: str | Path | None) -> WorkloadTrace:
    """The trace a replayed or simulated GPU follows; its GPU is checked here, not at parse
    time: the traces folder is only known where tasks run."""
    folder = resolve_traces_dir(traces_dir)
    if (folder / "summary_train.csv").is_file() and spec.gpu not in available_gpus(folder):
        raise ConfigError(
            f"device='{spec.backend}:{spec.gpu}...' is invalid: no power traces "
            f"for GPU {spec.gpu!r}; expected one of "
            f"{', '.join(available_gpus(folder))} (summary_power_<gpu>.csv in "
            f"{folder})"
        )
    return load_workload_trace(folder, spec.gpu, spec.workload)


SIMULATED_DEFAULT_WORKLOAD = "cifar100"
"""``simulated.DEFAULT_CURVE_WORKLOAD``, repeated so that parsing imports no device module
(a test checks the two agree)."""

BACKENDS: dict[str, Backend] = {
    "nvml": Backend(
        "nvml:<i>[,<j>...]",
        by_indices("nvml"),
        _nvml,
        read_locally=_nvml_gpus,
        reader_name="NVML",
        lease_prefixes=("",),
        restore=lambda index: _nvml_gpus((index,)),
        by_hand="nvidia-smi -i {index} -pl {limit_w}",
    ),
    "amdsmi": Backend(
        "amdsmi:<i>[,<j>...]",
        by_indices("amdsmi"),
        lambda spec, _: _amd_gpus(spec.indices),
        read_locally=_amd_gpus,
        reader_name="AMD SMI",
        lease_prefixes=("amdsmi:",),  # amdsmi.LEASE_ID_PREFIX
        restore=lambda index: _amd_gpus((index,)),
        by_hand="amd-smi set -g {index} --power-cap {limit_w}",
    ),
    "zeusd": Backend(
        "zeusd:<i>[,<j>...]",
        by_indices("zeusd"),
        _zeusd,
        lease_prefixes=("pci:", "zeusd-gpu:"),  # zeusd.LEASE_ID_PREFIX, INDEX_LEASE_PREFIX
        restore=_zeusd_gpu,
        by_hand="POST /gpu/set_power_limit?gpu_ids={index}&power_limit_mw={limit_w}000 to zeusd",
    ),
    "replay": Backend("replay:<gpu>:<workload>", by_trace("replay"), _replay),
    "simulated": Backend(
        "simulated:<gpu>[:<workload>]",
        by_trace("simulated", SIMULATED_DEFAULT_WORKLOAD),
        _simulated,
    ),
}
AUTO = "nvml"
"""The entry ``auto`` opens (with every visible GPU): it tries zeusd, then each local reader."""


def device_forms() -> tuple[str, ...]:
    """Every form the ``device`` parameter takes, for messages and docs."""
    return ("auto", *(b.form for b in BACKENDS.values()))


def local_readers() -> list[Backend]:
    """The backends a process reads its GPUs through itself, in the order ``auto`` tries."""
    return [b for b in BACKENDS.values() if b.read_locally is not None]


def lease_backend(gpu_id: str) -> Backend:
    """The backend whose leases name a GPU ``gpu_id``: the longest prefix that matches."""
    matching = [
        (len(prefix), b)
        for b in BACKENDS.values()
        if b.restore is not None
        for prefix in b.lease_prefixes
        if gpu_id.startswith(prefix)
    ]
    if not matching:
        raise DeviceError(f"no device backend leases GPU {gpu_id!r}")
    return max(matching, key=lambda m: m[0])[1]

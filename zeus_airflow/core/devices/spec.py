"""The ``device`` parameter: which GPUs a job trains on, written as one string.

Forms (see :data:`DEVICE_FORMS`):

- ``auto``: every NVIDIA GPU the task can see (NVML, honouring ``CUDA_VISIBLE_DEVICES``);
  an error when there is none. Figures are ``measured``. Where ``ZEUSD_SOCK_PATH`` or
  ``ZEUSD_HOST_PORT`` is set (decided where the task runs), the GPUs of the task's
  container through zeusd instead, NVIDIA or AMD (``zeusd.py``).
- ``nvml:<i>[,<j>...]``: those NVML indices.
- ``amdsmi:<i>[,<j>...]``: those AMD GPUs, through AMD SMI (``amdsmi.py``); ``auto`` also
  takes the AMD GPUs HIP uses where NVML finds no driver and AMD SMI loads.
- ``zeusd:<i>[,<j>...]``: those GPUs of the daemon (its indices, the host's).
- ``replay:<gpu>:<workload>``: a paper workload replayed on a virtual clock (``replayed``).
- ``simulated:<gpu>[:<workload>]``: real training steps on a simulated GPU whose power and
  slowdown follow that workload's measured power curve (``simulated``; see ``simulated.py``).

Parsing only checks the form, so it can run at DAG-parse time; :func:`open_device` touches
NVML or reads the traces, at run time. A zeusd that cannot be reached when the task starts
(not running, restarting, hanging) never fails it: the task measures only, through NVML or AMD
SMI read-only, at the GPUs' current limits, with a warning (``measure_only.py``). Traces come
from ``traces_dir``, else ``$ZEUS_TRACES_DIR``, else the package (:func:`resolve_traces_dir`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

from zeus_airflow.core.common.config import DB_INT_MAX, ConfigError
from zeus_airflow.core.common.traces import (
    PACKAGED_TRACES,
    WORKLOADS,
    available_gpus,
    load_workload_trace,
)
from zeus_airflow.core.devices.base import GPUGroup

if TYPE_CHECKING:
    from zeus_airflow.core.devices.rapl import RAPLReader
    from zeus_airflow.core.devices.zeusd import ZeusdHostEnergy

DEVICE_FORMS: tuple[str, ...] = (
    "auto",
    "nvml:<i>[,<j>...]",
    "amdsmi:<i>[,<j>...]",
    "zeusd:<i>[,<j>...]",
    "replay:<gpu>:<workload>",
    "simulated:<gpu>[:<workload>]",
)
TRACES_ENV = "ZEUS_TRACES_DIR"

_INDEX = re.compile(r"[0-9]+")
"""A GPU index: ASCII digits only (``int()`` would also take " 0" or a full-width "０")."""

DeviceBackend = Literal["nvml", "amdsmi", "zeusd", "replay", "simulated"]


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed ``device`` string."""

    backend: DeviceBackend
    indices: tuple[int, ...] | None = None
    """NVML (or zeusd) indices; None means every visible GPU (``auto``)."""
    gpu: str = ""
    """Trace GPU name (``v100``, ``a40``...) for replay and simulated devices."""
    workload: str = ""


def parse_device(text: str) -> DeviceSpec:
    """Check the form of a ``device`` string; raises ConfigError naming ``device``."""
    if not isinstance(text, str):
        _invalid(text)
    form, _, rest = text.strip().partition(":")
    parts = rest.split(":") if rest else []
    if form == "auto" and not parts:
        return DeviceSpec("nvml")
    if form == "nvml" and len(parts) == 1:
        return DeviceSpec("nvml", indices=_indices(text, parts[0]))
    if form == "zeusd" and len(parts) == 1:
        return DeviceSpec("zeusd", indices=_indices(text, parts[0]))
    if form == "amdsmi" and len(parts) == 1:
        return DeviceSpec("amdsmi", indices=_indices(text, parts[0]))
    if form == "replay" and len(parts) == 2 and all(parts):
        return DeviceSpec("replay", gpu=parts[0], workload=_workload(text, parts[1]))
    if form == "simulated" and len(parts) in (1, 2) and all(parts):
        from zeus_airflow.core.devices.simulated import DEFAULT_CURVE_WORKLOAD

        workload = parts[1] if len(parts) == 2 else DEFAULT_CURVE_WORKLOAD
        return DeviceSpec("simulated", gpu=parts[0], workload=_workload(text, workload))
    _invalid(text)


def open_device(spec: DeviceSpec, traces_dir: str | Path | None = None) -> GPUGroup:
    """Open the GPUs ``spec`` names. NVML is imported only here, so parsing needs no driver.
    ``auto`` goes through zeusd where the task's environment names a daemon."""
    from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint

    if spec.backend == "zeusd" or (
        spec.backend == "nvml" and spec.indices is None and ZeusdEndpoint.from_env() is not None
    ):
        from zeus_airflow.core.devices.measure_only import open_zeusd_or_measure

        return open_zeusd_or_measure(spec.indices)
    if spec.backend in ("nvml", "amdsmi"):
        from zeus_airflow.core.devices.measure_only import open_local

        return open_local(spec.backend, spec.indices)
    folder = resolve_traces_dir(traces_dir)
    if (folder / "summary_train.csv").is_file() and spec.gpu not in available_gpus(folder):
        # Checked here, not at parse time: the traces folder is only known where tasks run.
        raise ConfigError(
            f"device='{spec.backend}:{spec.gpu}...' is invalid: no power traces "
            f"for GPU {spec.gpu!r}; expected one of "
            f"{', '.join(available_gpus(folder))} (summary_power_<gpu>.csv in "
            f"{folder})"
        )
    trace = load_workload_trace(folder, spec.gpu, spec.workload)
    if spec.backend == "replay":
        from zeus_airflow.core.devices.replay import ReplayGPU

        return ReplayGPU(trace)
    from zeus_airflow.core.devices.simulated import SimulatedGPU

    return SimulatedGPU(trace)


def open_host_energy(device: GPUGroup) -> RAPLReader | ZeusdHostEnergy | None:
    """The host's CPU package and DRAM energy beside real GPUs: from zeusd's ``/cpu`` group
    beside GPUs driven through it (RAPL is root-only there too), else RAPL through sysfs. None
    beside a replayed or simulated GPU, whose clock is not the host's."""
    if device.measurement != "measured":
        return None
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs, ZeusdHostEnergy

    gpus = getattr(device, "device", device)  # through a GuardedGPUs, the GPUs it guards
    if isinstance(gpus, ZeusdGPUs):
        return ZeusdHostEnergy(gpus.client, gpus.discovery)
    from zeus_airflow.core.devices.rapl import RAPLReader

    return RAPLReader()


def resolve_traces_dir(explicit: str | Path | None = None) -> Path:
    """The paper's traces folder: ``explicit``, else ``$ZEUS_TRACES_DIR``, else the traces
    shipped in the package. Every ``--traces`` option and ``traces_dir`` parameter ends here."""
    chosen = explicit or os.environ.get(TRACES_ENV)
    return Path(chosen) if chosen else PACKAGED_TRACES


def _indices(text: str, value: str) -> tuple[int, ...]:
    parts = value.split(",")
    if not all(_INDEX.fullmatch(i) for i in parts):
        _invalid(text)
    indices = tuple(int(i) for i in parts)
    # Indices are kept in the store's integer columns (GPU leases).
    if any(i > DB_INT_MAX for i in indices):
        _invalid(text, f"a GPU index is over {DB_INT_MAX}; ")
    if len(set(indices)) != len(indices):
        _invalid(text, "a GPU index is repeated; ")
    return indices


def _workload(text: str, name: str) -> str:
    if name not in WORKLOADS:
        raise ConfigError(
            f"device={text!r} is invalid: workload {name!r} is not one of "
            f"{', '.join(sorted(WORKLOADS))} (device forms: "
            f"{', '.join(DEVICE_FORMS)})"
        )
    return name


def _invalid(text: object, problem: str = "") -> NoReturn:
    raise ConfigError(
        f"device={text!r} is invalid: {problem}expected one of {', '.join(DEVICE_FORMS)}"
    )

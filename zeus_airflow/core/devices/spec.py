"""The ``device`` parameter: which GPUs a job trains on, written as one string.

Forms (see :data:`DEVICE_FORMS`; each backend's is its entry in ``backends.BACKENDS``, which
also holds its opener):

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

from pathlib import Path
from typing import TYPE_CHECKING

from zeus_airflow.core.common.traces import TRACES_ENV, resolve_traces_dir
from zeus_airflow.core.devices.backends import BACKENDS, device_forms
from zeus_airflow.core.devices.base import GPUGroup
from zeus_airflow.core.devices.forms import DeviceSpec, invalid

if TYPE_CHECKING:
    from zeus_airflow.core.devices.rapl import RAPLReader
    from zeus_airflow.core.devices.zeusd import ZeusdHostEnergy

__all__ = [
    "DEVICE_FORMS",
    "TRACES_ENV",
    "DeviceSpec",
    "open_device",
    "parse_device",
    "resolve_traces_dir",
]

DEVICE_FORMS: tuple[str, ...] = device_forms()


def parse_device(text: str) -> DeviceSpec:
    """Check the form of a ``device`` string; raises ConfigError naming ``device``. Each
    backend of ``backends.BACKENDS`` reads its own form."""
    forms = device_forms()
    if not isinstance(text, str):
        invalid(text, forms)
    name, _, rest = text.strip().partition(":")
    parts = rest.split(":") if rest else []
    if name == "auto" and not parts:
        return DeviceSpec("nvml")  # backends.AUTO: zeusd, else each local reader
    backend = BACKENDS.get(name)
    spec = backend.parse(text, parts, forms) if backend is not None else None
    if spec is None:
        invalid(text, forms)
    return spec


def open_device(spec: DeviceSpec, traces_dir: str | Path | None = None) -> GPUGroup:
    """Open the GPUs ``spec`` names, through its backend's opener, at run time: a driver is
    imported only here, so parsing needs none."""
    return BACKENDS[spec.backend].open(spec, traces_dir)


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

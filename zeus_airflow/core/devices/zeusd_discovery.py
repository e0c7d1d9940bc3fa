"""What a zeusd offers, and which of its GPUs are this process's.

``GET /discover`` differs between releases. zeusd 0.5.0, the release people can run, lists
each GPU as ``{id, name}``; later builds (upstream #252, not in a release yet) add
``pci_address`` and ``cumulative_energy_available``. :func:`discover` takes either and says
which it met (:attr:`Discovery.api`).

The daemon sees every GPU of the node by the host's numbering; a container (a Kubernetes pod,
a compose service with ``device_ids``) sees only its own. :func:`choose` finds the daemon's GPUs
that are this process's, in this order (:class:`LocalGPUs` is what the process can tell
without privilege):

1. ``device="zeusd:<ids>"``: those, always.
2. PCI addresses, from ``/discover`` or from the node's GPU table (below), against the ones
   the process's own NVML (or its ``/dev/dri`` render nodes, on AMD) shows.
3. ``NVIDIA_VISIBLE_DEVICES``, which the NVIDIA container runtime reads: host indices (the
   device plugin's ``deviceIDStrategy=index``, Docker's ``device_ids``) are zeusd's ids as they
   are; ``GPU-`` UUIDs (the device plugin's default) are looked up in the node's GPU table.
4. A process whose NVML sees as many GPUs as the daemon sees the node's, in the daemon's order
   (both enumerate by NVML index): its ``CUDA_VISIBLE_DEVICES`` selection is zeusd's ids.
5. The UUIDs the process's NVML shows, looked up in the node's GPU table.
6. A daemon with one GPU: that one.

The node's GPU table is ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader``
written next to zeusd's socket (``gpus.csv``) by the zeusd image's entrypoint
(``docker/zeusd/``), or the file ``ZEUS_AIRFLOW_ZEUSD_GPUS`` names.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zeus_airflow.core.devices import milliwatts
from zeus_airflow.core.devices.base import DeviceError
from zeus_airflow.core.devices.zeusd_client import (
    TOKEN_ENV,
    ZeusdClient,
    ZeusdConfigError,
    ZeusdEndpoint,
    ZeusdError,
)

log = logging.getLogger(__name__)

GPU_TABLE_ENV = "ZEUS_AIRFLOW_ZEUSD_GPUS"
GPU_TABLE_NAME = "gpus.csv"
NVIDIA_VISIBLE_ENV = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
MINIMUM_ZEUSD = "0.5.0"
"""The first zeusd release whose /discover, scopes and query parameters this client speaks."""


@dataclass(frozen=True)
class DaemonGPU:
    """One GPU as ``/discover`` lists it; None where the daemon does not say (zeusd 0.5.0)."""

    id: int
    name: str
    pci_address: str | None = None
    cumulative_energy_available: bool | None = None


@dataclass(frozen=True)
class Discovery:
    """What the daemon has and what this process's token may do there."""

    endpoint: ZeusdEndpoint
    gpus: tuple[DaemonGPU, ...]
    cpu_ids: tuple[int, ...]
    enabled_groups: frozenset[str]
    auth_required: bool
    scopes: frozenset[str]

    @property
    def api(self) -> str:
        """``0.5.0`` (GPUs as ``{id, name}``) or ``pci`` (with PCI addresses and counter
        flags, upstream after 0.5.0)."""
        return "pci" if any(g.pci_address for g in self.gpus) else MINIMUM_ZEUSD

    def why_not(self, group: str) -> str | None:
        """Why this process may not use an API group, or None when it may."""
        if group not in self.enabled_groups:
            return (
                f"{self.endpoint.where} does not serve the {group} API group (enabled: "
                f"{', '.join(sorted(self.enabled_groups)) or 'none'}); start it with "
                f"--enable {group}"
            )
        if self.auth_required and group not in self.scopes:
            return (
                f"the token given to {self.endpoint.where} ({TOKEN_ENV}) lacks the "
                f"{group} scope (it has: {', '.join(sorted(self.scopes)) or 'none'}); "
                f"issue one with --scope {group}"
            )
        return None

    def summary(self) -> str:
        """One line for the task log: the GPUs, the groups, auth, and which API it speaks."""
        names = ", ".join(f"{g.id}: {g.name}" for g in self.gpus) or "none"
        api = (
            "/discover with PCI addresses and energy-counter flags (zeusd after 0.5.0)"
            if self.api == "pci"
            else "/discover without PCI addresses (zeusd 0.5.0): GPUs mapped as "
            "docs/devices.md says, energy counters probed"
        )
        return (
            f"{self.endpoint.where}: GPUs {names}; API groups "
            f"{', '.join(sorted(self.enabled_groups)) or 'none'}; "
            f"{'a token required' if self.auth_required else 'no token required'}; {api}"
        )


def discover(client: ZeusdClient) -> Discovery:
    """``/discover``, then ``/auth/whoami`` when the daemon requires a token. A token the
    daemon rejects (401) is a ZeusdError: nothing could be read with it."""
    where = client.endpoint.where
    data = client.get("/discover")
    try:
        gpus = tuple(_gpu(g) for g in data["gpus"])
        cpu_ids = tuple(int(c["id"]) for c in data.get("cpus", []))
        groups, auth = frozenset(data["enabled_api_groups"]), bool(data["auth_required"])
    except (KeyError, TypeError, ValueError) as err:
        raise ZeusdConfigError(
            f"{where} answered /discover without {err}: this client needs zeusd "
            f"{MINIMUM_ZEUSD} or newer (gpus as {{id, name}}, enabled_api_groups, "
            f"auth_required); it answered {str(data)[:200]}"
        ) from err
    scopes: frozenset[str] = frozenset()
    if auth:
        if client.endpoint.token is None:
            raise ZeusdError(
                f"{where} requires a token: set {TOKEN_ENV} (zeusd token issue "
                "--scope gpu-read,gpu-control)",
                401,
            )
        scopes = frozenset(client.get("/auth/whoami").get("scopes", []))
    return Discovery(client.endpoint, gpus, cpu_ids, groups, auth, scopes)


def _gpu(entry: Mapping[str, Any]) -> DaemonGPU:
    pci, counter = entry.get("pci_address"), entry.get("cumulative_energy_available")
    return DaemonGPU(
        int(entry["id"]),
        str(entry["name"]),
        None if pci is None else pci_form(str(pci)),
        None if counter is None else bool(counter),
    )


# --- the process's own GPUs ----------------------------------------------------------------
@dataclass(frozen=True)
class LocalGPUs:
    """What this process can tell about its GPUs without privilege: PCI addresses and UUIDs
    (NVML, read-only; PCI from ``/dev/dri`` on AMD), how many GPUs NVML shows and which of
    them ``CUDA_VISIBLE_DEVICES`` keeps, ``NVIDIA_VISIBLE_DEVICES``, and why the GPUs are MIG
    (an instance, or a GPU in MIG mode), if they are. None: cannot tell."""

    pci: frozenset[str] | None = None
    uuids: tuple[str, ...] | None = None
    nvml_count: int | None = None
    cuda_indices: tuple[int, ...] | None = None
    visible_devices: str | None = None
    mig: str | None = None


def local_gpus(nvml: Any = None, env: Mapping[str, str] = os.environ) -> LocalGPUs:
    """This process's view: NVML where it loads (``nvml``: pynvml, or a fake), else AMD's
    render nodes; the two variables from ``env``."""
    visible = env.get(NVIDIA_VISIBLE_ENV)
    mig_entry = next(
        (
            e.strip()
            for name in (NVIDIA_VISIBLE_ENV, CUDA_VISIBLE_ENV)
            for e in (env.get(name) or "").split(",")
            if e.strip().upper().startswith("MIG-")
        ),
        None,
    )
    found = _from_nvml(nvml, env.get(CUDA_VISIBLE_ENV))
    if found is None:
        return LocalGPUs(pci=amd_pci(), visible_devices=visible, mig=_mig(mig_entry, None))
    mig_mode = found.pop("mig")
    return LocalGPUs(**found, visible_devices=visible, mig=_mig(mig_entry, mig_mode))


def _mig(entry: str | None, mig_mode: str | None) -> str | None:
    return f"MIG instance {entry}" if entry else mig_mode


def _from_nvml(nvml: Any, cuda_visible: str | None) -> dict[str, Any] | None:
    from zeus_airflow.core.devices import nvml as nvml_device

    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:  # no driver, no library: not an NVIDIA process (or not this way)
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        uuids = tuple(milliwatts.text(nvml.nvmlDeviceGetUUID(h)) for h in handles)
        in_mig = [i for i, h in enumerate(handles) if nvml_device.mig_enabled(nvml, h)]
        return {
            "pci": frozenset(
                pci_form(milliwatts.text(nvml.nvmlDeviceGetPciInfo(h).busId)) for h in handles
            )
            or None,
            "uuids": uuids,
            "nvml_count": len(handles),
            "cuda_indices": nvml_device.visible_indices(nvml, cuda_visible, uuids),
            "mig": f"GPUs {in_mig} are in MIG mode" if in_mig else None,
        }
    finally:
        nvml.nvmlShutdown()


def amd_pci(dev: str = "/dev/dri", sys: str = "/sys/class/drm") -> frozenset[str] | None:
    """The PCI addresses of the AMD GPUs whose render nodes this container was given."""
    try:
        nodes = [n for n in os.listdir(dev) if n.startswith("renderD")]
    except OSError:
        return None
    found = {pci_form(os.path.basename(os.path.realpath(f"{sys}/{n}/device"))) for n in nodes}
    return frozenset(found) or None


# --- the node's GPU table ------------------------------------------------------------------
@dataclass(frozen=True)
class GPUTable:
    """The node's GPUs by host index: UUID and PCI address (``nvidia-smi`` CSV)."""

    source: str
    uuid_of: dict[int, str] = field(default_factory=dict)
    pci_of: dict[int, str] = field(default_factory=dict)

    def index_of_uuid(self, uuid: str) -> int | None:
        matches = [i for i, u in self.uuid_of.items() if u.upper().startswith(uuid.upper())]
        return matches[0] if len(matches) == 1 else None


def gpu_table(endpoint: ZeusdEndpoint, env: Mapping[str, str] = os.environ) -> GPUTable | None:
    """The table ``ZEUS_AIRFLOW_ZEUSD_GPUS`` names (an error if unreadable), else the one
    next to the socket where the zeusd image wrote it, else None."""
    named = env.get(GPU_TABLE_ENV)
    if named:
        try:
            return parse_gpu_table(Path(named).read_text(), named)
        except OSError as err:
            raise ZeusdConfigError(
                f"{GPU_TABLE_ENV}={named!r} cannot be read ({err.strerror}): expected the "
                "node's nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader"
            ) from err
    if endpoint.socket_path is None:
        return None
    beside = Path(endpoint.socket_path).parent / GPU_TABLE_NAME
    try:
        return parse_gpu_table(beside.read_text(), str(beside))
    except OSError:
        return None


def parse_gpu_table(text: str, source: str) -> GPUTable:
    table = GPUTable(source)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].upper().startswith("GPU-"):
            raise ZeusdConfigError(
                f"{source}, line {number} ({line.strip()!r}) is invalid: expected "
                "index, GPU-uuid, pci.bus_id (nvidia-smi --query-gpu=index,uuid,pci.bus_id "
                "--format=csv,noheader)"
            )
        table.uuid_of[int(parts[0])] = parts[1]
        table.pci_of[int(parts[0])] = pci_form(parts[2])
    return table


# --- choosing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """The daemon's GPUs this process trains on, their PCI addresses where known, and how
    they were found (for the task log)."""

    gpus: tuple[DaemonGPU, ...]
    pci: tuple[str | None, ...]
    how: str


def choose(
    discovery: Discovery,
    ids: Sequence[int] | None,
    local: LocalGPUs,
    table: GPUTable | None,
) -> Choice:
    """The daemon's GPUs that are this process's (module docstring, in that order)."""
    by_id = {g.id: g for g in discovery.gpus}
    where = discovery.endpoint.where
    if not by_id:
        raise DeviceError(f"{where} reports no GPU")
    pci_of = {g.id: g.pci_address for g in discovery.gpus if g.pci_address}
    if not pci_of and table is not None:
        pci_of = {i: p for i, p in table.pci_of.items() if i in by_id}
    if ids is not None:
        return _choice(discovery, ids, pci_of, f"device=zeusd:{','.join(map(str, ids))}")
    for attempt in _ATTEMPTS:
        found = attempt(discovery, local, table, pci_of)
        if found is not None:
            chosen, how = found
            return _choice(discovery, chosen, pci_of, how)
    raise DeviceError(_cannot_tell(discovery, local, table))


def _by_pci(
    discovery: Discovery, local: LocalGPUs, table: GPUTable | None, pci_of: dict[int, str]
) -> tuple[list[int], str] | None:
    if not pci_of or not local.pci:
        return None
    chosen = [i for i, pci in sorted(pci_of.items()) if pci in local.pci]
    if not chosen:
        theirs = ", ".join(f"{i}: {p}" for i, p in sorted(pci_of.items()))
        raise DeviceError(
            f"none of the GPUs this task sees ({', '.join(sorted(local.pci))}) is one of "
            f"{discovery.endpoint.where}'s ({theirs}): is the daemon on this node?"
        )
    source = "/discover" if discovery.api == "pci" else f"the GPU table {table and table.source}"
    return chosen, f"by PCI address (the process's NVML or /dev/dri against {source})"


def _by_visible_devices(
    discovery: Discovery, local: LocalGPUs, table: GPUTable | None, pci_of: dict[int, str]
) -> tuple[list[int], str] | None:
    entries = [e.strip() for e in (local.visible_devices or "").split(",") if e.strip()]
    said = f"{NVIDIA_VISIBLE_ENV}={local.visible_devices}"
    if not entries or entries[0].lower() in ("all", "none", "void"):
        return None
    if all(e.isascii() and e.isdigit() for e in entries):
        return [int(e) for e in entries], f"{said}: the host's indices, zeusd's ids"
    if table is not None and all(e.upper().startswith("GPU-") for e in entries):
        found = [table.index_of_uuid(e) for e in entries]
        if None in found:
            raise DeviceError(f"{said} names a GPU that {table.source} does not list")
        return [i for i in found if i is not None], f"{said}, by UUID in {table.source}"
    return None


def _by_same_count(
    discovery: Discovery, local: LocalGPUs, table: GPUTable | None, pci_of: dict[int, str]
) -> tuple[list[int], str] | None:
    if local.nvml_count != len(discovery.gpus) or not local.cuda_indices:
        return None
    return list(local.cuda_indices), (
        f"NVML here sees the node's {local.nvml_count} GPUs as the daemon does: "
        f"{CUDA_VISIBLE_ENV}'s selection is zeusd's ids"
    )


def _by_local_uuids(
    discovery: Discovery, local: LocalGPUs, table: GPUTable | None, pci_of: dict[int, str]
) -> tuple[list[int], str] | None:
    if table is None or not local.uuids:
        return None
    found = [table.index_of_uuid(u) for u in local.uuids]
    if None in found:
        return None
    return [i for i in found if i is not None], f"by NVML's UUIDs in {table.source}"


def _only_gpu(
    discovery: Discovery, local: LocalGPUs, table: GPUTable | None, pci_of: dict[int, str]
) -> tuple[list[int], str] | None:
    if len(discovery.gpus) != 1:
        return None
    return [discovery.gpus[0].id], "the daemon's only GPU"


_ATTEMPTS: tuple[
    Callable[[Discovery, LocalGPUs, GPUTable | None, dict[int, str]], tuple[list[int], str] | None],
    ...,
] = (_by_pci, _by_visible_devices, _by_same_count, _by_local_uuids, _only_gpu)


def _choice(discovery: Discovery, ids: Sequence[int], pci_of: dict[int, str], how: str) -> Choice:
    by_id = {g.id: g for g in discovery.gpus}
    unknown = [i for i in ids if i not in by_id]
    if unknown or not ids or len(set(ids)) != len(ids):
        known = f"distinct GPU ids of {discovery.endpoint.where}, one of {sorted(by_id)}"
        if how.startswith("device="):
            raise DeviceError(f"{how} is invalid: expected {known}")
        raise DeviceError(
            f"{how} gives GPUs {list(ids)}, not {known}: is the daemon on this node? "
            "Else pass device='zeusd:<ids>'"
        )
    return Choice(tuple(by_id[i] for i in ids), tuple(pci_of.get(i) for i in ids), how)


def _cannot_tell(discovery: Discovery, local: LocalGPUs, table: GPUTable | None) -> str:
    seen = (
        f"{NVIDIA_VISIBLE_ENV}={local.visible_devices!r}, NVML shows "
        f"{local.nvml_count if local.nvml_count is not None else 'nothing'}, "
        f"{'no GPU table' if table is None else f'the GPU table {table.source}'}"
    )
    return (
        f"cannot tell which of the {len(discovery.gpus)} GPUs of {discovery.endpoint.where} "
        f"this task uses ({seen}; /discover "
        f"{'has' if discovery.api == 'pci' else 'has no'} PCI addresses): pass "
        f"device='zeusd:<ids>', set {NVIDIA_VISIBLE_ENV} to the host's indices, or give "
        f"the node's GPU table ({GPU_TABLE_ENV}; docs/devices.md)"
    )


def pci_form(address: str) -> str:
    """``0000:01:00.0`` (lspci -D, zeusd) and NVML's ``00000000:01:00.0`` alike, lower case."""
    domain, _, rest = address.strip().lower().rpartition(":")
    head, _, bus = domain.rpartition(":")
    return f"{int(head or '0', 16):04x}:{bus}:{rest}"

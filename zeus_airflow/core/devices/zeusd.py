"""GPUs (NVIDIA, or AMD on zeusd builds after 0.5.0) and the host's CPU/DRAM energy through
zeusd, for unprivileged tasks.

Setting a power limit needs root; zeusd (upstream Zeus's privileged daemon) does it for a
process that holds a socket (and, when the daemon asks for one, a token with the
``gpu-control`` scope). :class:`ZeusdGPUs` is a :class:`~.base.GPUGroup` over the daemon's
GPUs: limits set and read through it, energy from its cumulative counters (or its power,
integrated, where a GPU has no trustworthy counter), all in the daemon's units (mW, mJ)
converted here. :class:`ZeusdHostEnergy` reads the CPU packages' and DRAM energy from its
``/cpu`` group, for the monitor's windows (as ``RAPLReader`` does from sysfs).

What the daemon offers is read once, at start (``zeusd_discovery.py``: ``/discover``,
``/auth/whoami``, which of its GPUs are this process's) and said in the task log: without
``gpu-read`` the GPUs cannot be measured at all (a DeviceError); without ``gpu-control``, or on
a MIG instance, the limits are fixed (``limits_fixed_because``) and the task measures at the
current limits, as NVML without root does. A daemon that goes away or hangs mid-run never
fails the training: limits cannot be changed any more (the lease puts them back later), energy
is carried on from the last power the daemon reported, with one warning, and the seconds spent
waiting on a daemon that did not answer are kept out of the device's clock, so out of every
window and try.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from zeus_airflow.core.devices import milliwatts
from zeus_airflow.core.devices.base import DeviceError, MeasurementKind, one_model
from zeus_airflow.core.devices.base import PowerLimitPermissionError as NoPermission
from zeus_airflow.core.devices.base import PowerLimitUnavailableError as Unavailable
from zeus_airflow.core.devices.controlled import ControlledGPUs
from zeus_airflow.core.devices.energy import EnergyCounters, PowerIntegrator
from zeus_airflow.core.devices.rapl import HostEnergy
from zeus_airflow.core.devices.sync import CUDASynchronizer, Synchronize
from zeus_airflow.core.devices.zeusd_client import (
    CPU_READ,
    GPU_CONTROL,
    GPU_READ,
    ZeusdClient,
    ZeusdEndpoint,
    ZeusdError,
    ZeusdUnreachableError,
)
from zeus_airflow.core.devices.zeusd_discovery import (
    Choice,
    DaemonGPU,
    Discovery,
    GPUTable,
    LocalGPUs,
    choose,
    discover,
    gpu_table,
    local_gpus,
)

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_INTERVAL_S = 0.1
LEASE_ID_PREFIX = "pci:"
"""Leases of GPUs driven through zeusd name the GPU by its PCI address where it is known (the
daemon has no UUIDs, and its indices are the host's, not the container's)."""
INDEX_LEASE_PREFIX = "zeusd-gpu:"
"""Where no PCI address is known (zeusd 0.5.0 without the node's GPU table): the daemon's
index, the host's NVML index, which names the same GPU as long as the node's GPUs stay."""


def open_session(
    endpoint: ZeusdEndpoint | None = None, client: ZeusdClient | None = None
) -> tuple[ZeusdClient, Discovery]:
    """A client of the daemon ``endpoint`` (else the environment) names, or ``client`` (a
    read-only one, say), and what the daemon allows."""
    if client is None:
        endpoint = endpoint or ZeusdEndpoint.from_env()
        if endpoint is None:
            raise DeviceError(
                "zeusd is not configured: set ZEUSD_SOCK_PATH (its Unix socket) "
                "or ZEUSD_HOST_PORT (host:port)"
            )
        client = ZeusdClient(endpoint)
    return client, discover(client)


class ZeusdGPUs(ControlledGPUs):
    """The daemon's GPUs of ``ids`` (zeusd's indices: the host's), or the ones this process
    uses when None (``zeusd_discovery.choose``: from ``local``, this process's view, default
    read now, and ``table``, the node's GPU table, default the one the environment or the
    socket's folder gives), through ``endpoint`` (default: the environment's) or an open
    ``client``.

    ``uuids`` are ``pci:<address>`` (``zeusd-gpu:<id>`` where no PCI address is known), what
    the power-limit leases record. ``control`` says how limits are set (``zeusd``), for the
    task's log, XComs and UI. ``synchronize`` defaults to PyTorch's CUDA devices
    0..count-1 of this process: a container that was given these GPUs only sees them so;
    pass another where the process sees more. ``clock`` is monotonic seconds; the seconds
    the opening thread spent on a daemon that did not answer in time are taken out of it.
    """

    measurement: MeasurementKind = "measured"
    control = "zeusd"

    def __init__(
        self,
        ids: Sequence[int] | None = None,
        *,
        endpoint: ZeusdEndpoint | None = None,
        client: ZeusdClient | None = None,
        local: LocalGPUs | Callable[[], LocalGPUs] | None = None,
        table: GPUTable | None = None,
        clock: Callable[[], float] = time.monotonic,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        synchronize: Synchronize | None = None,
    ) -> None:
        self._client, self.discovery = open_session(endpoint, client)
        cannot_read = self.discovery.why_not(GPU_READ)
        if cannot_read is not None:
            raise DeviceError(f"cannot measure the GPUs: {cannot_read}")
        self._clock, self._owner = clock, threading.get_ident()
        seen = local() if callable(local) else local or local_gpus()
        self.choice: Choice = choose(
            self.discovery, ids, seen, table or gpu_table(self._client.endpoint)
        )
        chosen = self.choice.gpus
        self.indices: tuple[int, ...] = tuple(g.id for g in chosen)
        self.count = len(chosen)
        self.uuids: tuple[str, ...] = tuple(
            LEASE_ID_PREFIX + pci if pci else f"{INDEX_LEASE_PREFIX}{g.id}"
            for g, pci in zip(chosen, self.choice.pci, strict=True)
        )
        self.model = one_model(
            [(g.id, g.name) for g in chosen], "pass device='zeusd:<ids>' naming GPUs of one model"
        )
        self._mig_because = _mig_because(seen.mig)
        self.energy_shared = self._mig_because is not None
        """The energy measured is a whole GPU's that MIG instances share (docs/devices.md)."""
        self._fixed_because = self._mig_because or self.discovery.why_not(GPU_CONTROL)
        self._range_w = self._limit_range_w()
        self._read_mw: milliwatts.ReadLimits = {}
        self._last_mw: list[int] | None = None
        """The limits last read or set (mW), what a daemon gone away leaves in place."""
        # The task's container sees only its own GPUs, numbered from 0 by CUDA (and by HIP
        # on AMD, which PyTorch's torch.cuda also drives): those are this group's.
        self._sync = synchronize or CUDASynchronizer(tuple(range(self.count)))
        self._lost = _LostDaemon(self)
        self._counters = EnergyCounters(self) if self._has_counters(chosen) else None
        self._sampler = (
            None
            if self._counters is not None
            else PowerIntegrator(self._lost.total_power_w, self.now_s, sample_interval_s)
        )
        log.info(
            "%s; this task's GPUs %s, %s", self.discovery.summary(), self.indices, self.choice.how
        )

    # --- the GPUGroup interface -------------------------------------------------------------
    def get_power_limits_w(self) -> tuple[int, ...]:
        """The limits the daemon reports; while it does not answer, the last ones known
        (read, or set through it), so that training goes on (the lease restores later)."""
        try:
            limits_mw = self._per_gpu("/gpu/get_power_limit", "power_limit_mw")
        except ZeusdUnreachableError as err:
            if self._last_mw is None:
                raise
            self._lost.say(err)
            limits_mw = self._last_mw
        self._last_mw = list(limits_mw)
        return milliwatts.remember(self._read_mw, limits_mw)

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        """Set each GPU's limit through the daemon (blocking); every value is checked before
        any GPU changes, a value read before is written back to the exact mW read, and when
        one GPU refuses, those already set go back first. Without ``gpu-control`` the daemon
        is never asked."""
        if self._mig_because is not None:
            raise Unavailable(self._mig_because)
        if self._fixed_because is not None and self.discovery.why_not(GPU_CONTROL):
            raise NoPermission(self._fixed_because)
        limits_mw = milliwatts.to_mw(
            self._read_mw, limits_w, self._range_w, self.model, self.indices
        )
        try:
            before_mw = self._per_gpu("/gpu/get_power_limit", "power_limit_mw")
        except ZeusdUnreachableError as err:
            if self._last_mw is None:  # nothing known to roll back to: do not touch
                raise self._refusal(self.indices[0], limits_mw[0], err) from err
            before_mw = list(self._last_mw)  # putting a limit back after a stall, say
        except ZeusdError as err:
            raise self._refusal(self.indices[0], limits_mw[0], err) from err
        if self._last_mw is None:
            self._last_mw = list(before_mw)
        self._set_in_turn(limits_mw, before_mw)

    def energy_j(self) -> float:
        return self._lost.energy_j()

    def now_s(self) -> float:
        """The clock less the seconds the task's thread waited on a daemon that did not
        answer in time: a stall is not training, so no window or try counts it."""
        return self._clock() - self._client.stalled_s(self._owner)

    @property
    def client(self) -> ZeusdClient:
        return self._client

    @property
    def energy_estimated_because(self) -> str | None:
        """Why part of the energy is an estimate (the daemon went away), or None."""
        return self._lost.because

    # --- what EnergyCounters reads ----------------------------------------------------------
    def read_counters_mj(self) -> list[int]:
        return self._per_gpu("/gpu/get_cumulative_energy", "energy_mj")

    def power_w(self) -> list[float]:
        answer = self._client.get("/gpu/get_power", gpu_ids=self.indices)
        return [float(_field(answer.get("power_mw", {}), i)) / 1000.0 for i in self.indices]

    def measured_energy_j(self) -> float:
        """Energy from the daemon, raising ZeusdError when it does not answer."""
        if self._counters is not None:
            return self._counters.energy_j()
        assert self._sampler is not None
        return self._sampler.energy_j()

    # --- internals ---------------------------------------------------------------------------
    def _has_counters(self, chosen: Sequence[DaemonGPU]) -> bool:
        """Whether every GPU has a trustworthy energy counter: as ``/discover`` says, or,
        from a daemon that does not say (zeusd 0.5.0), whether it answers a read of them
        (it answers 400 for a GPU without one, as NVML's NOT_SUPPORTED)."""
        flags = [g.cumulative_energy_available for g in chosen]
        if None not in flags:
            return all(flags)
        try:
            self.read_counters_mj()
        except ZeusdError as err:
            if err.status != 400:
                raise
            log.info(
                "zeusd reads no energy counter of GPUs %s (%s): power is sampled", self.indices, err
            )
            return False
        return True

    def _per_gpu(self, path: str, key: str) -> list[int]:
        answer = self._client.get(path, gpu_ids=self.indices)
        return [int(_field(answer, i)[key]) for i in self.indices]

    def _limit_range_w(self) -> tuple[int, int]:
        """The range every GPU accepts, rounded inwards to whole W."""
        answer = self._client.get("/gpu/get_power_limit_constraints", gpu_ids=self.indices)
        return milliwatts.whole_w_range(
            (r["min_power_limit_mw"], r["max_power_limit_mw"])
            for r in (_field(answer, i) for i in self.indices)
        )

    def _put(self, position: int, limit_mw: int) -> None:
        index = self.indices[position]
        try:
            self._client.post(
                "/gpu/set_power_limit", gpu_ids=[index], power_limit_mw=limit_mw, block=True
            )
        except ZeusdError as err:
            raise self._refusal(index, limit_mw, err) from err
        if self._last_mw is not None:
            self._last_mw[position] = limit_mw

    def _refusal(self, index: int, limit_mw: int, err: ZeusdError) -> DeviceError:
        """What a refused set means for the rest of the task (docs/devices.md, "zeusd")."""
        if err.status in (401, 403):
            return self._fixed(
                f"zeusd refused to set the power limit of GPU {index}: {err}", NoPermission
            )
        because = f"zeusd could not set the power limit of GPU {index}: {err}"
        if err.status == 400:
            return self._refused_in_range(index, limit_mw, because)
        return self._fixed(because)


class _LostDaemon:
    """Energy that survives the daemon going away: while it does not answer, energy goes on
    at the last power it reported over the device's clock (one warning). When it answers
    again, its counters cover the gap exactly, unless the gap held a stall: then the gap
    stays the estimate, since the counters would count the GPU's idle draw while the task
    waited on the daemon, which is not training. Training never fails for a measurement."""

    def __init__(self, gpus: ZeusdGPUs) -> None:
        self._gpus = gpus
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None  # (s, J) of the last answer
        self._power_w = 0.0
        self._offset_j = 0.0
        self._away = self._stalled_away = False
        self.because: str | None = None

    def energy_j(self) -> float:
        with self._lock:
            now_s = self._gpus.now_s()
            try:
                measured_j = self._gpus.measured_energy_j()
            except ZeusdError as err:
                return self._estimate(now_s, err)
            if self._away and self._stalled_away:
                self._offset_j = self._estimated_j(now_s) - measured_j
            self._away = self._stalled_away = False
            energy_j = measured_j + self._offset_j
            if self._last is not None and now_s > self._last[0]:
                self._power_w = max(0.0, (energy_j - self._last[1]) / (now_s - self._last[0]))
            self._last = (now_s, energy_j)
            return energy_j

    def total_power_w(self) -> float:
        """The sampler's reading: the last power answered while the daemon is away."""
        try:
            self._power_w = sum(self._gpus.power_w())
        except ZeusdError as err:
            self.say(err)
        return self._power_w

    def _estimate(self, now_s: float, err: ZeusdError) -> float:
        self.say(err)
        self._away = True
        self._stalled_away |= isinstance(err, ZeusdUnreachableError) and err.stalled
        return self._estimated_j(now_s)

    def _estimated_j(self, now_s: float) -> float:
        if self._last is None:
            return 0.0
        return self._last[1] + self._power_w * max(0.0, now_s - self._last[0])

    def say(self, err: ZeusdError) -> None:
        if self.because is None:
            self.because = (
                f"zeusd stopped answering ({err}); GPU energy since is estimated "
                f"at the last power it reported, {self._power_w:.0f} W"
            )
            log.warning("%s", self.because)


class ZeusdHostEnergy:
    """The host's CPU package and DRAM energy from zeusd's ``/cpu`` group (every package the
    daemon reads), since the reader opened, in J; None where not measured (no ``cpu-read``,
    no DRAM zone, the daemon gone: said once)."""

    def __init__(self, client: ZeusdClient, discovery: Discovery) -> None:
        self._client = client
        self.unavailable_because = (
            discovery.why_not(CPU_READ)
            if discovery.cpu_ids
            else f"{discovery.endpoint.where} reads no CPU package"
        )
        self._first: tuple[float, float | None] | None = None
        if self.unavailable_because is None:
            self._first = self._read_uj()
        if self.unavailable_because is not None:
            log.warning("CPU and DRAM energy are not measured: %s", self.unavailable_because)

    @property
    def available(self) -> bool:
        return self.unavailable_because is None

    def read(self) -> HostEnergy:
        if self._first is None or self.unavailable_because is not None:
            return HostEnergy(None, None)
        now = self._read_uj()
        if now is None:
            return HostEnergy(None, None)
        cpu_uj, dram_uj = now
        first_cpu, first_dram = self._first
        return HostEnergy(
            (cpu_uj - first_cpu) / 1e6,
            None if dram_uj is None or first_dram is None else (dram_uj - first_dram) / 1e6,
        )

    def close(self) -> None:
        """Nothing to release: reads are one request each."""

    def _read_uj(self) -> tuple[float, float | None] | None:
        try:
            answer = self._client.get("/cpu/get_cumulative_energy", cpu=True, dram=True)
        except ZeusdError as err:
            self.unavailable_because = f"CPU and DRAM energy are no longer measured: {err}"
            log.warning("%s", self.unavailable_because)
            return None
        packages = list(answer.values())
        dram = [p.get("dram_energy_uj") for p in packages]
        return (
            float(sum(p.get("cpu_energy_uj") or 0 for p in packages)),
            None if any(d is None for d in dram) else float(sum(dram)),
        )


def _mig_because(mig: str | None) -> str | None:
    if mig is None:
        return None
    return (
        f"{mig}: a power limit belongs to the whole GPU, which the MIG instances share, "
        "and is never set through zeusd for one instance (it would cap the other "
        "tenants' work too); energy is the whole GPU's, shared with the other instances"
    )


def _field(answer: dict[str, Any], index: int) -> Any:
    """A per-GPU answer's entry (keyed by the index as a string)."""
    try:
        return answer[str(index)]
    except (KeyError, TypeError) as err:
        raise ZeusdError(f"zeusd's answer has no entry for GPU {index}: {answer!r}") from err

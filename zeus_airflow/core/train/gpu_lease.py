"""Power-limit leases: the store remembers a GPU's original limit while a task may change it.

Nothing runs after SIGKILL or an out-of-memory kill (no ``finally``, no ``on_kill``, no
failure callback or listener in the task's process), so a task that dies mid-run
would leave its GPU capped for whoever trains next. Before a task may change a GPU's limit it
records a lease (host, GPU UUID, original limit, pid) in ``zeus_gpu_leases``; it deletes the
lease after putting the limit back. The next task on that host that trains on real GPUs first
restores the limit of every lease whose process is gone; ``zeus-airflow gpu restore`` does the
same by hand.

One lease per (host, GPU): a second task that finds a GPU leased by a live process trains
without touching its limit (measure mode) instead of fighting over it.

A lease names its GPU as its backend does (NVML's UUID; ``amdsmi:<uuid>``; through zeusd, the
PCI address or the daemon's index) and is restored through that backend, which the table in
``core/devices/backends.py`` finds by the id's prefix: this module names no backend. On
Kubernetes every pod has a host name of its own and its own process ids, so
``ZEUS_AIRFLOW_NODE_NAME`` (the node's name, from the downward API) names the host instead,
and a task restores only the leases of the GPUs it was given: the device plugin gives a GPU
to one pod at a time, so a lease left on one of them is a dead pod's, while a lease on
another GPU may be a live pod's whose process ids this pod cannot see.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from typing import Any

import psutil

from zeus_airflow.core.common.config import check_node_name
from zeus_airflow.core.devices.backends import lease_backend
from zeus_airflow.core.devices.base import DeviceError, GPUGroup
from zeus_airflow.core.devices.guarded import GuardedGPUs, LeasableGPUs
from zeus_airflow.core.store.base import Lease, LeaseRequest, Store, StoreError

_PID_START_SLACK_S = 1.0
"""A process created up to this long after its lease was stamped is still its holder
(the two clocks are read a few ms apart)."""


_LEFT_BEHIND: set[tuple[str, int]] = set()
"""(store, lease id) of the leases this process's guards could not delete (the store failed
at the task's end): their holder is alive but holds them no more, so a later task in this
process clears them (in another process, the holder is dead)."""


def holder_alive(lease: Lease) -> bool:
    """Whether the process that took the lease still runs (on this host)."""
    try:
        created_s = psutil.Process(lease.pid).create_time()
    except psutil.NoSuchProcess:
        return False
    # A pid reused by a process started after the lease is not the holder.
    return created_s <= lease.acquired_at.timestamp() + _PID_START_SLACK_S


NODE_NAME_ENV = "ZEUS_AIRFLOW_NODE_NAME"


def this_host() -> str:
    """The node's name where set (Kubernetes: one per node, not per pod), else the host's.
    Raises ConfigError naming ``ZEUS_AIRFLOW_NODE_NAME`` when it cannot be a lease's host."""
    node = os.environ.get(NODE_NAME_ENV)
    return check_node_name(NODE_NAME_ENV, node) if node else socket.gethostname()


class GPULeases:
    """The store's lease table seen from one host. The reads and writes are the store's, with
    its retries and its errors (StoreError naming the store)."""

    def __init__(self, store: Store, host: str | None = None) -> None:
        self.store = store
        self.host = host or this_host()

    def on_host(self) -> list[Lease]:
        return self.store.leases_on_host(self.host)

    def acquire(self, device: LeasableGPUs, original_limits_w: Sequence[int]) -> list[int] | None:
        """Lease every GPU of ``device`` at once; None when one is leased by someone else."""
        return self.store.acquire_leases(
            [
                LeaseRequest(self.host, uuid, index, limit, os.getpid())
                for uuid, index, limit in zip(
                    device.uuids, device.indices, original_limits_w, strict=True
                )
            ]
        )

    def holders(self, device: LeasableGPUs) -> list[Lease]:
        return [lease for lease in self.on_host() if lease.gpu_uuid in device.uuids]

    def release(self, lease_ids: Sequence[int]) -> None:
        self.store.release_leases(list(lease_ids))


@dataclass
class Restored:
    """What a restore did: leases put back and deleted, and those that failed (kept)."""

    restored: list[Lease] = field(default_factory=list)
    failed: list[tuple[Lease, str]] = field(default_factory=list)


def restore_host_leases(
    leases: GPULeases,
    log: Any,
    *,
    own: LeasableGPUs | None = None,
    include_live: bool = False,
    only_own: bool = False,
) -> Restored:
    """Put back the original limits of this host's leases whose process is gone (every
    lease with ``include_live``), deleting each lease once its GPU is restored.

    GPUs of ``own`` (the caller's group) are set through it (only those with ``only_own``),
    any other through the backend its id names, by its index; either way the GPU
    is checked by UUID, so a GPU renumbered since is never confused with another. A GPU
    that cannot be restored keeps its lease and is reported, not raised.
    """
    done = Restored()
    with ExitStack() as opened:
        for lease in leases.on_host():
            left = (leases.store.where, lease.id) in _LEFT_BEHIND
            mine = own is not None and lease.gpu_uuid in own.uuids
            if (holder_alive(lease) and not left and not include_live) or (only_own and not mine):
                continue
            try:
                gpus = (
                    own
                    if own is not None and mine
                    else opened.enter_context(closing(_one_gpu(lease)))
                )
                _restore(lease, gpus)
            except DeviceError as err:
                log.warning(
                    "GPU %d (%s): cannot restore its power limit to %d W: %s",
                    lease.gpu_index,
                    lease.gpu_uuid,
                    lease.original_limit_w,
                    err,
                )
                done.failed.append((lease, str(err)))
                continue
            leases.release([lease.id])
            _LEFT_BEHIND.discard((leases.store.where, lease.id))
            log.warning(
                "GPU %d (%s): power limit restored to %d W, left by process %d on %s",
                lease.gpu_index,
                lease.gpu_uuid,
                lease.original_limit_w,
                lease.pid,
                lease.host,
            )
            done.restored.append(lease)
    return done


def _one_gpu(lease: Lease) -> LeasableGPUs:
    """The leased GPU, opened by its index through the backend its id names
    (``core/devices/backends.py``)."""
    restore = lease_backend(lease.gpu_uuid).restore
    assert restore is not None
    return restore(lease.gpu_index)


def _restore(lease: Lease, gpus: LeasableGPUs) -> None:
    if lease.gpu_uuid not in gpus.uuids:
        by_hand = lease_backend(lease.gpu_uuid).by_hand.format(
            index="<index>", limit_w=lease.original_limit_w
        )
        raise DeviceError(
            f"GPU {lease.gpu_index} is now {', '.join(gpus.uuids)}, not the "
            f"leased {lease.gpu_uuid}: restore its limit by hand ({by_hand})"
        )
    position = gpus.uuids.index(lease.gpu_uuid)
    limits = list(gpus.get_power_limits_w())
    if limits[position] != lease.original_limit_w:
        limits[position] = lease.original_limit_w
        gpus.set_power_limits_w(limits)


class PowerLimitGuard:
    """Holds a task's GPUs for the length of its run and puts their limits back.

    Entering restores stale leases of these GPUs, then leases them at their current limits;
    :meth:`restore` (also called from ``on_kill``) puts the originals back and freezes the
    limits; leaving restores and deletes the lease. Virtual devices (replay, simulated) are
    passed through untouched: their limits die with the process.
    """

    def __init__(self, device: GPUGroup, leases: GPULeases, log: Any) -> None:
        self.leases = leases
        self.log = log
        self.real = GuardedGPUs(device) if isinstance(device, LeasableGPUs) else None
        self.gpus: GPUGroup = self.real or device
        """What training may use."""
        self.original_limits_w: tuple[int, ...] | None = None
        self._owns_limits = True
        self._lease_ids: list[int] = []

    def __enter__(self) -> PowerLimitGuard:
        if self.real is not None:
            self._recover(self.real.device)
        self.original_limits_w = self.gpus.get_power_limits_w()
        if self.real is not None:
            self._take(self.real.device)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.restore("the task ended")
        except DeviceError as err:
            # The training is done and recorded; a limit that cannot be put back now (the
            # daemon gone, the driver failing) keeps its lease for the next task here.
            self.log.warning(
                "power limits could not be put back to %s W (%s): the lease is "
                "kept, so the next task on %s or `zeus-airflow gpu restore` puts "
                "them back",
                list(self.original_limits_w or ()),
                err,
                self.leases.host,
            )
            return
        if self._lease_ids:
            self._release()

    def _release(self) -> None:
        """Delete the leases; a store that cannot fails nothing (the limits are back
        already): the next task on this host finds the lease's holder dead and deletes it."""
        try:
            self.leases.release(self._lease_ids)
        except StoreError as err:
            _LEFT_BEHIND.update((self.leases.store.where, i) for i in self._lease_ids)
            self.log.warning(
                "Zeus: the GPUs' limits are restored but their leases are still "
                "in the store (%s); the next task on this host clears them",
                err,
            )
        self._lease_ids = []

    def restore(self, because: str) -> None:
        """Put the original limits back now and refuse any later change of real GPUs'."""
        if self.real is None:
            return
        self.real.freeze(f"power limits are frozen: {because}")
        if (
            self._owns_limits
            and self.original_limits_w is not None
            and self.real.get_power_limits_w() != self.original_limits_w
        ):
            self.real.device.set_power_limits_w(self.original_limits_w)
            self.log.info(
                "power limits restored to %s W (%s)", list(self.original_limits_w), because
            )

    def _recover(self, gpus: LeasableGPUs) -> None:
        """Limits left on this host by tasks that died (SIGKILL, out of memory)."""
        restore_host_leases(
            self.leases, self.log, own=gpus, only_own=bool(os.environ.get(NODE_NAME_ENV))
        )

    def _take(self, gpus: LeasableGPUs) -> None:
        assert self.real is not None and self.original_limits_w is not None
        ids = self.leases.acquire(gpus, self.original_limits_w)
        if ids is not None:
            self._lease_ids = ids
            return
        holders = ", ".join(
            f"GPU {lease.gpu_index} by pid {lease.pid}"
            f"{'' if holder_alive(lease) else ', dead, its limit not restorable'}"
            for lease in self.leases.holders(gpus)
        )
        self._owns_limits = False
        # Said once, by the engine, which reads limits_fixed_because before the first try.
        self.real.freeze(f"these GPUs' power limits are leased to another task ({holders})")

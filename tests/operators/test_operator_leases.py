"""Power-limit leases in a real SQLite store, and ``zeus-airflow gpu leases | restore`` on the
fake NVML (the operator's use of them is in test_operator.py)."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psutil
import pytest
from fixtures_store import leave_lease

from zeus_airflow.cli import main
from zeus_airflow.core.devices import nvml
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.store.base import Lease
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.gpu_lease import GPULeases, holder_alive, restore_host_leases
from zeus_airflow.testing import FakeGPUSpec, FakeNVML


@pytest.fixture
def store_url(tmp_path: object) -> str:
    url = f"sqlite:///{tmp_path}/zeus.db"
    SQLStore(url, create_schema=True).engine.dispose()
    return url


def lease_of(pid: int, acquired_at: datetime) -> Lease:
    return Lease(1, "host", "GPU-x", 0, 250, pid, acquired_at)


def test_a_lease_is_held_only_by_the_process_that_took_it() -> None:
    started = datetime.fromtimestamp(psutil.Process().create_time(), UTC)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()

    assert holder_alive(lease_of(os.getpid(), datetime.now(UTC)))
    assert not holder_alive(lease_of(child.pid, datetime.now(UTC)))
    # Same pid, but the process started after the lease: the pid was reused.
    assert not holder_alive(lease_of(os.getpid(), started - timedelta(hours=1)))


def test_one_lease_per_gpu_and_host(store_url: str, fake_gpus: FakeNVML) -> None:
    gpus = NVMLGPUs((0,), nvml=fake_gpus)
    here, there = GPULeases(SQLStore(store_url)), GPULeases(SQLStore(store_url), host="other-host")
    first = here.acquire(gpus, (250,))

    assert first is not None and here.acquire(gpus, (250,)) is None
    assert there.acquire(gpus, (250,)) is not None  # same UUID on another host: another GPU
    here.release(first)
    assert [lease.host for lease in here.on_host()] == [] and len(there.on_host()) == 1


def leave_capped_gpu(url: str, fake: FakeNVML, pid: int, index: int = 0) -> None:
    """What a task killed mid-profiling leaves: a lease at 250 W, the GPU at 150 W."""
    gpus = NVMLGPUs((index,), nvml=fake)
    leave_lease(url, gpus.uuids[0], 250, pid, gpu_index=index)  # as that process took it
    gpus.set_power_limits_w([150])
    gpus.close()


def test_gpu_restore_puts_back_what_a_dead_task_left(
    store_url: str, fake_gpus: FakeNVML, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leave_capped_gpu(store_url, fake_gpus, dead.pid)

    assert main(["gpu", "leases", "--db", store_url]) == 0
    assert " dead " in capsys.readouterr().out
    assert main(["gpu", "restore", "--db", store_url]) == 0

    assert fake_gpus.limits_mw() == [250_000]
    assert "restored to 250 W" in capsys.readouterr().out
    assert GPULeases(SQLStore(store_url)).on_host() == []


def test_gpu_restore_leaves_a_running_task_alone_unless_all(
    store_url: str, fake_gpus: FakeNVML, capsys: pytest.CaptureFixture[str]
) -> None:
    leave_capped_gpu(store_url, fake_gpus, os.getpid())  # "running": this very process

    assert main(["gpu", "restore", "--db", store_url]) == 0
    assert fake_gpus.limits_mw() == [150_000]
    assert "nothing to restore" in capsys.readouterr().out

    assert main(["gpu", "restore", "--all", "--db", store_url]) == 0
    assert fake_gpus.limits_mw() == [250_000]


def test_gpu_restore_refuses_a_renumbered_gpu(
    store_url: str, fake_gpus: FakeNVML, capsys: pytest.CaptureFixture[str]
) -> None:
    leases = GPULeases(SQLStore(store_url))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leave_lease(store_url, "GPU-gone", 250, dead.pid)

    assert main(["gpu", "restore", "--db", store_url]) == 1
    assert "not the leased GPU-gone" in capsys.readouterr().err
    assert fake_gpus.set_calls == [] and len(leases.on_host()) == 1


def test_a_task_restores_every_dead_lease_of_its_host(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own GPU through its group, another GPU through NVML; a lease that cannot be
    restored is reported and kept."""
    fake = FakeNVML(2, FakeGPUSpec(default_limit_mw=250_000))
    monkeypatch.setattr(nvml, "NVMLGPUs", functools.partial(nvml.NVMLGPUs, nvml=fake))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for index in (0, 1):
        leave_capped_gpu(store_url, fake, dead.pid, index)
    leases = GPULeases(SQLStore(store_url))
    leave_lease(store_url, "GPU-elsewhere", 1, dead.pid, host="another-host")
    leave_lease(store_url, "GPU-gone", 1, dead.pid, gpu_index=1)

    own = nvml.NVMLGPUs((0,))
    done = restore_host_leases(leases, logging.getLogger("test"), own=own)

    assert fake.limits_mw() == [250_000, 250_000]
    assert sorted(lease.gpu_uuid for lease in done.restored) == sorted(fake.gpu_uuids())
    assert [lease.gpu_uuid for lease, _ in done.failed] == ["GPU-gone"]
    assert [lease.gpu_uuid for lease in leases.on_host()] == ["GPU-gone"]

"""GPUs through zeusd, against the fake zeusd (a real HTTP server on a tmp Unix socket over the
fake NVML): discovery and scopes, units, set and restore on every exit path, a SIGKILLed
task's limit put back by the next one, 401/403/500 answers, and a daemon that goes away
while a task trains (the training still finishes)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.devices.base import (
    DeviceError,
    PowerLimitPermissionError,
    PowerLimitUnavailableError,
)
from zeus_airflow.core.devices.spec import open_device, open_host_energy, parse_device
from zeus_airflow.core.devices.zeusd import ZeusdGPUs, ZeusdHostEnergy
from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint, ZeusdError
from zeus_airflow.core.devices.zeusd_discovery import LocalGPUs, local_gpus
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.base import LeaseRequest, RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import A100_SXM4, FakeGPUSpec, FakeNVML, ManualClock
from zeus_airflow.testing.fake_zeusd import FakeCPU, FakeZeusd

A100 = replace(A100_SXM4, default_limit_mw=400_000)  # draws 360 W at 400 W
MI300X = FakeGPUSpec(model="AMD Instinct MI300X", min_limit_mw=200_000, max_limit_mw=750_000)
LOG = logging.getLogger("zeus_airflow")


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "zeusd.sock"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def daemon(sock: Path, clock: ManualClock) -> Iterator[FakeZeusd]:
    with FakeZeusd(sock, FakeNVML(2, A100, clock=clock)) as fake:
        yield fake


@pytest.fixture
def store(tmp_path: Path) -> SQLStore:
    return SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)


def gpus_of(daemon: FakeZeusd, ids: tuple[int, ...] = (0, 1), **kw: Any) -> ZeusdGPUs:
    return ZeusdGPUs(
        ids,
        endpoint=ZeusdEndpoint(socket_path=str(daemon.socket_path), **kw),
        clock=daemon.nvml.clock,
    )


def job() -> JobConfig:
    return JobConfig(
        "job",
        (32,),
        32,
        target_metric=1.0,
        max_epochs=2,
        exploration_budget=None,
        profiler=ProfilerConfig(warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0),
    )


def steps_train(clock: ManualClock, during: Any = None):  # type: ignore[no-untyped-def]
    def train(run: TrainingRun) -> str:
        for epoch in run.epochs():
            for step in run.steps(range(30)):
                clock.advance(0.1)
                if during is not None:
                    during(epoch, step)
            run.report_metric(1.0)
        return "trained"

    return train


# --- reading -----------------------------------------------------------------------------------
def test_discovery_units_and_energy_through_the_daemon(
    daemon: FakeZeusd, clock: ManualClock
) -> None:
    gpus = gpus_of(daemon)
    assert (gpus.model, gpus.count, gpus.indices) == ("NVIDIA A100-SXM4-40GB", 2, (0, 1))
    assert gpus.uuids == ("pci:0000:11:00.0", "pci:0000:12:00.0")
    assert gpus.power_limit_range_w() == (100, 400) and gpus.control == "zeusd"
    assert gpus.limits_fixed_because is None and gpus.energy_source == "counter"
    start_j = gpus.energy_j()
    clock.advance(10.0)
    assert gpus.energy_j() - start_j == pytest.approx(2 * 3600.0, abs=0.01)
    assert gpus.get_power_limits_w() == (400, 400)


def test_window_edges_wait_for_the_containers_cuda_devices(
    daemon: FakeZeusd, monkeypatch: pytest.MonkeyPatch
) -> None:
    waited: list[int] = []
    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, synchronize=waited.append
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    gpus_of(daemon, (1, 0)).synchronize()  # the daemon's GPUs 1 and 0: CUDA's 0 and 1 here
    assert waited == [0, 1]


def test_a_gpu_without_a_trustworthy_counter_is_measured_from_its_power(
    sock: Path, clock: ManualClock
) -> None:
    with FakeZeusd(sock, FakeNVML(1, replace(A100, energy_counter=False), clock=clock)) as d:
        gpus = gpus_of(d, (0,))
        assert gpus.energy_source == "sampling"
        start_j = gpus.energy_j()
        clock.advance(10.0)
        assert gpus.energy_j() - start_j == pytest.approx(3600.0, abs=0.01)
        gpus.close()


def test_the_hosts_cpu_and_dram_energy_come_from_the_cpu_group(
    sock: Path, clock: ManualClock
) -> None:
    cpus = (FakeCPU(cpu_w=50.0, dram_w=5.0), FakeCPU(cpu_w=30.0, dram_w=5.0))
    with FakeZeusd(sock, FakeNVML(1, A100, clock=clock), cpus=cpus) as d:
        host = open_host_energy(gpus_of(d, (0,)))
        assert isinstance(host, ZeusdHostEnergy) and host.available
        clock.advance(10.0)
        reading = host.read()
        assert (reading.cpu_energy_j, reading.dram_energy_j) == pytest.approx((800.0, 100.0))


def test_auto_picks_the_daemons_gpus_this_container_sees(
    daemon: FakeZeusd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEUSD_SOCK_PATH", str(daemon.socket_path))
    monkeypatch.setattr(
        "zeus_airflow.core.devices.zeusd.local_gpus",
        lambda: LocalGPUs(pci=frozenset({"0000:12:00.0"})),
    )
    device = open_device(parse_device("auto"))
    assert isinstance(device, ZeusdGPUs) and device.indices == (1,)
    assert isinstance(open_device(parse_device("zeusd:0,1")), ZeusdGPUs)
    monkeypatch.setattr("zeus_airflow.core.devices.zeusd.local_gpus", LocalGPUs)
    with pytest.raises(DeviceError, match=r"pass device='zeusd:<ids>'"):
        open_device(parse_device("auto"))


def test_nvml_in_the_container_names_its_gpus_by_pci_address(daemon: FakeZeusd) -> None:
    """auto keeps the daemon's GPUs whose PCI address the container's own NVML shows (here
    one GPU, NVML's ``00000000:11:00.0``: the daemon's GPU 0 of two)."""
    assert local_gpus(FakeNVML(3, A100), {}).pci == {
        "0000:11:00.0",
        "0000:12:00.0",
        "0000:13:00.0",
    }
    container = FakeNVML(1, A100)
    gpus = ZeusdGPUs(
        endpoint=ZeusdEndpoint(socket_path=str(daemon.socket_path)),
        local=lambda: local_gpus(container, {}),
    )
    assert gpus.indices == (0,) and gpus.uuids == ("pci:0000:11:00.0",)
    assert container.init_count == 0  # NVML shut down again
    assert local_gpus(FakeNVML(1, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), {}).uuids is None


def test_bad_gpu_ids_are_refused_before_any_request_changes_anything(daemon: FakeZeusd) -> None:
    with pytest.raises(
        DeviceError,
        match=r"device=zeusd:0,7 is invalid: expected distinct "
        r"GPU ids of zeusd at .*, one of \[0, 1\]",
    ):
        gpus_of(daemon, (0, 7))
    gpus = gpus_of(daemon)
    with pytest.raises(DeviceError, match=r"power limit 50 W is invalid .* \[100, 400\] W"):
        gpus.set_power_limits_w([50, 50])
    assert daemon.set_limit_calls() == []


# --- set and restore --------------------------------------------------------------------------
@pytest.mark.parametrize("exit_path", ["returns", "raises", "on_kill"])
def test_limits_set_through_the_daemon_are_restored_on_every_exit_path(
    daemon: FakeZeusd, store: SQLStore, clock: ManualClock, exit_path: str
) -> None:
    daemon.nvml.nvmlDeviceSetPowerManagementLimit(
        daemon.nvml.nvmlDeviceGetHandleByIndex(1), 325_500
    )  # an odd limit, restored exactly
    leases = GPULeases(store)
    try:
        with PowerLimitGuard(gpus_of(daemon), leases, LOG) as guard:
            guard.gpus.set_power_limits_w([150, 150])
            assert daemon.nvml.limits_mw() == [150_000, 150_000]
            assert len(leases.on_host()) == 2
            if exit_path == "raises":
                raise RuntimeError("the training failed")
            if exit_path == "on_kill":
                guard.restore("Airflow killed the task")
                assert daemon.nvml.limits_mw() == [400_000, 325_500]
                with pytest.raises(PowerLimitUnavailableError, match="frozen"):
                    guard.gpus.set_power_limits_w([150, 150])
    except RuntimeError:
        assert exit_path == "raises"
    assert daemon.nvml.limits_mw() == [400_000, 325_500]
    assert leases.on_host() == []


def test_the_engine_profiles_through_the_daemon_and_puts_the_limits_back(
    daemon: FakeZeusd, store: SQLStore, clock: ManualClock
) -> None:
    with PowerLimitGuard(gpus_of(daemon), GPULeases(store), LOG) as guard:
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            steps_train(clock), RecurrenceKey("r1")
        )
    assert result.reached_target and result.return_value == "trained"
    limits_set = {mw for _, mw in daemon.set_limit_calls()}
    assert 400_000 in limits_set and len(limits_set) >= 3  # the profiler walked the range
    assert daemon.nvml.limits_mw() == [400_000, 400_000]
    # The store keeps how the limits were set, for the UI's runs table.
    assert result.final.outcome.power_control == "zeusd"
    assert [t.power_control for t in list_trials(store)] == ["zeusd"]


KILLED_TASK = textwrap.dedent("""
    import logging, sys, time
    from zeus_airflow.core.devices.zeusd import ZeusdGPUs
    from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
    from zeus_airflow.core.store.sql import SQLStore

    with PowerLimitGuard(ZeusdGPUs((0,)), GPULeases(SQLStore(sys.argv[1])),
                         logging.getLogger("task")) as guard:
        guard.gpus.set_power_limits_w([150])
        print("capped", flush=True)
        time.sleep(60)
""")


def test_a_sigkilled_tasks_limit_is_restored_through_the_daemon_by_the_next_task(
    sock: Path, store: SQLStore, tmp_path: Path
) -> None:
    with FakeZeusd(sock, FakeNVML(1, A100)) as daemon:
        env = {**os.environ, "ZEUSD_SOCK_PATH": str(sock)}
        task = subprocess.Popen(
            [sys.executable, "-c", KILLED_TASK, str(store.engine.url)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert task.stdout is not None and task.stdout.readline().strip() == "capped"
        finally:
            task.send_signal(signal.SIGKILL)
            task.wait()
        assert daemon.nvml.limits_mw() == [150_000]  # nothing ran after SIGKILL
        (lease,) = GPULeases(store).on_host()
        assert (lease.gpu_uuid, lease.original_limit_w) == ("pci:0000:11:00.0", 400)

        with PowerLimitGuard(gpus_of(daemon, (0,)), GPULeases(store), LOG):
            assert daemon.nvml.limits_mw() == [400_000]
        assert GPULeases(store).on_host() == []


# --- refusals ---------------------------------------------------------------------------------
def test_a_rejected_token_is_a_clear_error_at_start(sock: Path) -> None:
    with FakeZeusd(sock, FakeNVML(1, A100), tokens={"good": ("gpu-read",)}) as daemon:
        with pytest.raises(ZeusdError, match=r"answered 401 .* set ZEUSD_TOKEN") as caught:
            gpus_of(daemon, (0,), token="forged")
        assert caught.value.status == 401
        with pytest.raises(ZeusdError, match="requires a token: set ZEUSD_TOKEN"):
            gpus_of(daemon, (0,))


def test_a_token_without_gpu_control_measures_at_the_current_limits(
    sock: Path, clock: ManualClock, store: SQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeZeusd(
        sock, FakeNVML(1, A100, clock=clock), tokens={"reader": ("gpu-read",)}
    ) as daemon:
        gpus = gpus_of(daemon, (0,), token="reader")
        assert "lacks the gpu-control scope (it has: gpu-read)" in (gpus.limits_fixed_because or "")
        with pytest.raises(PowerLimitPermissionError, match="--scope gpu-control"):
            gpus.set_power_limits_w([150])
        with caplog.at_level(logging.WARNING):
            result = Engine(store, gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
                steps_train(clock), RecurrenceKey("r1")
            )
        assert result.reached_target and result.power_limit_w == 400
        assert daemon.set_limit_calls() == []
        assert any("gpu-control" in r.getMessage() for r in caplog.records)


def test_a_gpu_control_group_the_daemon_does_not_serve_is_said(sock: Path) -> None:
    with FakeZeusd(sock, FakeNVML(1, A100), groups=("gpu-read",)) as daemon:
        gpus = gpus_of(daemon, (0,))
        assert "does not serve the gpu-control API group" in (gpus.limits_fixed_because or "")
        assert open_host_energy(gpus).read().cpu_energy_j is None  # no cpu-read either
    with (
        FakeZeusd(sock, FakeNVML(1, A100), groups=("cpu-read",)) as daemon,
        pytest.raises(DeviceError, match=r"cannot measure the GPUs: .* gpu-read"),
    ):
        gpus_of(daemon, (0,))


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, 403, PowerLimitPermissionError),
        (pynvml.NVML_ERROR_UNKNOWN, 500, PowerLimitUnavailableError),
    ],
)
def test_a_refused_set_fixes_the_limits_and_rolls_the_group_back(
    sock: Path, code: int, status: int, error: type[Exception]
) -> None:
    fake = FakeNVML(gpus=[A100, replace(A100, set_limit_error=code)])
    with FakeZeusd(sock, fake) as daemon:
        gpus = gpus_of(daemon)
        with pytest.raises(error, match=f"answered {status}"):
            gpus.set_power_limits_w([150, 150])
        assert f"answered {status}" in (gpus.limits_fixed_because or "")
        # The first GPU took 150 W, then went back: the group keeps one limit.
        assert daemon.set_limit_calls() == [(0, 150_000), (1, 150_000), (0, 400_000)]
        assert fake.limits_mw() == [400_000, 400_000]


def test_the_driver_refusing_behind_the_daemon_is_a_403_and_measure_mode(sock: Path) -> None:
    with FakeZeusd(sock, FakeNVML(1, A100, can_set_limits=False)) as daemon:
        gpus = gpus_of(daemon, (0,))
        with pytest.raises(PowerLimitPermissionError, match="answered 403"):
            gpus.set_power_limits_w([150])
        assert daemon.nvml.limits_mw() == [400_000]


# --- the daemon goes away ---------------------------------------------------------------------
def test_a_daemon_gone_mid_run_leaves_the_training_finished_and_the_lease_for_later(
    sock: Path, store: SQLStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = FakeZeusd(sock, FakeNVML(1, A100, clock=clock)).start()

    def vanish(epoch: int, step: int) -> None:
        if epoch == 1 and step == 10:
            daemon.stop()

    leases = GPULeases(store)
    with (
        caplog.at_level(logging.WARNING),
        PowerLimitGuard(gpus_of(daemon, (0,)), leases, LOG) as guard,
    ):
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            steps_train(clock, vanish), RecurrenceKey("r1")
        )
    assert result.reached_target and result.return_value == "trained"
    assert result.energy_j > 0
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "zeusd stopped answering" in messages and "the lease is kept" in messages
    (lease,) = leases.on_host()
    capped_mw = daemon.nvml.limits_mw()[0]
    assert capped_mw < 400_000  # the daemon went away while the profiler had the GPU capped
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    store.release_leases([lease.id])  # the task's process has ended since, as in Airflow
    store.acquire_leases(
        [
            LeaseRequest(
                lease.host, lease.gpu_uuid, lease.gpu_index, lease.original_limit_w, ended.pid
            )
        ]
    )

    with (
        FakeZeusd(sock, daemon.nvml) as again,
        PowerLimitGuard(gpus_of(again, (0,)), leases, LOG),
    ):  # back: the next task heals
        assert again.nvml.limits_mw() == [lease.original_limit_w * 1000]
    assert leases.on_host() == []


def test_the_cli_restores_a_dead_tasks_zeusd_lease_through_the_daemon(
    sock: Path, store: SQLStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from zeus_airflow.cli import main

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with FakeZeusd(sock, FakeNVML(2, A100)) as daemon:
        monkeypatch.setenv("ZEUSD_SOCK_PATH", str(sock))
        gpus = gpus_of(daemon, (1,))
        leases = GPULeases(store)
        # what a task killed on GPU 1 leaves behind
        store.acquire_leases([LeaseRequest(leases.host, gpus.uuids[0], 1, 400, dead.pid)])
        gpus.set_power_limits_w([150])

        assert main(["gpu", "restore", "--db", str(store.engine.url)]) == 0
        assert daemon.nvml.limits_mw() == [400_000, 400_000]
        assert "restored to 400 W" in capsys.readouterr().out
        assert leases.on_host() == []


def test_on_kubernetes_a_task_restores_only_its_own_gpus_leases(
    sock: Path, store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods keyed by node (ZEUS_AIRFLOW_NODE_NAME) cannot see each other's processes: a lease
    on another GPU may be a live pod's, so only the task's own GPU is healed."""
    monkeypatch.setenv("ZEUS_AIRFLOW_NODE_NAME", "gpu-node-7")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with FakeZeusd(sock, FakeNVML(2, A100)) as daemon:
        monkeypatch.setenv("ZEUSD_SOCK_PATH", str(sock))  # GPU 0 could be restored: it is not
        leases = GPULeases(store)
        assert leases.host == "gpu-node-7"
        both = gpus_of(daemon)
        store.acquire_leases(
            [
                LeaseRequest("gpu-node-7", uuid, index, 400, dead.pid)
                for index, uuid in zip(both.indices, both.uuids, strict=True)
            ]
        )
        both.set_power_limits_w([150, 150])

        with PowerLimitGuard(gpus_of(daemon, (1,)), leases, LOG):
            assert daemon.nvml.limits_mw() == [150_000, 400_000]
        assert [lease.gpu_index for lease in leases.on_host()] == [0]


def test_amd_gpus_given_to_the_container_are_found_by_their_render_nodes(tmp_path: Path) -> None:
    from zeus_airflow.core.devices.zeusd_discovery import amd_pci as _amd_pci

    dev, drm = tmp_path / "dev" / "dri", tmp_path / "sys" / "class" / "drm"
    dev.mkdir(parents=True)
    for node, address in (("renderD128", "0000:C1:00.0"), ("renderD130", "0000:03:00.0")):
        (dev / node).touch()
        device = tmp_path / "sys" / "devices" / "pci0000:00" / address
        device.mkdir(parents=True)
        (drm / node).mkdir(parents=True)
        (drm / node / "device").symlink_to(device)
    (dev / "card0").touch()  # not a render node
    assert _amd_pci(str(dev), str(drm)) == {"0000:c1:00.0", "0000:03:00.0"}
    assert _amd_pci(str(tmp_path / "none"), str(drm)) is None

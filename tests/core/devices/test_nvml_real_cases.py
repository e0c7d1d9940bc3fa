"""NVML as real nodes show it, on the fake NVML with NVML's own call sequences and error codes:
MIG, no energy counter, refused setters, ranges that narrow, UUIDs in CUDA_VISIBLE_DEVICES,
a limit another task holds, and an energy counter that goes backwards. Each goes through the
real engine, profiler and monitor, and training always finishes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pynvml
import pytest

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.devices.base import DeviceError, PowerLimitUnavailableError
from zeus_airflow.core.devices.nvml import NVMLGPUs, visible_gpus
from zeus_airflow.core.store.base import LeaseRequest, RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.monitor import EnergyMonitor
from zeus_airflow.core.train.profiler import PowerLimitProfiler, PowerProfile
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import A100_SXM4, FakeGPUSpec, FakeNVML, ManualClock

SET = "nvmlDeviceSetPowerManagementLimit"
STEP_S = 0.1


pytestmark = pytest.mark.usefixtures("no_cuda_visible_devices")


def a100(**changes: Any) -> FakeGPUSpec:
    return replace(A100_SXM4, **{"default_limit_mw": 400_000, **changes})


def job(
    mode: str = "optimize", max_tries: int | None = None, batch_sizes: tuple[int, ...] = (32,)
) -> JobConfig:
    return JobConfig(
        "job",
        batch_sizes,
        batch_sizes[-1],
        target_metric=1.0,
        max_epochs=2,
        max_tries=max_tries,
        exploration_budget=None,  # tries the next size
        profiler=ProfilerConfig(
            warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0, mode=mode
        ),
    )  # type: ignore[arg-type]


def steps_train(clock: ManualClock, steps: int = 30, metric: float = 1.0):  # type: ignore[no-untyped-def]
    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(steps)):
                clock.advance(STEP_S)
            run.report_metric(metric)

    return train


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def run_engine(
    gpus: object, clock: ManualClock, config: JobConfig | None = None, metric: float = 1.0
) -> RecurrenceResult:
    engine = Engine(
        SQLStore.in_memory(),
        gpus,
        config or job(),
        seed=1,  # type: ignore[arg-type]
        heartbeat_s=None,
    )
    return engine.run_recurrence(steps_train(clock, metric=metric), RecurrenceKey("r1"))


# --- MIG -------------------------------------------------------------------------------------
@pytest.mark.parametrize("legacy", [False, True], ids=["MIG-uuid", "MIG-GPU-uuid/gi/ci"])
def test_a_mig_instance_is_measured_through_its_parent_and_its_limit_never_set(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, legacy: bool
) -> None:
    clock = ManualClock()
    fake = FakeNVML(gpus=[a100(), a100(mig_mode=True, mig_instances=3)], clock=clock)
    instance = fake.mig_uuids(1, legacy=legacy)[1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", instance)
    gpus = visible_gpus(nvml=fake, clock=clock)

    assert (gpus.indices, gpus.mig_instance, gpus.cuda_ordinals) == ((1,), instance, (0,))
    assert gpus.energy_shared and "MIG" in (gpus.limits_fixed_because or "")
    assert fake.calls["nvmlDeviceGetHandleByUUID"] == 1
    assert fake.calls["nvmlDeviceGetDeviceHandleFromMigDeviceHandle"] == 1
    with pytest.raises(PowerLimitUnavailableError, match="cannot be set per instance"):
        gpus.set_power_limits_w([300])

    start_mj = fake.true_energy_mj(1)
    with caplog.at_level(logging.WARNING):
        result = run_engine(gpus, clock)
    assert result.reached_target and result.power_limit_w == 400
    assert fake.calls[SET] == 0 and fake.set_calls == []
    (warning,) = warnings_of(caplog)
    assert "MIG instance" in warning and "measure mode" in warning
    # The parent GPU's whole energy, shared with the other instances.
    assert result.energy_j + result.figures.setup_energy_j == pytest.approx(
        (fake.true_energy_mj(1) - start_mj) / 1000, abs=0.01
    )


def test_a_whole_gpu_in_mig_mode_is_measured_only() -> None:
    fake = FakeNVML(gpus=[a100(mig_mode=True, mig_instances=2)])
    gpus = NVMLGPUs([0], nvml=fake)
    assert gpus.energy_shared and gpus.mig_instance is None
    assert "in MIG mode" in (gpus.limits_fixed_because or "")
    assert fake.calls["nvmlDeviceGetMigMode"] == 1


def test_gpus_without_mig_say_not_supported_and_are_whole() -> None:
    """A V100 answers NOT_SUPPORTED to nvmlDeviceGetMigMode; that is "no MIG", not an error."""
    fake = FakeNVML(
        spec=a100(
            model="Tesla V100-SXM2-16GB", mig_mode=None, architecture=pynvml.NVML_DEVICE_ARCH_VOLTA
        )
    )
    gpus = NVMLGPUs(nvml=fake)
    assert not gpus.energy_shared and gpus.limits_fixed_because is None


def test_a_mig_uuid_nvml_does_not_know_hides_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f0bd6c8-0a9a-5a6e-9d49-0a5e4d2d7f3b")
    with pytest.raises(DeviceError, match="hides every GPU"):
        visible_gpus(nvml=FakeNVML(gpus=[a100(mig_mode=True, mig_instances=1)]))


# --- UUIDs and CUDA's numbering ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "indices", "ordinals"),
    [
        (None, (0, 1, 2), (0, 1, 2)),
        ("2,0", (2, 0), (0, 1)),
        ("GPU-00000002-fa6e-4000-8000-000000000002,GPU-00000000", (2, 0), (0, 1)),
    ],
)
def test_the_group_knows_its_cuda_device_numbers(
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    indices: tuple[int, ...],
    ordinals: tuple[int, ...],
) -> None:
    if env is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    gpus = visible_gpus(nvml=FakeNVML(3))
    assert (gpus.indices, gpus.cuda_ordinals) == (indices, ordinals)


def test_explicit_indices_map_to_cuda_numbers_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-00000002,GPU-00000001")
    assert NVMLGPUs([1], nvml=FakeNVML(3)).cuda_ordinals == (1,)
    assert NVMLGPUs([0], nvml=FakeNVML(3)).cuda_ordinals == ()  # invisible to CUDA here


# --- no energy counter -----------------------------------------------------------------------
def test_a_pascal_gpu_without_energy_counter_is_measured_by_sampled_power() -> None:
    clock = ManualClock()
    pascal = a100(
        model="Tesla P100-PCIE-16GB",
        max_limit_mw=250_000,
        default_limit_mw=250_000,
        energy_counter=False,
        mig_mode=None,
        architecture=pynvml.NVML_DEVICE_ARCH_PASCAL,
    )
    fake = FakeNVML(spec=pascal, clock=clock)
    gpus = NVMLGPUs(nvml=fake, clock=clock, sample_interval_s=3600)  # samples at the edges
    try:
        assert gpus.energy_source == "sampling"
        start_mj = fake.true_energy_mj(0)
        result = run_engine(gpus, clock, job("measure"))
        assert result.energy_j + result.figures.setup_energy_j == pytest.approx(
            (fake.true_energy_mj(0) - start_mj) / 1000, rel=1e-6
        )
        assert fake.calls["nvmlDeviceGetPowerUsage"] >= 2
    finally:
        gpus.close()


# --- setters that refuse -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "can_set", "hint"),
    [
        (a100(set_limit_error=pynvml.NVML_ERROR_NOT_SUPPORTED), True, "does not support"),
        (a100(), False, "CAP_SYS_ADMIN"),
    ],
    ids=["NOT_SUPPORTED", "NO_PERMISSION"],
)
def test_a_refused_setter_falls_back_to_measuring_once_for_the_whole_task(
    caplog: pytest.LogCaptureFixture, spec: FakeGPUSpec, can_set: bool, hint: str
) -> None:
    """Several tries (the target is never reached): one refused set call, one warning."""
    clock = ManualClock()
    fake = FakeNVML(spec=spec, clock=clock, can_set_limits=can_set)
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    with caplog.at_level(logging.WARNING):
        result = run_engine(gpus, clock, job(max_tries=3, batch_sizes=(16, 32, 64)), metric=0.5)
    assert len(result.tries) >= 2
    assert [c.allowed for c in fake.set_calls] == [False]
    assert fake.limits_mw() == [400_000]
    refusals = [w for w in warnings_of(caplog) if "cannot set GPU power limits" in w]
    assert len(refusals) == 1 and hint in refusals[0]
    assert all(t.outcome.power_limit_w == 400 for t in result.tries)


def test_when_one_gpu_of_a_group_refuses_the_others_go_back() -> None:
    fake = FakeNVML(
        gpus=[
            a100(default_limit_mw=350_000),
            a100(default_limit_mw=350_000, set_limit_error=pynvml.NVML_ERROR_NOT_SUPPORTED),
        ]
    )
    gpus = NVMLGPUs(nvml=fake)
    with pytest.raises(PowerLimitUnavailableError, match="GPU 1"):
        gpus.set_power_limits_w([300, 300])
    assert fake.allowed_sets() == [(0, 300_000), (0, 350_000)]
    assert fake.limits_mw() == [350_000, 350_000]


# --- ranges -------------------------------------------------------------------------------------
def profile_on(gpus: NVMLGPUs, clock: ManualClock, profile: PowerProfile) -> PowerProfile:
    """One try driven by the real profiler over ``profile`` (as the engine wires it)."""
    config = job()
    monitor = EnergyMonitor(gpus)
    profiler = PowerLimitProfiler(gpus, monitor, config.profiler, config.eta, profile)
    run = TrainingRun(config, 32, gpus, monitor, profiler, early_stop_cost=None)
    try:
        run.begin()
        steps_train(clock)(run)
        run.finish()
    finally:
        profiler.restore()
    return profile


def test_limits_from_another_boards_range_are_clamped_to_this_gpus(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A profile (or a baseline's fixed limit) made for the same model with a wider range:
    limits outside 150..300 W are never sent to NVML."""
    clock = ManualClock()
    fake = FakeNVML(
        spec=a100(min_limit_mw=150_000, max_limit_mw=300_000, default_limit_mw=300_000), clock=clock
    )
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    with caplog.at_level(logging.WARNING):
        profile = profile_on(gpus, clock, PowerProfile(32, gpus.model, 1, (400, 300, 200, 100)))
    assert sorted(profile.measurements) == [200, 300]
    assert [mw for _, mw in fake.allowed_sets()] == [300_000, 200_000, 200_000, 300_000]
    assert sum("lie outside this GPU's range [150, 300] W" in w for w in warnings_of(caplog)) == 1

    fake.set_calls.clear()
    known = PowerProfile(
        32,
        gpus.model,
        1,
        (400, 300),
        {400: LimitMeasurement(400, 200.0, 20.0), 300: LimitMeasurement(300, 270.0, 10.0)},
    )
    with caplog.at_level(logging.WARNING):
        profile_on(gpus, clock, known)  # its optimum, 400 W, is over this GPU's maximum
    assert fake.allowed_sets() == [(0, 300_000)]  # clamped to this GPU's maximum
    assert any("power limit 400 W is outside this GPU's range" in w for w in warnings_of(caplog))


def test_a_range_that_narrows_mid_run_is_read_again_and_clamped_to() -> None:
    clock = ManualClock()
    fake = FakeNVML(spec=a100(), clock=clock)
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    fake.set_constraints_mw(0, 250_000, 400_000)  # after the group read 100..400 W
    result = run_engine(gpus, clock)
    assert result.reached_target
    refused = [c.limit_mw for c in fake.set_calls if not c.allowed]
    assert refused and all(mw < 250_000 for mw in refused)
    assert all(mw >= 250_000 for _, mw in fake.allowed_sets())
    assert gpus.power_limit_range_w() == (250, 400)
    assert fake.limits_mw() == [400_000]


# --- a limit another task holds -----------------------------------------------------------------
def test_a_gpu_leased_by_a_live_task_is_measured_and_said_once(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    fake = FakeNVML(spec=a100(default_limit_mw=300_000), clock=clock)
    store = SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)
    leases = GPULeases(store)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.acquire_leases([LeaseRequest(leases.host, fake.gpu_uuids()[0], 0, 250, other.pid)])
        device = NVMLGPUs(nvml=fake, clock=clock)
        with (
            caplog.at_level(logging.WARNING),
            PowerLimitGuard(device, leases, logging.getLogger("zeus_airflow")) as guard,
        ):
            engine = Engine(
                store, guard.gpus, job(max_tries=2, batch_sizes=(16, 32)), seed=1, heartbeat_s=None
            )
            result = engine.run_recurrence(steps_train(clock, metric=0.5), RecurrenceKey("r"))
    finally:
        other.kill()
        other.wait()
    assert len(result.tries) == 2
    assert fake.calls[SET] == 0  # never set, and never "restored" to the holder's 250 W
    assert fake.limits_mw() == [300_000]
    (warning,) = [w for w in warnings_of(caplog) if "leased to another task" in w]
    assert f"pid {other.pid}" in warning
    assert [lease.pid for lease in leases.on_host()] == [other.pid]
    assert os.getpid() != other.pid


# --- the energy counter ---------------------------------------------------------------------------
def test_an_energy_counter_going_backwards_is_bridged_with_power_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    fake = FakeNVML(spec=a100(), clock=clock)  # 400 W limit: draws 360 W
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    start_j = gpus.energy_j()
    clock.advance(10.0)
    with caplog.at_level(logging.WARNING):
        assert gpus.energy_j() - start_j == pytest.approx(3600.0, abs=0.01)
        clock.advance(5.0)
        fake.reload_driver_counters(0)  # the counter starts again from 0
        clock.advance(5.0)
        assert gpus.energy_j() - start_j == pytest.approx(3600.0 + 3600.0, abs=0.01)
        clock.advance(2.0)
        assert gpus.energy_j() - start_j == pytest.approx(3600.0 + 3600.0 + 720.0, abs=0.01)
        fake.reload_driver_counters(0)
        clock.advance(1.0)
        gpus.energy_j()
    assert len([w for w in warnings_of(caplog) if "went backwards" in w]) == 1

"""NVMLGPUs over the fake NVML: units, ranges, visibility, energy, permissions, 4 GPUs."""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import replace
from typing import Any

import pynvml
import pytest

from zeus_airflow.core.devices.base import (
    DeviceError,
    GPUGroup,
    PowerLimitPermissionError,
    max_power_w,
    set_uniform_power_limit,
)
from zeus_airflow.core.devices.nvml import NVMLGPUs, visible_gpus
from zeus_airflow.testing import A100_PCIE, FakeGPUSpec, FakeNVML, ManualClock

pytestmark = pytest.mark.usefixtures("no_cuda_visible_devices")


def a100_pcie(**changes: Any) -> FakeGPUSpec:
    """150..250 W, running at 200 W: a limit that is neither end of the range."""
    return replace(A100_PCIE, **{"default_limit_mw": 200_000, **changes})


def test_fake_speaks_pynvml_errors_and_constants() -> None:
    fake = FakeNVML()
    assert fake.NVML_ERROR_NO_PERMISSION == pynvml.NVML_ERROR_NO_PERMISSION == 4
    assert fake.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED == 3
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    with pytest.raises(fake.NVMLError) as caught:
        fake.nvmlDeviceGetHandleByIndex(1)
    assert caught.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_watts_at_the_api_milliwatts_at_nvml() -> None:
    fake = FakeNVML(spec=a100_pcie())
    gpus = NVMLGPUs(nvml=fake)
    assert isinstance(gpus, GPUGroup)
    assert (gpus.model, gpus.count, gpus.indices, gpus.measurement) == (
        "NVIDIA A100-PCIE-40GB",
        1,
        (0,),
        "measured",
    )
    assert gpus.uuids == tuple(fake.gpu_uuids())
    assert gpus.power_limit_range_w() == (150, 250)
    assert gpus.get_power_limits_w() == (200,)
    gpus.set_power_limits_w([175])
    assert fake.allowed_sets() == [(0, 175_000)]
    assert gpus.get_power_limits_w() == (175,)


@pytest.mark.parametrize(
    ("min_mw", "max_mw", "expected_w"),
    [
        (150_000, 250_000, (250, 225, 200, 175, 150)),
        (200_000, 700_000, tuple(range(700, 199, -25))),
        (100_500, 187_500, (187, 162, 137, 112, 101)),  # odd mW: rounded inwards
    ],
)
def test_candidate_limits_lie_inside_the_device_range(
    min_mw: int, max_mw: int, expected_w: tuple[int, ...]
) -> None:
    gpus = NVMLGPUs(nvml=FakeNVML(spec=FakeGPUSpec(min_limit_mw=min_mw, max_limit_mw=max_mw)))
    low, high = gpus.power_limit_range_w()
    assert gpus.candidate_power_limits_w() == expected_w
    assert all(min_mw <= w * 1000 <= max_mw for w in (low, high, *expected_w))


def test_an_odd_original_limit_is_restored_to_the_exact_milliwatt() -> None:
    fake = FakeNVML(spec=FakeGPUSpec(min_limit_mw=100_000, max_limit_mw=187_500))
    gpus = NVMLGPUs(nvml=fake)
    original = gpus.get_power_limits_w()
    assert original == (188,) and gpus.power_limit_range_w() == (100, 187)
    gpus.set_power_limits_w([150])
    gpus.get_power_limits_w()
    gpus.set_power_limits_w(original)
    assert fake.limits_mw() == [187_500]


@pytest.mark.parametrize("limits_w", [[260], [149], [200, 200]])
def test_bad_limits_are_refused_before_any_setting_changes(limits_w: list[int]) -> None:
    fake = FakeNVML(spec=a100_pcie())
    gpus = NVMLGPUs(nvml=fake)
    with pytest.raises(DeviceError, match=r"\[150, 250\] W|expected 1 limits"):
        gpus.set_power_limits_w(limits_w)
    assert fake.set_calls == []


def test_permission_denied_raises_the_permission_error() -> None:
    fake = FakeNVML(spec=a100_pcie(), can_set_limits=False)
    gpus = NVMLGPUs(nvml=fake)
    with pytest.raises(PowerLimitPermissionError, match="CAP_SYS_ADMIN"):
        gpus.set_power_limits_w([175])
    assert [c.allowed for c in fake.set_calls] == [False]
    assert fake.limits_mw() == [200_000]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("2,0", (2, 0)),
        (" 3 ", (3,)),
        ("GPU-00000001-fa6e-4000-8000-000000000001", (1,)),
        ("GPU-00000003,GPU-00000002", (3, 2)),  # unique UUID prefixes, as CUDA accepts
        ("1,-1,2", (1,)),  # CUDA: an invalid entry hides itself and all after it
        ("1,7,2", (1,)),
        ("0,0", (0,)),
    ],
)
def test_cuda_visible_devices_selects_and_orders_gpus(
    monkeypatch: pytest.MonkeyPatch, env: str, expected: tuple[int, ...]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    fake = FakeNVML(4)
    gpus = visible_gpus(nvml=fake)
    assert gpus.indices == expected
    assert gpus.uuids == tuple(fake.gpu_uuids()[i] for i in expected)
    assert gpus.count == len(expected)


def test_an_ignored_visibility_entry_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,GPU-0000,2")  # prefix of all four
    with caplog.at_level(logging.WARNING):
        assert visible_gpus(nvml=FakeNVML(4)).indices == (1,)
    assert "'GPU-0000' names no GPU" in caplog.text


@pytest.mark.parametrize("env", ["", "-1", "9"])
def test_no_visible_gpu_is_a_device_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    fake = FakeNVML(2)
    with pytest.raises(DeviceError, match=f"CUDA_VISIBLE_DEVICES='{env}' hides every GPU"):
        visible_gpus(nvml=fake)
    assert fake.init_count == 0  # NVML released on the way out


def test_explicit_indices_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert NVMLGPUs([3, 1], nvml=FakeNVML(4)).indices == (3, 1)
    with pytest.raises(DeviceError, match=r"indices=\[4\] is invalid.*\[0, 3\]"):
        NVMLGPUs([4], nvml=FakeNVML(4))


def test_no_gpu_at_all_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match=r"no GPU is visible.*NVML sees no GPU"):
        NVMLGPUs(nvml=FakeNVML(gpus=[]))


def test_nvml_that_cannot_start_is_a_device_error_naming_the_driver() -> None:
    fake = FakeNVML(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(DeviceError, match=r"cannot initialise NVML.*driver"):
        NVMLGPUs(nvml=fake)


def test_the_real_nvml_module_works_here_or_fails_clearly() -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        with pytest.raises(DeviceError, match="cannot initialise NVML"):
            NVMLGPUs()
        return
    gpus = NVMLGPUs()  # a machine with a GPU: read-only checks, no setting changes
    try:
        assert gpus.count >= 1 and gpus.energy_j() >= 0.0
    finally:
        gpus.close()


def test_mixed_models_are_refused_naming_them() -> None:
    fake = FakeNVML(gpus=[FakeGPUSpec(model="NVIDIA A40"), FakeGPUSpec(model="NVIDIA A100")])
    with pytest.raises(DeviceError, match="GPU 0: NVIDIA A40, GPU 1: NVIDIA A100"):
        NVMLGPUs(nvml=fake)
    assert NVMLGPUs([1], nvml=fake).model == "NVIDIA A100"


def test_names_and_uuids_given_as_bytes_are_decoded() -> None:
    fake = FakeNVML(bytes_strings=True)
    gpus = NVMLGPUs(nvml=fake)
    assert gpus.model == "NVIDIA A40"
    assert gpus.uuids == tuple(fake.gpu_uuids())


def test_energy_from_the_counters_in_joules() -> None:
    clock = ManualClock()
    fake = FakeNVML(2, clock=clock)  # 300 W limit, draws 90 %: 270 W each
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    assert gpus.energy_source == "counter"
    start_j, start_s = gpus.energy_j(), gpus.now_s()
    clock.advance(10.0)
    set_uniform_power_limit(gpus, 200)
    clock.advance(5.0)
    assert gpus.now_s() - start_s == 15.0
    assert gpus.energy_j() - start_j == pytest.approx(2 * (270 * 10 + 180 * 5), abs=0.01)


def test_energy_from_sampling_when_one_gpu_has_no_counter() -> None:
    clock = ManualClock()
    fake = FakeNVML(gpus=[FakeGPUSpec(), FakeGPUSpec(energy_counter=False)], clock=clock)
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    assert gpus.energy_source == "sampling"
    start_j = gpus.energy_j()
    clock.advance(4.0)
    assert gpus.energy_j() - start_j == pytest.approx(2 * 270 * 4.0)
    gpus.close()


def test_sampled_energy_follows_the_true_integral_across_a_power_step() -> None:
    fake = FakeNVML(spec=FakeGPUSpec(energy_counter=False))
    gpus = NVMLGPUs(nvml=fake, sample_interval_s=0.01)
    true_start_mj, start_j = fake.true_energy_mj(0), gpus.energy_j()
    time.sleep(0.15)
    gpus.set_power_limits_w([150])  # 270 W -> 135 W: only the thread samples in between
    time.sleep(0.45)
    sampled_j = gpus.energy_j() - start_j
    true_j = (fake.true_energy_mj(0) - true_start_mj) / 1000
    gpus.close()
    # Without the thread, one trapezoid over the whole 0.6 s would be 20 % high. Within 10 %:
    # on a loaded machine (CI's three test processes on two cores) the thread's samples come
    # late, and one late sample across the step was 6 % off.
    assert sampled_j == pytest.approx(true_j, rel=0.10)


def test_close_stops_the_sampler_and_releases_nvml_once() -> None:
    fake = FakeNVML(spec=FakeGPUSpec(energy_counter=False))
    gpus = NVMLGPUs(nvml=fake, sample_interval_s=0.01)
    gpus.energy_j()
    gpus.close()
    gpus.close()
    assert fake.init_count == 0
    assert not any(t.name == "zeus-power-sampler" and t.is_alive() for t in threading.enumerate())


def test_sample_interval_must_be_positive() -> None:
    with pytest.raises(DeviceError, match=r"sample_interval_s=0 is invalid"):
        NVMLGPUs(nvml=FakeNVML(), sample_interval_s=0)


def test_four_gpus_one_limit_summed_energy_and_maxpower() -> None:
    clock = ManualClock()
    fake = FakeNVML(4, clock=clock)
    gpus = NVMLGPUs(nvml=fake, clock=clock)
    set_uniform_power_limit(gpus, 250)
    assert fake.allowed_sets() == [(i, 250_000) for i in range(4)]
    assert gpus.get_power_limits_w() == (250,) * 4
    start_j = gpus.energy_j()
    clock.advance(2.0)
    assert gpus.energy_j() - start_j == pytest.approx(4 * 225 * 2.0, abs=0.01)
    assert max_power_w(gpus) == 4 * 300

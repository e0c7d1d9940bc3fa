"""AMD GPUs directly through AMD SMI, against the fake of amdsmi's Python API: µW power caps and
W power converted, energy from the accumulators (either key) or from sampled power, caps set
and restored through the engine, refusals, HIP_VISIBLE_DEVICES, and the dual-die MI250, whose
package is read and capped through its first die only."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest
from test_zeusd_device import job

from zeus_airflow.core.devices.amdsmi import AMDSMIGPUs
from zeus_airflow.core.devices.base import (
    DeviceError,
    PowerLimitPermissionError,
    PowerLimitUnavailableError,
)
from zeus_airflow.core.devices.spec import open_device, parse_device
from zeus_airflow.core.devices.visible import VisibleDevicesError
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import ManualClock
from zeus_airflow.testing.fake_amdsmi import (
    MI250X,
    MI300X,
    AmdSmiParameterException,
    FakeAMDSMI,
)

LOG = logging.getLogger("zeus_airflow")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_units_model_and_energy_from_the_accumulators(clock: ManualClock) -> None:
    fake = FakeAMDSMI(2, MI300X, clock=clock)
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    assert (gpus.model, gpus.count, gpus.indices) == ("AMD Instinct MI300X", 2, (0, 1))
    assert gpus.power_limit_range_w() == (200, 750) and gpus.get_power_limits_w() == (750, 750)
    assert all(u.startswith("amdsmi:") for u in gpus.uuids) and len(set(gpus.uuids)) == 2
    assert gpus.energy_source == "counter" and not gpus.energy_shared
    start_j = gpus.energy_j()
    clock.advance(10.0)
    # 2 x 675 W (90 % of 750 W) x 10 s, to one tick of 15.259 µJ per GPU
    assert gpus.energy_j() - start_j == pytest.approx(13_500.0, abs=0.01)
    gpus.close()
    assert fake.init_count == 0


def test_the_older_accumulator_key_and_sampled_power_give_the_same(clock: ManualClock) -> None:
    for gpus in (
        AMDSMIGPUs(
            amdsmi=FakeAMDSMI(1, MI300X, clock=clock, energy_key="power"),
            clock=clock,
            sleep=clock.advance,
        ),
        AMDSMIGPUs(
            amdsmi=FakeAMDSMI(1, MI300X, clock=clock), clock=clock, energy_source="sampling"
        ),
    ):
        start_j = gpus.energy_j()
        clock.advance(4.0)
        assert gpus.energy_j() - start_j == pytest.approx(2700.0, abs=0.01), gpus.energy_source
        gpus.close()


def test_caps_are_set_in_uw_checked_first_and_the_odd_original_put_back(clock: ManualClock) -> None:
    fake = FakeAMDSMI(2, MI300X, clock=clock)
    fake.packages[1].limit_mw = 612_345  # an odd cap, restored exactly
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    original = gpus.get_power_limits_w()
    assert original == (750, 612)
    with pytest.raises(DeviceError, match=r"power limit 100 W is invalid .* \[200, 750\] W"):
        gpus.set_power_limits_w([100, 100])
    assert fake.set_calls == []  # refused before any GPU changed
    gpus.set_power_limits_w([300, 300])
    assert fake.caps_uw() == [300_000_000, 300_000_000]
    gpus.set_power_limits_w(list(original))
    assert fake.caps_uw() == [750_000_000, 612_345_000]


def test_no_privilege_is_measure_mode_with_the_reason(clock: ManualClock) -> None:
    fake = FakeAMDSMI(1, MI300X, clock=clock, can_set_limits=False)
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    with pytest.raises(PowerLimitPermissionError, match="needs root and a writable /sys"):
        gpus.set_power_limits_w([300])
    assert "unprivileged tasks go through zeusd" in (gpus.limits_fixed_because or "")
    assert fake.caps_uw() == [750_000_000]


def test_the_engine_profiles_amd_caps_and_puts_them_back(
    clock: ManualClock, tmp_path: Path
) -> None:
    store = SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)
    fake = FakeAMDSMI(1, MI300X, clock=clock)

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(40)):
                clock.advance(0.1)
            run.report_metric(1.0)

    leases = GPULeases(store)
    with PowerLimitGuard(
        AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance), leases, LOG
    ) as guard:
        result = Engine(store, guard.gpus, job(), seed=1, heartbeat_s=None).run_recurrence(
            train, RecurrenceKey("r1")
        )
        (lease,) = leases.on_host()
        assert lease.gpu_uuid.startswith("amdsmi:")
    assert result.reached_target and result.final.outcome.power_control == "amdsmi"
    caps = [uw for _, uw, _ in fake.set_calls]
    assert len(set(caps)) >= 3 and caps[-1] == 750_000_000  # walked 200..750 W, then back
    assert fake.caps_uw() == [750_000_000] and leases.on_host() == []


# --- MI250 / MI250X: two dies, one package ---------------------------------------------------
def test_a_group_with_both_dies_counts_the_package_once_and_caps_it_once(
    clock: ManualClock,
) -> None:
    fake = FakeAMDSMI(2, MI250X, dual_die=True, clock=clock)  # 4 GPUs: two packages
    gpus = AMDSMIGPUs((0, 1), amdsmi=fake, clock=clock, sleep=clock.advance)
    assert gpus.count == 2 and not gpus.energy_shared and gpus.limits_fixed_because is None
    start_j = gpus.energy_j()
    clock.advance(10.0)
    # package 0 draws 90 % of 560 W; its second die reads 0 W: 5040 J, not 0 and not twice
    assert gpus.energy_j() - start_j == pytest.approx(5040.0, abs=0.01)
    gpus.set_power_limits_w([400, 400])
    assert [(position, uw) for position, uw, _ in fake.set_calls] == [(0, 400_000_000)]
    assert gpus.get_power_limits_w() == (400, 400)  # the second die shows its package's cap
    assert fake.caps_uw() == [400_000_000, 560_000_000]  # the other package untouched


@pytest.mark.parametrize("die", [0, 1])
def test_one_die_alone_measures_its_package_and_never_caps_it(clock: ManualClock, die: int) -> None:
    fake = FakeAMDSMI(1, MI250X, dual_die=True, clock=clock)
    gpus = AMDSMIGPUs((die,), amdsmi=fake, clock=clock, sleep=clock.advance)
    assert gpus.energy_shared
    assert f"GPU {die} is one die of a dual-die AMD Instinct MI250X" in (
        gpus.limits_fixed_because or ""
    )
    start_j = gpus.energy_j()
    clock.advance(10.0)
    assert gpus.energy_j() - start_j == pytest.approx(5040.0, abs=0.01)  # the package's
    with pytest.raises(PowerLimitUnavailableError, match="would cap the other die's work"):
        gpus.set_power_limits_w([400])
    assert fake.set_calls == []


def test_four_dies_are_two_packages(clock: ManualClock) -> None:
    fake = FakeAMDSMI(2, MI250X, dual_die=True, clock=clock)
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    assert gpus.count == 4 and not gpus.energy_shared
    start_j = gpus.energy_j()
    clock.advance(1.0)
    assert gpus.energy_j() - start_j == pytest.approx(2 * 504.0, abs=0.01)
    gpus.set_power_limits_w([300] * 4)
    assert sorted(p for p, _, _ in fake.set_calls) == [0, 2]


# --- which GPUs --------------------------------------------------------------------------------
def test_hip_visible_devices_chooses_and_is_checked(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeAMDSMI(3, MI300X, clock=clock)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")
    assert AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance).indices == (2,)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "GPU-x")
    with pytest.raises(
        DeviceError, match=r"HIP_VISIBLE_DEVICES='GPU-x' is invalid: entry 'GPU-x' names no GPU"
    ):
        AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    with pytest.raises(DeviceError, match=r"indices=\[5\] is invalid: .* \[0, 2\]"):
        AMDSMIGPUs((5,), amdsmi=fake, clock=clock, sleep=clock.advance)
    assert fake.init_count == 1  # the refused opens shut AMD SMI down again (one still open)


def test_without_the_driver_or_the_package_the_error_says_what_is_missing() -> None:
    with pytest.raises(DeviceError, match=r"cannot initialise AMD SMI .* /dev/kfd"):
        AMDSMIGPUs(amdsmi=FakeAMDSMI(1, init_error=34))
    with pytest.raises(DeviceError, match=r"cannot load AMD SMI .* install ROCm's amdsmi"):
        open_device(parse_device("amdsmi:0"))  # no amdsmi package on this machine


# --- issue 48: the visibility variables name themselves; issue 49: HIP's numbering ----------
def test_a_uuid_entry_that_names_no_gpu_is_named_not_an_int_error(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """device="amdsmi:0" with HIP_VISIBLE_DEVICES="GPU-1234" used to fail with "ValueError:
    invalid literal for int() with base 10"."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "GPU-1234")
    with pytest.raises(
        VisibleDevicesError,
        match=r"HIP_VISIBLE_DEVICES='GPU-1234' is invalid: entry 'GPU-1234' names no GPU; "
        r"expected distinct indices in \[0, 1\] or GPU UUIDs \(GPU-00000000000000a0, "
        r"GPU-00000000000000a1\), or leave it unset",
    ):
        AMDSMIGPUs((0,), amdsmi=FakeAMDSMI(2, clock=clock), clock=clock, sleep=clock.advance)


@pytest.mark.parametrize("value", ["GPU-1234", "0,0", "", "x", "+1", "1_0", "7"])
def test_auto_on_an_amd_node_names_the_bad_variable_not_nvml(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No NVIDIA driver here (NVML cannot initialise) and AMD SMI loads: a bad
    HIP_VISIBLE_DEVICES used to be reported as "cannot initialise NVML ..."."""
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAMDSMI(2))  # type: ignore[arg-type]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", value)
    with pytest.raises(
        VisibleDevicesError, match=re.escape(f"HIP_VISIBLE_DEVICES={value!r} is invalid: entry")
    ):
        open_device(parse_device("auto"))


def test_uuid_entries_and_cuda_visible_devices_are_read_as_hip_reads_them(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeAMDSMI(3, clock=clock)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "gpu-00000000000000a2,1")  # a prefix, any case
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    assert gpus.indices == (2, 1)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")  # HIP's variable first, as upstream's
    assert AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance).indices == (0,)


def test_hip_indices_map_through_hip_id_with_pci_order_as_the_fallback(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Follows upstream Zeus's zeus/device/gpu/amd.py since #229 (HIP index = AMD SMI's
    ``amdsmi_get_gpu_enumeration_info()["hip_id"]``): on an MI350X node the orders differ,
    and HIP index 0 is PCI GPU 2 here. An AMD SMI before 25.3 has no such call: PCI order."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    fake = FakeAMDSMI(3, clock=clock, hip_ids=[1, 2, 0])
    assert AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance).indices == (2,)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    assert AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance).indices == (2, 0, 1)
    old = FakeAMDSMI(3, clock=clock, hip_ids=[1, 2, 0], enumeration=False)
    assert AMDSMIGPUs(amdsmi=old, clock=clock, sleep=clock.advance).indices == (0, 1, 2)


@pytest.mark.parametrize("rate", [0.02, 50.0])
def test_an_accumulator_at_the_wrong_rate_is_caught_at_start(
    clock: ManualClock, rate: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Follows upstream Zeus's AMDGPUs._init_gpus (zeus/device/gpu/amd.py): each accumulator
    is read over 0.5 s against power x time and trusted only within 0.1x..10x
    (ROCm/amdsmi#38); outside, power is sampled and the energy stays right."""
    fake = FakeAMDSMI(1, MI300X, clock=clock, accumulator_rate=rate)
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock, sleep=clock.advance)
    assert gpus.energy_source == "sampling"
    assert "runs at the wrong rate (ROCm/amdsmi#38)" in caplog.text
    start_j = gpus.energy_j()
    clock.advance(4.0)
    assert gpus.energy_j() - start_j == pytest.approx(2700.0, abs=0.01)
    gpus.close()
    good = AMDSMIGPUs(amdsmi=FakeAMDSMI(1, clock=clock), clock=clock, sleep=clock.advance)
    assert good.energy_source == "counter"


def test_the_fake_refuses_a_bad_handle_as_amd_smi_does() -> None:
    fake = FakeAMDSMI(1)
    fake.amdsmi_init()
    with pytest.raises(AmdSmiParameterException, match="Invalid parameter"):
        fake.amdsmi_get_power_info("not a handle")

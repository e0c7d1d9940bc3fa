"""AMD GPUs directly through AMD SMI, against the fake of amdsmi's Python API: µW power caps and
W power converted, energy from the accumulators (either key) or from sampled power, caps set
and restored through the engine, refusals, HIP_VISIBLE_DEVICES, and the dual-die MI250, whose
package is read and capped through its first die only."""

from __future__ import annotations

import logging
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
from zeus_airflow.core.store.base import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.gpu_lease import GPULeases, PowerLimitGuard
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import ManualClock
from zeus_airflow.testing.fake_amdsmi import MI250X, MI300X, FakeAMDSMI

LOG = logging.getLogger("zeus_airflow")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_units_model_and_energy_from_the_accumulators(clock: ManualClock) -> None:
    fake = FakeAMDSMI(2, MI300X, clock=clock)
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock)
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
        AMDSMIGPUs(amdsmi=FakeAMDSMI(1, MI300X, clock=clock, energy_key="power"), clock=clock),
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
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock)
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
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock)
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
    with PowerLimitGuard(AMDSMIGPUs(amdsmi=fake, clock=clock), leases, LOG) as guard:
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
    gpus = AMDSMIGPUs((0, 1), amdsmi=fake, clock=clock)
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
    gpus = AMDSMIGPUs((die,), amdsmi=fake, clock=clock)
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
    gpus = AMDSMIGPUs(amdsmi=fake, clock=clock)
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
    assert AMDSMIGPUs(amdsmi=fake, clock=clock).indices == (2,)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "GPU-x")
    with pytest.raises(DeviceError, match=r"HIP_VISIBLE_DEVICES='GPU-x' is invalid for AMD GPUs"):
        AMDSMIGPUs(amdsmi=fake, clock=clock)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    with pytest.raises(DeviceError, match=r"indices=\[5\] is invalid: .* \[0, 2\]"):
        AMDSMIGPUs((5,), amdsmi=fake, clock=clock)
    assert fake.init_count == 1  # the refused opens shut AMD SMI down again (one still open)


def test_without_the_driver_or_the_package_the_error_says_what_is_missing() -> None:
    with pytest.raises(DeviceError, match=r"cannot initialise AMD SMI .* /dev/kfd"):
        AMDSMIGPUs(amdsmi=FakeAMDSMI(1, init_error=34))
    with pytest.raises(DeviceError, match=r"cannot load AMD SMI .* install ROCm's amdsmi"):
        open_device(parse_device("amdsmi:0"))  # no amdsmi package on this machine

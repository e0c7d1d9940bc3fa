"""EnergyMonitor windows over NVMLGPUs on a fake NVML with a manual clock."""

from __future__ import annotations

import pytest

from zeus_airflow.core.devices.base import set_uniform_power_limit
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.train.monitor import EnergyMonitor, TimeEnergy
from zeus_airflow.testing import FakeNVML, ManualClock

DRAW_W = 270.0
"""Each fake GPU at its default 300 W limit draws 90 % of it."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def monitor(clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> EnergyMonitor:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return EnergyMonitor(NVMLGPUs(nvml=FakeNVML(2, clock=clock), clock=clock))


def assert_measured(measured: TimeEnergy, time_s: float, power_w: float) -> None:
    assert measured.time_s == pytest.approx(time_s)
    assert measured.energy_j == pytest.approx(time_s * power_w, abs=0.01)


def test_nested_windows(monitor: EnergyMonitor, clock: ManualClock) -> None:
    monitor.begin_window("run")
    clock.advance(1.0)
    monitor.begin_window("epoch")
    clock.advance(2.0)
    assert_measured(monitor.end_window("epoch"), 2.0, 2 * DRAW_W)
    clock.advance(1.0)
    assert_measured(monitor.end_window("run"), 4.0, 2 * DRAW_W)


def test_overlapping_windows(monitor: EnergyMonitor, clock: ManualClock) -> None:
    monitor.begin_window("a")
    clock.advance(1.0)
    monitor.begin_window("b")
    clock.advance(1.0)
    assert_measured(monitor.end_window("a"), 2.0, 2 * DRAW_W)
    clock.advance(3.0)
    assert_measured(monitor.end_window("b"), 4.0, 2 * DRAW_W)


def test_a_window_spanning_a_limit_change_sums_both_parts(
    monitor: EnergyMonitor, clock: ManualClock
) -> None:
    monitor.begin_window("w")
    clock.advance(1.0)
    set_uniform_power_limit(monitor.device, 200)
    clock.advance(1.0)
    measured = monitor.end_window("w")
    assert measured.energy_j == pytest.approx(2 * (270.0 + 180.0), abs=0.01)
    assert measured.avg_power_w == pytest.approx(2 * 225.0, rel=1e-4)


def test_peek_leaves_the_window_open(monitor: EnergyMonitor, clock: ManualClock) -> None:
    monitor.begin_window("w")
    clock.advance(1.0)
    assert_measured(monitor.peek_window("w"), 1.0, 2 * DRAW_W)
    assert monitor.is_open("w")
    clock.advance(1.0)
    assert_measured(monitor.end_window("w"), 2.0, 2 * DRAW_W)
    assert not monitor.is_open("w")


def test_a_name_can_be_reused_after_its_window_ends(
    monitor: EnergyMonitor, clock: ManualClock
) -> None:
    monitor.begin_window("epoch")
    clock.advance(5.0)
    monitor.end_window("epoch")
    monitor.begin_window("epoch")
    clock.advance(1.0)
    assert_measured(monitor.end_window("epoch"), 1.0, 2 * DRAW_W)


def test_beginning_an_open_window_again_is_an_error(
    monitor: EnergyMonitor, clock: ManualClock
) -> None:
    monitor.begin_window("w")
    clock.advance(1.0)
    with pytest.raises(ValueError, match="'w' is already open"):
        monitor.begin_window("w")
    clock.advance(1.0)
    assert_measured(monitor.end_window("w"), 2.0, 2 * DRAW_W)  # the first start still counts


@pytest.mark.parametrize("operation", ["peek_window", "end_window"])
def test_measuring_an_unknown_window_is_an_error(monitor: EnergyMonitor, operation: str) -> None:
    with pytest.raises(KeyError, match="'never' is not open"):
        getattr(monitor, operation)("never")


def test_cancel_forgets_a_window_and_ignores_an_unknown_one(monitor: EnergyMonitor) -> None:
    monitor.begin_window("slice")
    monitor.cancel_window("slice")
    monitor.cancel_window("never")
    assert not monitor.is_open("slice")
    with pytest.raises(KeyError):
        monitor.end_window("slice")


def test_measurements_add_and_average() -> None:
    total = TimeEnergy(2.0, 500.0) + TimeEnergy(3.0, 1000.0)
    assert total == TimeEnergy(5.0, 1500.0)
    assert total.avg_power_w == 300.0
    assert TimeEnergy(0.0, 0.0).avg_power_w == 0.0

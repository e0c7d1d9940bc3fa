"""The RAPL reader over a fake powercap sysfs tree (a tmp dir laid out as the kernel does)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.devices.rapl import RAPLReader
from zeus_airflow.core.train.monitor import EnergyMonitor
from zeus_airflow.testing import FakeNVML, ManualClock
from zeus_airflow.testing.fake_sysfs import FakePowercap

WRAP_UJ = 262_143_328_850
"""A real package zone's max_energy_range_uj (µJ)."""


def intel_two_sockets(root: Path) -> FakePowercap:
    tree = FakePowercap(root)
    for socket in (0, 1):
        tree.zone(f"intel-rapl:{socket}", f"package-{socket}", WRAP_UJ)
        tree.zone(f"intel-rapl:{socket}:0", "core", WRAP_UJ)  # inside the package: not added
        tree.zone(f"intel-rapl:{socket}:1", "dram", 65_712_999_613)
    tree.zone("intel-rapl:2", "psys", WRAP_UJ)  # the platform: overlaps, not added
    tree.zone("intel-rapl-mmio:0", "package-0", WRAP_UJ)  # repeats package 0: not added
    return tree


def test_intel_packages_and_dram_are_summed_apart(tmp_path: Path) -> None:
    tree = intel_two_sockets(tmp_path)
    reader = RAPLReader(tmp_path, poll_interval_s=0)
    assert reader.available and reader.has_dram
    assert sorted((z.domain, z.socket) for z in reader.zones) == [
        ("dram", 0),
        ("dram", 1),
        ("package", 0),
        ("package", 1),
    ]
    start = reader.read()
    assert (start.cpu_energy_j, start.dram_energy_j) == (0.0, 0.0)
    tree.add("intel-rapl:0", 30_000_000)  # 30 J
    tree.add("intel-rapl:1", 20_000_000)
    tree.add("intel-rapl:0:1", 4_000_000)
    tree.add("intel-rapl:0:0", 99_000_000)  # the core sub-zone is in the package already
    tree.add("intel-rapl:2", 99_000_000)
    tree.add("intel-rapl-mmio:0", 99_000_000)
    now = reader.read()
    assert now.cpu_energy_j == pytest.approx(50.0)
    assert now.dram_energy_j == pytest.approx(4.0)


def test_amd_packages_without_dram(tmp_path: Path) -> None:
    """AMD Zen: package zones through the same driver (and the amd-rapl prefix), no DRAM."""
    tree = FakePowercap(tmp_path)
    tree.zone("intel-rapl:0", "package-0", WRAP_UJ)
    tree.zone("amd-rapl:1", "package-1", WRAP_UJ)
    tree.zone("intel-rapl:0:0", "core", WRAP_UJ)
    reader = RAPLReader(tmp_path, poll_interval_s=0)
    tree.add("intel-rapl:0", 1_500_000)
    tree.add("amd-rapl:1", 500_000)
    now = reader.read()
    assert not reader.has_dram
    assert now.cpu_energy_j == pytest.approx(2.0) and now.dram_energy_j is None


def test_a_counter_that_wraps_counts_on(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path)
    tree.zone("intel-rapl:0", "package-0", 1_000_000, start_uj=900_000)
    reader = RAPLReader(tmp_path, poll_interval_s=0)
    tree.add("intel-rapl:0", 250_000)  # 900_000 + 250_000 wraps to 150_000
    assert tree.value("intel-rapl:0") == 150_000
    assert reader.read().cpu_energy_j == pytest.approx(0.25)
    tree.add("intel-rapl:0", 100_000)
    assert reader.read().cpu_energy_j == pytest.approx(0.35)


def test_the_poller_catches_wraps_between_reads(tmp_path: Path) -> None:
    """Two wraps between a window's edges would lose one range: the thread reads between."""
    tree = FakePowercap(tmp_path)
    tree.zone("intel-rapl:0", "package-0", 1_000_000)
    reader = RAPLReader(tmp_path, poll_interval_s=0.01)
    try:
        reader.read()
        for _ in range(3):  # 3 x 0.8 J: past the 1 J range twice
            tree.add("intel-rapl:0", 800_000)
            reader._update()  # what the poller does every poll_interval_s
        assert reader.read().cpu_energy_j == pytest.approx(2.4)
    finally:
        reader.close()


def test_unreadable_counters_are_not_measured_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree = intel_two_sockets(tmp_path)
    counter = tree.root / "intel-rapl:0" / "energy_uj"
    if os.geteuid() == 0:  # root reads any file (the tests may run as root): a read that
        counter.unlink()  # fails as surely, with another OSError
        counter.mkdir()
        expected = "Is a directory"
    else:
        counter.chmod(0o200)  # what Linux >= 5.10 does for non-root users
        expected = "Permission denied"
    with caplog.at_level(logging.WARNING):
        reader = RAPLReader(tmp_path, poll_interval_s=0)
        first, second = reader.read(), reader.read()
    assert not reader.available
    assert (
        (first.cpu_energy_j, first.dram_energy_j)
        == (None, None)
        == (second.cpu_energy_j, second.dram_energy_j)
    )
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "not measured" in warning and expected in warning


@pytest.mark.parametrize("layout", ["missing", "empty"])
def test_no_powercap_at_all_is_not_measured(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "powercap"
    if layout == "empty":
        root.mkdir()
    reader = RAPLReader(root, poll_interval_s=0)
    assert not reader.available
    assert reader.read().cpu_energy_j is None
    assert reader.unavailable_because is not None and "not measured" in reader.unavailable_because


def test_the_monitor_measures_cpu_and_dram_in_the_gpus_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tree = intel_two_sockets(tmp_path)
    clock = ManualClock()
    monitor = EnergyMonitor(
        NVMLGPUs(nvml=FakeNVML(clock=clock), clock=clock),
        host=RAPLReader(tmp_path, poll_interval_s=0),
    )
    monitor.begin_window("run")
    clock.advance(2.0)
    tree.add("intel-rapl:0", 100_000_000)
    tree.add("intel-rapl:1:1", 10_000_000)
    measured = monitor.end_window("run")
    assert measured.energy_j == pytest.approx(2 * 270.0, abs=0.01)  # the GPU alone
    assert (measured.cpu_energy_j, measured.dram_energy_j) == (
        pytest.approx(100.0),
        pytest.approx(10.0),
    )

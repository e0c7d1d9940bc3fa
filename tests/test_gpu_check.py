"""bench/gpu_check.py runs here, on the CPU against the fake NVML, so that it cannot rot before
it meets a GPU: in a fresh interpreter where Airflow cannot be imported, quick sizes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType

import bench_scripts
import pytest

from zeus_airflow.testing import FakeNVML

SCRIPT = "gpu_check.py"


def run_script(
    args: list[str], *, without: tuple[str, ...] = ("airflow",)
) -> subprocess.CompletedProcess[str]:
    return bench_scripts.run_script(SCRIPT, args, without=without)


def load_script() -> ModuleType:
    return bench_scripts.load_script(SCRIPT)


def test_help_needs_neither_airflow_nor_torch() -> None:
    options = "--out --gpu --simulated --quick --recurrences --budget-s --powercap-root"
    options += " --zeusd --zeusd-gpu"
    bench_scripts.assert_help_needs_neither_airflow_nor_torch(SCRIPT, tuple(options.split()))


def test_fewer_than_ten_recurrences_or_an_unknown_gpu_is_refused(tmp_path: Path) -> None:
    done = run_script(["--simulated", "--recurrences", "5"])
    assert done.returncode == 2 and "--recurrences=5 is invalid" in done.stderr
    done = run_script(["--simulated", "--quick", "--gpu", "3", "--out", str(tmp_path)])
    assert done.returncode == 1 and "--gpu=3 is invalid" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_simulated_quick_run_writes_every_part_labelled_simulated(tmp_path: Path) -> None:
    done = run_script(["--simulated", "--quick", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())

    assert report["measurement"] == "simulated"
    assert report["nvml_changes_attempted"] == [] and report["fake_nvml_set_calls"] == 0
    inventory = report["inventory"]
    assert inventory["model"].endswith("(simulated)") and inventory["energy_counter"] is True
    assert inventory["power_limit_constraints_mw"] == [100_000, 300_000]
    assert inventory["setting_a_limit_permitted"] in ("likely", "no")

    counter = report["energy_counter_vs_sampling"]
    assert len(counter["windows"]) == 3
    assert all(w["counter_j"] > 0 and w["sampled_j"] > 0 for w in counter["windows"])
    assert 0 < counter["monitor_overhead_us"]["begin_median_us"] < 100_000
    assert set(report["synchronisation"]) == {"with", "without"}

    rows = [r for r in report["workloads"] if "skipped" not in r]
    assert {(r["model"], r["batch_size"]) for r in rows} == {
        (m, b) for m in ("cnn", "transformer") for b in (4, 8, 16, 32)
    }
    for row in rows:
        assert row["time_per_step_s"] > 0 and row["gpu_energy_per_step_j"] > 0
        assert row["time_per_epoch_s"] == pytest.approx(
            row["time_per_step_s"] * row["steps_per_epoch"]
        )
        assert row["cpu_energy_per_step_j"] is not None  # the simulated powercap tree
    assert report["rapl"].startswith(("measured", "simulated"))

    engine = report["engine"]
    assert len(engine["recurrences"]) >= 10 and engine["mode"] == "measure"
    assert all(
        r["energy_j"] > 0 and r["batch_size"] in engine["batch_sizes"]
        for r in engine["recurrences"]
    )
    assert any(r["reached_target"] for r in engine["recurrences"])

    text = (tmp_path / "gpu_check.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert len(headings) == 7 and all("SIMULATED" in h for h in headings)
    assert set(report["bookmark_s_per_step"]) == {
        "none",
        "energy_every_step",
        "energy_once_per_update",
    }
    assert all(seconds > 0 for seconds in report["bookmark_s_per_step"].values())
    counter = report["energy_counter_vs_sampling"]
    assert counter["update_period_s_median"] == 0.0  # the fake's counter is continuous
    assert [r["window_s"] for r in counter["power_spread_by_window"]] == [0.02, 0.05]
    assert report["elapsed_s"] < 240


def test_the_read_only_nvml_refuses_every_change_before_nvml_sees_it() -> None:
    script = load_script()
    fake = FakeNVML()
    nvml = script.ReadOnlyNVML(fake)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    for change in (
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceSetPersistenceMode",
        "nvmlDeviceSetMigMode",
        "nvmlDeviceClearEccErrorCounts",
        "nvmlDeviceCreateGpuInstance",
    ):
        with pytest.raises(script.SettingRefusedError, match=change):
            getattr(nvml, change)(handle, 1)
    assert fake.set_calls == [] and fake.calls["nvmlDeviceSetPowerManagementLimit"] == 0
    assert len(nvml.attempted) == 6
    # Reads and NVML's constants pass through.
    assert nvml.nvmlDeviceGetPowerManagementLimit(handle) == 300_000
    assert nvml.NVML_ERROR_NOT_SUPPORTED == 3
    nvml.nvmlShutdown()


def test_the_zeusd_mode_measures_through_the_daemon_and_never_posts(tmp_path: Path) -> None:
    done = run_script(["--simulated", "--quick", "--zeusd", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())

    assert report["zeusd_changes_attempted"] == [] and report["fake_nvml_set_calls"] == 0
    zeusd = report["zeusd"]
    assert zeusd["checked_gpu"]["model"].endswith("(simulated)")
    assert zeusd["setting_a_limit_permitted"] == "likely"  # read from the scopes, never tried
    assert len(zeusd["windows"]) == 3 and zeusd["agreement_pct_median"] > 95
    assert report["rapl"].startswith("through zeusd's /cpu group (SIMULATED")
    rows = [r for r in report["workloads"] if "skipped" not in r]
    assert rows and all(r["cpu_energy_per_step_j"] > 0 for r in rows)
    assert len(report["engine"]["recurrences"]) >= 10
    headings = [
        line
        for line in (tmp_path / "gpu_check.md").read_text().splitlines()
        if line.startswith("#")
    ]
    assert len(headings) == 8 and all("SIMULATED" in h for h in headings)


def test_the_read_only_zeusd_client_refuses_every_post_before_sending_it(tmp_path: Path) -> None:
    from zeus_airflow.core.devices.zeusd_client import ZeusdEndpoint
    from zeus_airflow.testing import FakeZeusd

    script = load_script()
    with FakeZeusd(tmp_path / "z.sock", FakeNVML()) as daemon:
        zeusd = script.open_zeusd(ZeusdEndpoint(socket_path=str(daemon.socket_path)), 0)
        with pytest.raises(script.SettingRefusedError, match="POST /gpu/set_power_limit"):
            zeusd.gpus.set_power_limits_w([200])
        assert zeusd.client.attempted == ["/gpu/set_power_limit"]
        assert [r for r in daemon.requests if r[0] == "POST"] == []
        assert zeusd.gpus.energy_j() >= 0 and zeusd.host is not None

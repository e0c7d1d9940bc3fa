"""bench/gpu_recurring.py runs here, on the CPU against the fake NVML, so that it cannot rot
before it meets a GPU: in a fresh interpreter where Airflow cannot be imported, quick sizes,
through the real engine and a real SQLite store. It must never change a GPU setting: the fake
NVML records every set call, and there must be none."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import bench_scripts
import pytest

from zeus_airflow.core.common.config import ProfilerConfig
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine

SCRIPT = "gpu_recurring.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return bench_scripts.load_script(SCRIPT)


def test_help_needs_neither_airflow_nor_torch() -> None:
    options = "--out --gpu --simulated --quick --recurrences --arms --exploration-budget --budget-s"
    bench_scripts.assert_help_needs_neither_airflow_nor_torch(SCRIPT, tuple(options.split()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recurrences", "0"], "--recurrences=0 is invalid: expected at least 1"),
        (["--budget-s", "0"], "--budget-s=0.0 is invalid: expected seconds > 0"),
        (["--exploration-budget", "-1"], "'-1' is invalid: expected a number >= 0"),
        (["--exploration-budget", "lots"], "'lots' is invalid: expected a number >= 0"),
        (["--arms", "zeus"], "'zeus' is invalid: expected a comma-separated list of zeus,"),
        (["--arms", "grid,default"], "that includes default (the baseline)"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    script: ModuleType, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        script.parse_args(["--simulated", "--quick", *args])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_an_earlier_runs_store_or_an_unknown_gpu_is_refused(tmp_path: Path) -> None:
    (tmp_path / "gpu_recurring.db").write_bytes(b"an earlier run's store")
    done = bench_scripts.run_script(SCRIPT, ["--simulated", "--quick", "--out", str(tmp_path)])
    assert done.returncode == 2 and "holds an earlier run's store" in done.stderr
    assert (tmp_path / "gpu_recurring.db").read_bytes() == b"an earlier run's store"

    fresh = tmp_path / "fresh"
    done = bench_scripts.run_script(
        SCRIPT, ["--simulated", "--quick", "--gpu", "3", "--out", str(fresh)]
    )
    assert done.returncode == 1 and "--gpu=3 is invalid" in done.stderr
    assert not fresh.exists()


def test_the_gpu_is_opened_read_only_and_every_job_in_measure_mode(
    script: ModuleType, tmp_path: Path
) -> None:
    import torch

    args = script.parse_args(["--simulated", "--quick", "--out", str(tmp_path)])
    gpu = script.open_gpu(torch, args, script.QUICK)
    try:
        for arm in script.ARMS:
            assert script.job_config(script.QUICK, arm, 0.1).profiler.mode == "measure"
        with pytest.raises(
            script.gpu_check.SettingRefusedError, match="nvmlDeviceSetPowerManagementLimit"
        ):
            gpu.counter.set_power_limits_w([300])
        # A job that asked to change limits would be refused before NVML sees the call.
        optimizing = replace(
            script.job_config(script.QUICK, "zeus", None), profiler=ProfilerConfig()
        )
        assert optimizing.profiler.mode == "optimize"
        engine = Engine(SQLStore.in_memory(), gpu.counter, optimizing, heartbeat_s=None)
        patterns = script.class_patterns(torch, script.QUICK)
        data = script.recurrence_data(torch, script.QUICK, patterns, 1, "cpu")
        meters = script.CounterAndSampled(gpu.counter, gpu.sampled)
        with pytest.raises(script.gpu_check.SettingRefusedError):
            engine.run_recurrence(
                script.make_train(torch, script.QUICK, data, 1, meters), RecurrenceKey("r1")
            )
        assert gpu.fake.set_calls == [] and gpu.fake.calls["nvmlDeviceSetPowerManagementLimit"] == 0
        assert set(gpu.nvml.attempted) == {"nvmlDeviceSetPowerManagementLimit"}
        assert gpu.fake.limits_mw() == [700_000]
    finally:
        gpu.close()


def test_the_simulated_quick_run_measures_every_arm_interleaved(tmp_path: Path) -> None:
    done = bench_scripts.run_script(SCRIPT, ["--simulated", "--quick", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_recurring.json").read_text())

    assert report["measurement"] == "simulated"
    assert report["nvml_changes_attempted"] == [] and report["fake_nvml_set_calls"] == 0
    assert report["power_limit_w_before"] == report["power_limit_w_after"] == 700
    assert report["device"]["model"].endswith("(simulated)")
    job, arms = report["job"], list(report["arms"])
    assert job["power_limit_mode"] == "measure" and job["exploration_budget"] == 0.1
    assert len(job["batch_sizes"]) >= 5 and arms == ["zeus", "zeus_no_budget", "default"]

    rows = report["recurrences"]
    assert [r["recurrence"] for r in rows] == list(range(1, 13))
    firsts = [r["order"].split()[0] for r in rows]
    assert all(firsts.count(arm) == 4 for arm in arms)  # the order rotates
    for row in rows:
        assert sorted(row["order"].split()) == sorted(arms)
        assert row["default_batch_size"] == job["default_batch_size"]
        assert row["default_phase"] == "default"
        assert row["default_tried"] == str(job["default_batch_size"])
        for arm in arms:
            assert row[f"{arm}_batch_size"] in job["batch_sizes"]
            assert row[f"{arm}_energy_j"] > 0 and row[f"{arm}_time_s"] > 0
            assert 1 <= row[f"{arm}_epochs"] <= job["max_epochs"] * len(job["batch_sizes"])
            assert 0.8 < row[f"{arm}_counter_over_sampled"] < 1.25
        assert row["zeus_no_budget_budget_left_runs"] is None  # no budget, no books
    for arm in ("zeus", "zeus_no_budget"):
        assert rows[0][f"{arm}_batch_size"] == job["default_batch_size"]  # the walk's start
    summary = report["summary"]["arms"]
    assert len(summary["zeus_no_budget"]["tried"]) > 1, "unbudgeted, Zeus explores in 12"
    # The budget's books, once the default size has run to its end (Default's estimate).
    budgeted = [r for r in rows if r["zeus_budget_default_cost"] is not None]
    assert budgeted and all(r["zeus_budget_left_runs"] is not None for r in budgeted)

    for arm in arms:
        total = sum(r[f"{arm}_energy_j"] for r in rows)
        assert rows[-1][f"{arm}_cumulative_energy_j"] == pytest.approx(total)
        assert summary[arm]["energy_j"] == pytest.approx(total)
        assert summary[arm]["energy_over_default"] == pytest.approx(
            total / sum(r["default_energy_j"] for r in rows)
        )
    assert summary["default"]["energy_over_default"] == 1.0

    table = list(csv.DictReader((tmp_path / "gpu_recurring.csv").open()))
    assert len(table) == 12 and float(table[-1]["zeus_cumulative_over_default"]) == pytest.approx(
        rows[-1]["zeus_cumulative_over_default"]
    )
    text = (tmp_path / "gpu_recurring.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert len(headings) == 3 and all("SIMULATED" in h for h in headings)
    assert text.count("\n| ") == (1 + 3) + 3 * (1 + 12)  # the summary, a table an arm

    store = SQLStore(f"sqlite:///{tmp_path / 'gpu_recurring.db'}")
    trials = list_trials(store)
    store.engine.dispose()
    assert {t.job_id for t in trials} == {f"gpu_recurring.{arm}" for arm in arms}
    assert all(t.measurement == "simulated" for t in trials)
    assert sum(t.job_id == "gpu_recurring.default" for t in trials) == 12
    assert report["elapsed_s"] < 240


def test_the_time_budget_stops_between_recurrences_and_says_so(
    script: ModuleType, tmp_path: Path
) -> None:
    """Two arms, in this process: the first recurrence always runs."""
    out = tmp_path / "out"
    argv = ["--simulated", "--quick", "--recurrences", "3", "--budget-s", "0.01"]
    assert script.main([*argv, "--arms", "zeus,default", "--out", str(out)]) == 0
    report = json.loads((out / "gpu_recurring.json").read_text())
    assert len(report["recurrences"]) == 1
    assert report["summary"]["stopped"].startswith("time budget: stopped after 1 of 3")
    assert report["job"]["exploration_budget"] == pytest.approx(0.1)
    assert "**Stopped early**" in (out / "gpu_recurring.md").read_text()
    assert list(report["summary"]["arms"]) == ["zeus", "default"]
    assert not math.isnan(report["summary"]["arms"]["zeus"]["energy_over_default"])

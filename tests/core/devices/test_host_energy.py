"""CPU and DRAM energy per run, beside the GPUs': through the engine on the fake NVML and a fake
powercap tree, into the outcome, the XComs, the summary and the store; out of the cost unless
``cost_includes_cpu``."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_jobs import CPU_W, DRAM_W, GPU_W, STEP_S, STEPS, run_job

from zeus_airflow.core.reports import runs
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.operators.summary import XCOM_KEYS, summary_line, xcom_values

MAX_POWER_W = 300.0


def test_cpu_and_dram_energy_are_reported_beside_the_gpus_and_kept_out_of_the_cost(
    tmp_path: Path,
) -> None:
    result, _ = run_job(tmp_path)
    seconds = STEPS * STEP_S
    assert result.energy_j == pytest.approx(GPU_W * seconds, abs=0.01)
    assert result.figures.cpu_energy_j == pytest.approx(CPU_W * seconds)
    assert result.figures.dram_energy_j == pytest.approx(DRAM_W * seconds)
    assert result.cost == pytest.approx(
        0.5 * GPU_W * seconds + 0.5 * MAX_POWER_W * seconds, abs=0.01
    )
    pushed = xcom_values(result)
    assert set(pushed) == set(XCOM_KEYS)
    assert (pushed["cpu_energy_j"], pushed["dram_energy_j"]) == (
        result.figures.cpu_energy_j,
        result.figures.dram_energy_j,
    )
    assert "CPU+DRAM 180 J" in summary_line(result)


def test_cost_includes_cpu_adds_the_hosts_energy_to_the_cost(tmp_path: Path) -> None:
    result, _ = run_job(tmp_path, cost_includes_cpu=True)
    seconds = STEPS * STEP_S
    assert result.cost == pytest.approx(
        0.5 * (GPU_W + CPU_W + DRAM_W) * seconds + 0.5 * MAX_POWER_W * seconds, abs=0.01
    )


def test_without_rapl_the_host_is_not_measured_and_said_so(tmp_path: Path) -> None:
    result, _ = run_job(tmp_path, with_rapl=False)
    assert result.figures.cpu_energy_j is None and result.figures.dram_energy_j is None
    pushed = xcom_values(result)
    assert pushed["cpu_energy_j"] is None and pushed["dram_energy_j"] is None
    assert "CPU+DRAM" not in summary_line(result)


def test_the_store_the_reports_and_the_cli_keep_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from zeus_airflow.cli import main

    result, store = run_job(tmp_path)
    (trial,) = list_trials(store)
    assert (trial.cpu_energy_j, trial.dram_energy_j) == (
        pytest.approx(result.figures.cpu_energy_j),
        pytest.approx(result.figures.dram_energy_j),
    )
    with store.reader() as reader:
        (run,) = runs(reader, result.job.id)
    assert run.cpu_energy_j == pytest.approx(CPU_W * STEPS * STEP_S)
    assert run.dram_energy_j == pytest.approx(DRAM_W * STEPS * STEP_S)
    url = str(store.engine.url)
    assert main(["runs", "--db", url, "--format", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["cpu_energy_j"] == pytest.approx(150.0)
    assert main(["runs", "--db", url, "--wide"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    at = header.index("cpu_energy_j")  # the table is aligned: read the cells under it
    assert line[at:].split()[:2] == ["150", "30"]
    assert header[at:].split()[:2] == ["cpu_energy_j", "dram_energy_j"]

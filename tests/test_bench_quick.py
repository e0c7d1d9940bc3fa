"""Every script in bench/ runs here in its quick mode (seconds each), so that a benchmark that
breaks fails the suite instead of rotting until someone runs it (issue 26: operator_overhead
had broken unnoticed). Outputs go to a tmp dir; the recorded results in bench/ stay as they are.

A new script in bench/ must join QUICK (or ELSEWHERE): the first test fails until it does.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


@dataclass(frozen=True)
class Quick:
    args: tuple[str, ...]
    """After the script; ``{out}`` stands for an output stem in the test's tmp dir,
    ``{airflow_db}`` for the session's migrated Airflow metadata database."""
    prints: str
    """Text the script prints when it ran to its end."""
    writes: tuple[str, ...] = ()
    """Files it writes, as suffixes of ``{out}``."""
    timeout_s: float = 300.0
    """How long its quick run may take."""


QUICK: dict[str, Quick] = {
    "acceptance_calibration.py": Quick(("--quick",), "emea: cheapest b="),
    "carbon_budget.py": Quick(("--quick",), "planning (a deadline 2 s away)"),
    "carbon_shift.py": Quick(
        ("--quick", "--output", "{out}"), "Wall time", (".md", ".csv", ".png")
    ),
    # From the session's migrated Airflow database: the CLI's Airflow lookup reads it.
    "cli_latency.py": Quick(("--quick", "--airflow-db", "{airflow_db}"), "runs=20 help_s="),
    "drift_capriccio.py": Quick(
        ("--quick", "--output", "{out}"), "| options |", (".md", "_seed1.csv", "_seed1.png")
    ),
    "drift_experiment.py": Quick(
        ("--quick", "--output", "{out}"), "Target", (".md", ".csv", ".png")
    ),
    "drift_sweep.py": Quick(
        ("--quick", "--output", "{out}"), "Drift detection has less regret", (".md", ".csv", ".png")
    ),
    # Reads installed metadata only: its whole run takes under a second.
    "install_size.py": Quick((), "zeus-airflow[]:"),
    "operator_overhead.py": Quick(("--quick", "--openlineage"), "ours_median_ms="),
    "profile_steps.py": Quick(
        ("--quick", "--output", "{out}"), "| v100 | cifar100 |", (".md", ".csv")
    ),
    # Through Airflow's real servers: two daily runs, a few minutes on two busy cores.
    "savings_intervals.py": Quick(("--quick",), "observe-mode job within noise: True"),
    "short_dag.py": Quick(
        ("--quick", "--output", "{out}"), "zeus-airflow report", (".md", ".csv"), timeout_s=600
    ),
    "short_horizon.py": Quick(("--quick", "--output", "{out}"), "replayed", (".md", ".csv")),
    "short_job.py": Quick(("--quick", "--output", "{out}"), "Simulated energy", (".md", ".csv")),
    "simulate_sweep.py": Quick(
        ("--quick", "--output", "{out}"), "Regret in 1e6", (".md", ".csv", ".png")
    ),
    # Exactly-once under concurrent workers is this benchmark's verdict: it must hold here too.
    "store_concurrency.py": Quick(
        ("--quick", "--db", "sqlite:///{out}.db"), "lost=0 duplicated=0 stuck=0"
    ),
    "store_scale.py": Quick(("--quick", "--db", "sqlite:///{out}.db"), "plans=indexed"),
    # From the session's migrated Airflow database rather than a migration of their own.
    "ui_fleet_page.py": Quick(
        ("--quick", "--airflow-db", "{airflow_db}"), "jobs=30 server_p50_ms="
    ),
    "ui_job_page.py": Quick(("--quick", "--airflow-db", "{airflow_db}"), "runs=30 server_p50_ms="),
    "zeusd_faults.py": Quick(("--quick",), "| unreachable |"),
}
ELSEWHERE = {
    "gpu_check.py": "tests/test_gpu_check.py",
    "gpu_recurring.py": "tests/test_gpu_recurring.py",
}
"""Scripts whose quick mode another test module runs, with more checks."""


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def run_quick(
    script: str, tmp_path: Path, airflow_db: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    args = [a.format(out=out, airflow_db=airflow_db) for a in QUICK[script].args]
    # TMPDIR: scripts that make their own Airflow home (mkdtemp) make it in the tmp dir too.
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=QUICK[script].timeout_s,
    )
    return done, out


def test_every_bench_script_has_a_quick_run() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts == set(QUICK) | set(ELSEWHERE)
    for script, module in ELSEWHERE.items():
        assert f"bench/{script}" in (REPO / module).read_text()


@pytest.mark.parametrize("script", sorted(QUICK))
def test_the_quick_mode_runs_and_writes_only_to_tmp(
    script: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    before = snapshot(BENCH)
    needs_airflow_db = any("{airflow_db}" in a for a in QUICK[script].args)
    if needs_airflow_db:
        request.getfixturevalue("airflow_db")  # makes PRISTINE_DB
    done, out = run_quick(script, tmp_path, PRISTINE_DB if needs_airflow_db else None)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert QUICK[script].prints in done.stdout
    for suffix in QUICK[script].writes:
        assert out.with_name(out.name + suffix).stat().st_size > 0, suffix
    assert snapshot(BENCH) == before, "a quick run wrote over bench/"


def test_the_quick_profile_steps_counts_fewer_steps_after(tmp_path: Path) -> None:
    done, out = run_quick("profile_steps.py", tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert (row["gpu"], row["workload"]) == ("v100", "cifar100")
    assert int(row["before_slices_b0"]) == 7  # the old sweep measured every limit
    assert int(row["after_slices_b0"]) < 7
    assert int(row["after_steps_b0"]) < int(row["before_steps_b0"])
    assert row["same_optimum_b0"] == "True"
    assert "REPLAYED" in out.with_suffix(".md").read_text()


def test_a_quick_run_without_output_writes_to_a_temporary_folder(tmp_path: Path) -> None:
    before = snapshot(BENCH)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH / "short_horizon.py"), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (written,) = tmp_path.glob("zeus-bench-short_horizon-*/short_horizon.md")
    assert str(written.with_suffix("")) in done.stderr
    assert snapshot(BENCH) == before

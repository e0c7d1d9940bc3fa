"""The paper's V100 and A40 traces ship in the package and are the default traces folder."""

from __future__ import annotations

import csv
import fnmatch
import tomllib
from pathlib import Path

import pytest
from fixtures_airflow import REPO

from zeus_airflow.cli import main
from zeus_airflow.core.common.traces import (
    PACKAGED_TRACES,
    WORKLOADS,
    available_gpus,
    load_workload_trace,
)
from zeus_airflow.core.devices.spec import TRACES_ENV, resolve_traces_dir


def test_explicit_then_environment_then_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path / "env"))
    assert resolve_traces_dir(tmp_path / "given") == tmp_path / "given"
    assert resolve_traces_dir() == tmp_path / "env"
    monkeypatch.setenv(TRACES_ENV, "")  # set but empty, as `VAR= cmd` leaves it
    assert resolve_traces_dir() == PACKAGED_TRACES
    monkeypatch.delenv(TRACES_ENV)
    assert resolve_traces_dir() == PACKAGED_TRACES


@pytest.mark.parametrize("gpu", ["v100", "a40"])
def test_every_paper_workload_loads_from_the_package(gpu: str) -> None:
    assert available_gpus(PACKAGED_TRACES) == ["a40", "v100"]
    for name, workload in WORKLOADS.items():
        trace = load_workload_trace(PACKAGED_TRACES, gpu, name)
        assert trace.default_batch_size <= workload.default_batch_size
        assert len(trace.batch_sizes) >= 3 and len(trace.power_limits_w) >= 5


def test_the_packaged_files_are_the_papers_whole_traces() -> None:
    with open(PACKAGED_TRACES / "summary_train.csv", newline="") as f:
        datasets = {row["dataset"] for row in csv.DictReader(f)}
    assert datasets >= set(WORKLOADS)
    readme = (PACKAGED_TRACES / "README.md").read_text()
    assert "Apache License 2.0" in readme and "ml-energy/zeus" in readme


def test_package_data_ships_every_traces_file() -> None:
    # Without the package-data entries a wheel would install the code but not the traces.
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["zeus_airflow"]
    package = REPO / "zeus_airflow"
    assert sorted(path.name for path in PACKAGED_TRACES.iterdir()) == [
        "README.md",
        "summary_power_a40.csv",
        "summary_power_v100.csv",
        "summary_train.csv",
    ]
    files = [path.relative_to(package).as_posix() for path in PACKAGED_TRACES.iterdir()]
    assert all(any(fnmatch.fnmatch(f, p) for p in patterns) for f in files)


def test_simulate_needs_no_traces_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TRACES_ENV)
    out = tmp_path / "out.csv"
    assert (
        main(
            [
                "simulate",
                "--gpu",
                "v100",
                "--workload",
                "squad",
                "--policy",
                "default",
                "--seeds",
                "1",
                "--recurrences",
                "3",
                "--jobs",
                "1",
                "--output-csv",
                str(out),
            ]
        )
        == 0
    )
    with open(out, newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["gpu"] == "v100" and row["recurrences"] == "3"
    assert "replayed" in capsys.readouterr().out

"""`zeus-airflow simulate` through its console entry point."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from fixtures_airflow import TRACES
from usage_errors import assert_usage_error

from zeus_airflow.cli import main
from zeus_airflow.cli.simulate import CSV_COLUMNS


def simulate(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "simulate",
        "--traces",
        str(TRACES),
        "--output-csv",
        str(tmp_path / "out.csv"),
        "--jobs",
        "1",
        *extra,
    ]


def test_small_sweep_writes_csv_table_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        simulate(
            tmp_path,
            "--gpu",
            "a40",
            "--workload",
            "sentiment140",
            "--policy",
            "all",
            "--seeds",
            "1",
            "2",
            "--recurrences",
            "12",
            "--plot",
            str(tmp_path / "plot.png"),
        )
    )
    assert code == 0
    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert set(CSV_COLUMNS) <= set(rows[0])
    assert {(r["policy"], r["seed"]) for r in rows} == {
        (p, s) for p in ("zeus", "default", "grid") for s in ("1", "2")
    }
    assert all(r["recurrences"] == "12" and r["measurement"] == "replayed" for r in rows)
    default = [r for r in rows if r["policy"] == "default"]
    # Default runs b0 at max power: its energy ratio to its own expectation is about 1.
    assert all(abs(float(r["last5_energy_ratio"]) - 1.0) < 0.05 for r in default)
    out = capsys.readouterr()
    assert "replayed" in out.out and "zeus" in out.out
    assert "[  6/6]" in out.err  # progress
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_recurrences_default_to_twice_sizes_times_limits(tmp_path: Path) -> None:
    assert (
        main(
            simulate(
                tmp_path,
                "--gpu",
                "a40",
                "--workload",
                "sentiment140",
                "--policy",
                "default",
                "--seeds",
                "1",
            )
        )
        == 0
    )
    with open(tmp_path / "out.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["recurrences"] == str(2 * 5 * 5)  # 5 batch sizes x 5 traced limits on the A40


def test_drift_detection_can_be_switched_and_finds_nothing_without_drift(tmp_path: Path) -> None:
    regret = {}
    for mode in ("on", "off"):
        assert (
            main(
                simulate(
                    tmp_path,
                    "--gpu",
                    "v100",
                    "--workload",
                    "cifar100",
                    "--policy",
                    "zeus",
                    "--seeds",
                    "1",
                    "--recurrences",
                    "40",
                    "--drift-detection",
                    mode,
                )
            )
            == 0
        )
        with open(tmp_path / "out.csv", newline="") as f:
            (row,) = csv.DictReader(f)
        regret[mode] = row["cum_regret"]
    assert regret["on"] == regret["off"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--gpu", "h100", "--workload", "squad"),
            "gpu='h100' is invalid: expected one of a40, v100",
        ),
        (("--gpu", "v100", "--workload", "mnist"), "workload='mnist' is invalid"),
        (("--gpu", "v100", "--workload", "squad", "--eta", "2"), "eta=2.0 is invalid"),
        (("--gpu", "v100", "--workload", "squad", "--beta", "1"), "beta=1.0 is invalid"),
        (("--gpu", "v100", "--workload", "squad", "--window", "-3"), "window_size=-3 is invalid"),
        (
            ("--gpu", "v100", "--workload", "squad", "--recurrences", "0"),
            "recurrences=0 is invalid",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_parameter(
    tmp_path: Path, args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(capsys, simulate(tmp_path, *args), message, tmp_path / "out.csv")


def test_missing_traces_folder_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "simulate",
                "--traces",
                str(tmp_path / "nope"),
                "--gpu",
                "v100",
                "--workload",
                "squad",
                "--output-csv",
                str(tmp_path / "o.csv"),
            ]
        )
    assert "traces=" in capsys.readouterr().err

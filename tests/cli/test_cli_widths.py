"""``runs`` and ``report`` fit 120 columns for every kind of job (mapped instances with long
ids, carbon-aware starts, short and Default-only jobs); ``--wide`` shows every column; a
saving below the resolution reads "0 %"."""

from __future__ import annotations

import dataclasses

import pytest
from fixtures_fleet import CARBON_JOB, EVEN_JOB, MAPPED_JOBS, fleet_url

from zeus_airflow.cli import main
from zeus_airflow.cli.store import WIDE_RUN_COLUMNS
from zeus_airflow.core.reports import JobReport


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return fleet_url(tmp_path_factory.mktemp("fleet"))


def output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ("runs",),
        ("runs", "--job", MAPPED_JOBS[0]),
        ("runs", "--job", CARBON_JOB),
        ("report",),
        ("report", "--job", MAPPED_JOBS[1]),
    ],
    ids=["runs", "runs-mapped", "runs-carbon", "report", "report-mapped"],
)
def test_every_line_fits_120_columns(
    url: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    out = output(capsys, *argv, "--db", url)
    assert max(map(len, out.splitlines())) <= 120, out
    # Too wide with the job as a column: each job names a line of its own above its rows.
    assert {*MAPPED_JOBS, CARBON_JOB} & set(out.splitlines())


def test_the_runs_table_keeps_its_figures_and_says_what_it_left_out(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One job's tries: under its id, every column. The whole fleet's (an observe-mode job
    adds "would save"): the spare columns go, and the notes say which."""
    header, *lines = output(capsys, "runs", "--db", url, "--job", CARBON_JOB).splitlines()
    figures = ["id", "run", "try", "outcome", "batch", "limit", "energy", "time", "CO2e"]
    assert set(figures) | {"phase", "budget", "data"} == set(header.split())
    assert lines[0] == CARBON_JOB and lines[1].startswith("  17  2026-11-01 00:00 (id)  1.1")
    assert "not shown" not in "\n".join(lines)
    header, *lines = output(capsys, "runs", "--db", url).splitlines()
    assert set(figures) | {"data", "would", "save"} == set(header.split())
    assert "not shown, to fit 120 columns: phase, budget (--wide: every column)." in lines


def test_wide_shows_every_column(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    runs = output(capsys, "runs", "--db", url, "--wide").splitlines()
    assert runs[0].split() == list(WIDE_RUN_COLUMNS)
    assert sum(MAPPED_JOBS[0] in line for line in runs) == 8  # a column again, on every row
    report = output(capsys, "report", "--db", url, "--wide").splitlines()
    assert report[0].split() == [f.name for f in dataclasses.fields(JobReport)]
    assert sum(line.startswith(CARBON_JOB) for line in report) == 1


def test_a_saving_below_the_resolution_reads_as_zero(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Default-only job saved float noise (-1.2e-16 of Default's energy): ``0``, with
    its interval and marked within it (``*``), as the UI shows it."""
    out = output(capsys, "report", "--db", url, "--job", EVEN_JOB).splitlines()
    header, row = out[0], out[2]
    saved = header.index("saved")
    share, unit = row[saved:].split()[:2]
    assert share.startswith("0±") and unit == "%*"
    assert "-0.0 %" not in row and "e-1" not in row


def test_a_grouped_table_names_each_job_once() -> None:
    """Tries of two jobs interleave in time; grouped (too wide with the job as a column),
    each job names one line, its rows under it in their order (issue 47: ``runs`` repeated a
    job's line 14 times for 26 tries)."""
    from zeus_airflow.cli import views

    jobs = ["a." + "x" * 70, "b." + "y" * 70]
    rows = [{"job": jobs[i % 2], "id": str(i), "note": "z" * 60} for i in range(8)]
    lines = views.fit(["job", "id", "note"], rows, "job").lines
    assert [line for line in lines if line in jobs] == jobs
    ids = [line.split()[0] for line in lines[1:] if line not in jobs]
    assert ids == ["0", "2", "4", "6", "1", "3", "5", "7"]

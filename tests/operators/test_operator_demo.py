"""``zeus-airflow demo``: a fresh Airflow home, daily runs through Airflow, the per-run table,
the report's headline (the one saving it states) and how to open the UI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fixtures_airflow import REPO, TRACES, load_dag_file, sync_dag

from zeus_airflow.cli import demo_runs, main


def demo(home: Path, days: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ZEUS_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeus_airflow.cli",
            "demo",
            "--days",
            str(days),
            "--traces",
            str(TRACES),
            "--airflow-home",
            str(home),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_demo_runs_days_through_airflow_and_reports(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = demo(home, 2)

    assert (home / "airflow.db").exists() and (home / "zeus_airflow.db").exists()
    assert "2025-01-01  success" in out and "2025-01-02  success" in out
    assert "(replayed)" in out and "2 DAG runs" in out
    table, report = out.split("$ zeus-airflow runs --job zeus_replay_daily.train\n")[1].split(
        "$ zeus-airflow report --job zeus_replay_daily.train\n"
    )
    assert table.count("2025-01-0") >= 2  # one row per try, named after its day
    assert max(map(len, table.splitlines())) <= 120 and "replayed" in table
    report, headline = report.split("\nZeus over the 2 runs (replayed from the paper's traces): ")
    # The job's id (23 characters) on a line of its own: its savings' intervals fill the row.
    assert report.split("\n")[1] == "zeus_replay_daily.train" and "fleet: 1 jobs, 2 runs" in report
    assert report.split()[:2] == ["runs", "phase"]
    assert max(map(len, report.splitlines())) <= 120
    # One saving, the report's: its headline, and no other (issue 47: the demo printed a
    # second one, against the traces' expectation).
    stated = headline.split(".\n")[0]
    assert " ".join(stated.split()) in " ".join(report.split())
    assert out.count("of Default's energy") == 2  # the report's fleet line, and its headline
    assert "api-server --host 127.0.0.1" in out and "/zeus/jobs/zeus_replay_daily.train" in out


@pytest.mark.usefixtures("dag_test", "zeus_store_url")
def test_a_second_demo_goes_on_from_the_day_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dag.test() finds DAGs in the configured DAGs folder only, and this session's is not the
    # repository's: serialize the DAG first.
    monkeypatch.setattr(
        demo_runs, "_load_dag", lambda path: sync_dag(load_dag_file(path, demo_runs.DAG_ID))
    )
    days = []
    for name in ("first", "second"):
        results = tmp_path / f"{name}.json"
        assert (
            demo_runs.main(
                ["--days", "1", "--dags-folder", str(REPO / "dags"), "--results", str(results)]
            )
            == 0
        )
        days.append(
            datetime.fromisoformat(json.loads(results.read_text())["runs"][0]["logical_date"])
        )
    assert days[1] - days[0] == timedelta(days=1)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--days", "0"], "days=0"),
        (["--dags-folder", "/nonexistent"], "dags_folder="),
    ],
)
def test_bad_demo_arguments_are_named(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--traces", str(TRACES), *args])
    assert exited.value.code == 2 and named in capsys.readouterr().err


def test_the_printed_ui_command_follows_any_port(tmp_path: Path) -> None:
    """Run the printed lines with another port, a stand-in for ``airflow`` reporting what it
    was given: the api-server's port and the Execution API URL its tasks call agree."""
    from zeus_airflow.cli.demo import ui_instructions

    lines = ui_instructions(
        tmp_path / "home", REPO / "dags", TRACES, "zeus_replay_daily.train"
    ).splitlines()
    start = next(i for i, line in enumerate(lines) if "export PORT=" in line)
    end = next(i for i, line in enumerate(lines) if " api-server " in line)
    script = "\n".join(lines[start : end + 1]).replace("export PORT=8080", "export PORT=18777")
    airflow = str(Path(sys.executable).parent / "airflow")
    fake = tmp_path / "airflow"
    fake.write_text('#!/bin/sh\necho "$AIRFLOW__CORE__EXECUTION_API_SERVER_URL $*"\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["sh", "-c", script.replace(airflow, str(fake))], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "http://127.0.0.1:18777/execution/",
        "api-server",
        "--host",
        "127.0.0.1",
        "--port",
        "18777",
    ]
    shown = "\n".join(lines)
    assert "Storage > XCom" in shown and "Browse > XComs" in shown
    assert "Details > Extra Links > Zeus job" in shown
    assert "task train: XCom" not in shown  # no such tab on Airflow 3.3's task page

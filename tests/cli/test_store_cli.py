"""`zeus-airflow jobs | runs | reset` on a store with real trials, SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures_cli import run_cli
from fixtures_store import job_config, replay_never_reaching, unreachable_url
from sqlalchemy import select

from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey, TrialRecord
from zeus_airflow.core.store.admin import list_jobs, list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.tables import jobs
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining


@pytest.fixture
def filled_url(sql_store: SQLStore, cifar_trace: WorkloadTrace) -> str:
    """Three recurrences of ``cli.job`` and one of ``other.job``, by mapped instance 2 of
    its task."""
    for job_id, runs, map_index in (("cli.job", 3, -1), ("other.job", 1, 2)):
        gpu = ReplayGPU(cifar_trace)
        engine = Engine(sql_store, gpu, job_config(cifar_trace, job_id), seed=1, heartbeat_s=None)
        train = ReplayTraining(gpu, seed=1)
        for i in range(runs):
            engine.run_recurrence(
                train, RecurrenceKey(f"run-{i}", "dag", f"{job_id}-task", map_index)
            )
    return sql_store.engine.url.render_as_string(hide_password=False)


def table_row(header: str, line: str) -> dict[str, str]:
    """A row of an aligned table by column name (cells may hold spaces: "V100 (replay)")."""
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", header)]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): line[a:b].strip() for a, b in zip(starts, ends, strict=True)}


class Terminal(io.StringIO):
    """Standard input as a person at a terminal types it."""

    def isatty(self) -> bool:
        return True


def test_runs_in_every_format(filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "json")
    runs = json.loads(out)
    assert code == 0 and [r["job_id"] for r in runs] == ["cli.job"] * 3 + ["other.job"]
    assert set(runs[0]) == {f.name for f in dataclasses.fields(TrialRecord)} | {"logical_date"}
    assert runs[0]["logical_date"] is None  # --db: no Airflow database read
    assert all(r["status"] == "succeeded" and r["energy_j"] > 0 for r in runs)
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(int(r["id"]), float(r["cost"])) for r in rows] == [(r["id"], r["cost"]) for r in runs]
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--job", "other.job", "--wide")
    header, *lines = out.splitlines()
    columns = header.split()
    assert columns == ["id", "job_id", "version"] + [
        f.name for f in dataclasses.fields(TrialRecord) if f.name not in ("id", "job_id", "version")
    ] + ["logical_date"]  # every column
    shown = table_row(header, lines[0])
    assert (
        shown["job_id"],
        shown["version"],
        shown["task_id"],
        shown["map_index"],
        shown["run_id"],
    ) == ("other.job", "1", "other.job-task", "2", "run-0")
    assert (shown["reached_target"], shown["stop_reason"]) == ("True", "target")
    assert float(shown["setup_time_s"]) >= 0.0  # measured apart, beside training time


def test_runs_reads_in_units_that_fit_within_120_columns(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url)
    header, *lines = out.splitlines()
    assert header.split() == [
        "id",
        "job",
        "run",
        "try",
        "outcome",
        "phase",
        "batch",
        "limit",
        "energy",
        "time",
        "data",
    ]
    assert max(map(len, out.splitlines())) <= 120
    first = lines[0]
    at = header.index("energy")
    energy, unit = first[at:].split()[:2]
    assert unit in ("kJ", "MJ") and float(energy) < 1000  # 90.7 kJ, not 90701.2
    assert first[header.index("outcome") :].split()[0] == "succeeded"
    assert first[header.index("limit") :].split()[1] == "W"
    assert "e+0" not in out and "outcome: each try's own" in out


def test_a_try_that_missed_its_target_inside_a_task_is_not_called_failed(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task went on to another batch size and succeeded: the missed try says what it
    missed, in both tables, never "failed"."""
    gpu = ReplayGPU(cifar_trace)
    engine = Engine(sql_store, gpu, job_config(cifar_trace, "hard.job"), seed=1, heartbeat_s=None)
    reaching, never = ReplayTraining(gpu, seed=1), replay_never_reaching(gpu)
    tries: list[int] = []

    def first_try_misses(run: Any) -> None:
        tries.append(run.batch_size)
        (never if len(tries) == 1 else reaching)(run)

    result = engine.run_recurrence(first_try_misses, RecurrenceKey("run-0"))
    url = sql_store.engine.url.render_as_string(hide_password=False)
    assert [t.outcome.reached_target for t in result.tries] == [False, True]
    _, out, _ = run_cli(capsys, "runs", "--db", url)
    header, *lines = out.splitlines()
    outcomes = [table_row(header, line)["outcome"] for line in lines[:2]]
    assert outcomes in (["target missed", "succeeded"], ["early-stopped", "succeeded"])
    _, out, _ = run_cli(capsys, "jobs", "--db", url)
    header, line = out.splitlines()[:2]
    assert "failed" not in header and "target missed" in header
    assert table_row(header, line)["target missed"] == "1"


def test_jobs_shows_every_version(filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run_cli(capsys, "reset", "--db", filled_url, "--job", "cli.job", "--yes")[1]
        == "job 'cli.job' starts over as version 2\n"
    )
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "json")
    listed = json.loads(out)
    versions = [(j["job_id"], j["version"], j["active"], j["trials"]) for j in listed]
    assert versions == [
        ("cli.job", 1, False, 3),
        ("cli.job", 2, True, 0),
        ("other.job", 1, True, 1),
    ]
    assert listed[1]["config"]["job_id"] == "cli.job"
    assert listed[1]["config"] == listed[0]["config"]  # a reset keeps the configuration
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "csv")
    assert json.loads(next(csv.DictReader(io.StringIO(out)))["config"])["eta"] == 0.5
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url)
    assert [line.split()[:3] for line in out.splitlines()[1:4]] == [
        ["cli.job", "1", "3"],
        ["cli.job", "2", "(active)"],
        ["other.job", "1", "(active)"],
    ]


def test_jobs_says_where_the_energy_comes_from(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replayed job's energy total is labelled replayed, in the table and in json."""
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url)
    header, *lines = out.splitlines()
    assert header.split()[-4:] == ["missed", "energy", "time", "data"]
    assert [line.split()[-1] for line in lines[:2]] == ["replayed", "replayed"]
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--wide")
    header, *lines = out.splitlines()
    assert header.split()[-3:] == ["energy_j", "time_s", "measurement"]
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "json")
    assert [j["measurement"] for j in json.loads(out)] == ["replayed", "replayed"]


def test_reset_asks_before_starting_a_job_over(
    filled_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def versions() -> int:
        store = SQLStore(filled_url)
        count = sum(j.job_id == "cli.job" for j in list_jobs(store))
        store.engine.dispose()
        return count

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal (a script, CI)
    code, _, err = run_cli(capsys, "reset", "--db", filled_url, "--job", "cli.job")
    assert (code, versions()) == (1, 1) and "pass --yes to confirm" in err
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out, err = run_cli(capsys, "reset", "--db", filled_url, "--job", "cli.job")
    assert (code, versions()) == (1, 1) and "not reset" in err
    assert "Start job 'cli.job' over" in out
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert run_cli(capsys, "reset", "--db", filled_url, "--job", "cli.job")[0] == 0
    assert versions() == 2


def test_drop_trials_moves_the_figures_into_the_error_and_refuses_another_jobs_trial(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLStore(filled_url)
    first = list_trials(store, "cli.job")[0]
    db = ("--db", filled_url, "--job", "cli.job", "--yes")
    code, _, err = run_cli(capsys, "drop-trials", *db, "--trial", str(first.id), "--trial", "999")
    assert code == 1 and "trial(s) 999 are not trials of job 'cli.job'" in err
    assert list_trials(store, "cli.job")[0] == first  # nothing dropped
    code, out, _ = run_cli(capsys, "drop-trials", *db, "--trial", str(first.id))
    assert code == 0 and f"dropped trial(s) {first.id}" in out
    dropped = list_trials(store, "cli.job")[0]
    store.engine.dispose()
    assert (dropped.status, dropped.energy_j, dropped.cost) == ("invalid", None, None)
    assert f"'energy_j': {first.energy_j!r}" in (dropped.error or "")


def test_an_unreachable_store_is_an_error_message_not_a_traceback(
    db_backend: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zeus_airflow.core.store import sql
    from zeus_airflow.core.store.retry import RetryPolicy

    monkeypatch.setattr(sql, "RetryPolicy", lambda: RetryPolicy(attempts=1))
    code, _, err = run_cli(capsys, "jobs", "--db", unreachable_url(db_backend, tmp_path))
    assert code == 1 and err.startswith("zeus-airflow jobs: error: opening the store: ")
    assert "Traceback" not in err


def test_the_installed_command_lists_runs(filled_url: str) -> None:
    command = Path(sys.executable).parent / "zeus-airflow"
    done = subprocess.run(
        [str(command), "runs", "--db", filled_url, "--job", "cli.job", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [r["run_id"] for r in json.loads(done.stdout)] == ["run-0", "run-1", "run-2"]


def test_runs_shows_carbon_columns_once_a_trial_has_them(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from zeus_airflow.core.domain import RunCarbon

    store = SQLStore(filled_url)
    (trial,) = list_trials(store, "other.job")
    with store.reading() as conn:  # the version's key
        job_pk = conn.execute(select(jobs.c.id).where(jobs.c.job_id == "other.job")).scalar_one()
    key = RecurrenceKey(trial.run_id, trial.dag_id, trial.task_id, trial.map_index)
    store.record_carbon(
        job_pk,
        key,
        RunCarbon(
            "DE",
            12.5,
            0.31,
            210.0,
            "forecast",
            start_delay_s=5400.0,
            expected_emissions_g=11.0,
            start_reason="the midday dip",
        ),
    )
    other = [trial.id]
    store.engine.dispose()
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--job", "other.job")
    header, line = out.splitlines()[:2]
    assert header.split().index("CO2e") == header.split().index("time") + 1
    assert line[header.index("CO2e") :].split()[:2] == ["12.5", "gCO2e"]
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--job", "other.job", "--wide")
    header, line = out.splitlines()
    shown = table_row(header, line)
    assert (
        shown["carbon_zone"],
        shown["emissions_g"],
        shown["carbon_provenance"],
        shown["start_delay_s"],
        shown["expected_emissions_g"],
    ) == ("DE", "12.5", "forecast", "5400", "11")
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "json")
    listed = {r["id"]: r for r in json.loads(out)}
    assert (listed[other[0]]["energy_cost"], listed[other[0]]["start_reason"]) == (
        0.31,
        "the midday dip",
    )

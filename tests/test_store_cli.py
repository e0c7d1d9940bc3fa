"""`zeus-airflow jobs | runs | reset` on a store with real trials, SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_store import job_config, unreachable_url

from zeus_airflow.cli import main
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey, TrialRecord
from zeus_airflow.core.engine import Engine
from zeus_airflow.core.replay_training import ReplayTraining
from zeus_airflow.core.store.admin import list_jobs, list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.traces import WorkloadTrace


@pytest.fixture
def filled_url(sql_store: SQLStore, cifar_trace: WorkloadTrace) -> str:
    """Three recurrences of ``cli.job`` and one of ``other.job``, by mapped instance 2 of
    its task."""
    for job_id, runs, map_index in (("cli.job", 3, -1), ("other.job", 1, 2)):
        gpu = ReplayGPU(cifar_trace)
        engine = Engine(sql_store, gpu, job_config(cifar_trace, job_id), seed=1,
                        heartbeat_s=None)
        train = ReplayTraining(gpu, seed=1)
        for i in range(runs):
            engine.run_recurrence(train, RecurrenceKey(f"run-{i}", "dag", f"{job_id}-task",
                                                       map_index))
    return sql_store.engine.url.render_as_string(hide_password=False)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class Terminal(io.StringIO):
    """Standard input as a person at a terminal types it."""

    def isatty(self) -> bool:
        return True


def test_runs_in_every_format(filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "json")
    runs = json.loads(out)
    assert code == 0 and [r["job_id"] for r in runs] == ["cli.job"] * 3 + ["other.job"]
    assert set(runs[0]) == {f.name for f in dataclasses.fields(TrialRecord)}
    assert all(r["status"] == "succeeded" and r["energy_j"] > 0 for r in runs)
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(int(r["id"]), float(r["cost"])) for r in rows] == \
        [(r["id"], r["cost"]) for r in runs]
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--job", "other.job")
    header, *lines = out.splitlines()
    columns = header.split()
    assert columns == ["id", "job_id", "version", "task_id", "map_index", "run_id",
                       "try_number", "attempt", "status", "phase", "batch_size",
                       "power_limit_w", "energy_j", "time_s", "setup_time_s", "cpu_energy_j",
                       "dram_energy_j", "cost", "epochs", "reached_target", "stop_reason",
                       "measurement", "started_at"]
    assert len(lines) == 1
    shown = dict(zip(columns, lines[0].split(), strict=True))
    assert (shown["job_id"], shown["version"], shown["task_id"], shown["map_index"],
            shown["run_id"]) == ("other.job", "1", "other.job-task", "2", "run-0")
    assert (shown["reached_target"], shown["stop_reason"]) == ("True", "target")
    assert float(shown["setup_time_s"]) >= 0.0  # measured apart, beside training time


def test_jobs_shows_every_version(filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "reset", "--db", filled_url, "--job", "cli.job", "--yes")[1] == \
        "job 'cli.job' starts over as version 2\n"
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "json")
    listed = json.loads(out)
    versions = [(j["job_id"], j["version"], j["active"], j["trials"]) for j in listed]
    assert versions == [("cli.job", 1, False, 3), ("cli.job", 2, True, 0),
                        ("other.job", 1, True, 1)]
    assert listed[1]["config"]["job_id"] == "cli.job"
    assert listed[1]["config"] == listed[0]["config"]  # a reset keeps the configuration
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "csv")
    assert json.loads(next(csv.DictReader(io.StringIO(out)))["config"])["eta"] == 0.5
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url)
    assert [line.split()[:3] for line in out.splitlines()[1:]] == \
        [["cli.job", "1", "False"], ["cli.job", "2", "True"], ["other.job", "1", "True"]]


def test_jobs_says_where_the_energy_comes_from(filled_url: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A replayed job's energy total is labelled replayed, in the table and in json."""
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url)
    header, *lines = out.splitlines()
    columns = header.split()
    assert columns[-3:] == ["energy_j", "time_s", "measurement"]
    assert [line.split()[-1] for line in lines] == ["replayed", "replayed"]
    _, out, _ = run_cli(capsys, "jobs", "--db", filled_url, "--format", "json")
    assert [j["measurement"] for j in json.loads(out)] == ["replayed", "replayed"]


def test_reset_asks_before_starting_a_job_over(filled_url: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_an_unreachable_store_is_an_error_message_not_a_traceback(
        db_backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from zeus_airflow.core.store import sql
    from zeus_airflow.core.store.retry import RetryPolicy

    monkeypatch.setattr(sql, "RetryPolicy", lambda: RetryPolicy(attempts=1))
    code, _, err = run_cli(capsys, "jobs", "--db", unreachable_url(db_backend, tmp_path))
    assert code == 1 and err.startswith("zeus-airflow jobs: error: opening the store: ")
    assert "Traceback" not in err


def test_the_installed_command_lists_runs(filled_url: str) -> None:
    command = Path(sys.executable).parent / "zeus-airflow"
    done = subprocess.run([str(command), "runs", "--db", filled_url, "--job", "cli.job",
                           "--format", "json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [r["run_id"] for r in json.loads(done.stdout)] == ["run-0", "run-1", "run-2"]


def test_runs_shows_carbon_columns_once_a_trial_has_them(
        filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from zeus_airflow.core.domain import RunCarbon

    store = SQLStore(filled_url)
    other = [t.id for t in list_trials(store, "other.job")]
    store.record_carbon({other[0]: RunCarbon("DE", 12.5, 0.31, 210.0, "forecast",
                                             start_delay_s=5400.0, expected_emissions_g=11.0,
                                             start_reason="the midday dip")})
    store.engine.dispose()
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--job", "other.job")
    header, line = out.splitlines()
    shown = dict(zip(header.split(), line.split(), strict=True))
    assert header.split().index("carbon_zone") == header.split().index("cost") + 1
    assert (shown["carbon_zone"], shown["emissions_g"], shown["carbon_provenance"],
            shown["start_delay_s"], shown["expected_emissions_g"]) == \
        ("DE", "12.5", "forecast", "5400", "11")
    _, out, _ = run_cli(capsys, "runs", "--db", filled_url, "--format", "json")
    listed = {r["id"]: r for r in json.loads(out)}
    assert (listed[other[0]]["energy_cost"], listed[other[0]]["start_reason"]) == \
        (0.31, "the midday dip")

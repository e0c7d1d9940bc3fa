"""`zeus-airflow report`: per job and for the fleet, against Default, on real stores."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures_cli import run_cli
from fixtures_jobs import store_of_extremes
from fixtures_store import job_config

from zeus_airflow.cli import main
from zeus_airflow.core import reports
from zeus_airflow.core.common.cost import zeus_cost
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining

REQUIRED = {
    "job_id",
    "runs",
    "phase",
    "energy_j",
    "default_energy_j",
    "saved_energy_fraction",
    "cost",
    "default_cost",
    "saved_cost_fraction",
    "emissions_g",
    "measurement",
}


@pytest.fixture
def filled_url(sql_store: SQLStore, cifar_trace: WorkloadTrace) -> str:
    """Twelve daily recurrences of ``daily.job`` (with the exploration budget, so Default
    runs first) and two of ``young.job``."""
    for job_id, days in (("daily.job", 12), ("young.job", 2)):
        gpu = ReplayGPU(cifar_trace)
        config = job_config(cifar_trace, job_id, exploration_budget=0.1)
        engine = Engine(sql_store, gpu, config, seed=3, heartbeat_s=None)
        train = ReplayTraining(gpu, seed=3)
        for day in range(days):
            engine.run_recurrence(train, RecurrenceKey(f"day-{day}", "dag", f"{job_id}-task"))
    return sql_store.engine.url.render_as_string(hide_password=False)


def test_json_has_every_job_and_the_fleet(
    filled_url: str, sql_store: SQLStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "report", "--db", filled_url, "--format", "json")
    found = json.loads(out)
    jobs = {j["job_id"]: j for j in found["jobs"]}
    assert code == 0 and set(jobs) == {"daily.job", "young.job"}
    daily = jobs["daily.job"]
    assert set(daily) >= REQUIRED and daily["runs"] == 12
    assert daily["measurement"] == "replayed"  # never passed off as measured
    # The same figures the UI's summary shows: one formula for the savings.
    with sql_store.reader() as reader:
        history = reader.versions(["daily.job"])
        summary = reports.summaries(reader, [reports.current(history["daily.job"])], history)[0]
    assert daily["energy_j"] == pytest.approx(summary.energy_j)
    assert daily["default_energy_j"] == pytest.approx(summary.default_energy_j)
    assert daily["saved_energy_fraction"] == pytest.approx(
        summary.energy_saved_j / summary.default_energy_j
    )
    assert daily["default_cost"] > 0
    assert daily["saved_cost_fraction"] == pytest.approx(1 - daily["cost"] / daily["default_cost"])
    assert daily["emissions_g"] is None  # no carbon_zone: no emissions, not zero
    fleet = found["fleet"]
    assert fleet["jobs"] == 2 and fleet["runs"] == 14
    assert fleet["energy_j"] == pytest.approx(sum(j["energy_j"] for j in jobs.values()))
    compared = [j for j in jobs.values() if j["default_energy_j"] is not None]
    assert fleet["saved_energy_fraction"] == pytest.approx(
        1 - sum(j["energy_j"] for j in compared) / sum(j["default_energy_j"] for j in compared)
    )
    assert fleet["measurement"] == "replayed"


def test_since_counts_the_later_tries_only(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run_cli(capsys, "report", "--db", filled_url, "--format", "json")
    everything = json.loads(out)["jobs"]
    future = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    code, out, _ = run_cli(
        capsys,
        "report",
        "--db",
        filled_url,
        "--format",
        "json",
        "--job",
        "daily.job",
        "--since",
        future,
    )
    (later,) = json.loads(out)["jobs"]
    assert code == 0 and everything[0]["runs"] == 12
    assert (later["runs"], later["energy_j"], later["default_energy_j"]) == (0, 0.0, 0.0)


def test_table_is_readable_and_csv_keeps_raw_numbers(
    filled_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run_cli(capsys, "report", "--db", filled_url)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["job", "runs", "phase", "next"]
    daily = next(line for line in lines if line.startswith("daily.job"))
    assert " MJ " in daily or " kJ " in daily
    assert "%" in daily and "e+0" not in out
    assert any(line.startswith("fleet: 2 jobs, 14 runs") for line in lines)
    assert "replayed (the paper's traces)" in out
    assert max(map(len, lines)) <= 120
    _, out, _ = run_cli(capsys, "report", "--db", filled_url, "--format", "csv")
    rows = {r["job_id"]: r for r in csv.DictReader(io.StringIO(out))}
    assert float(rows["daily.job"]["energy_j"]) > 1e3  # J, not a rounded "1.2 MJ"


def test_bad_input_names_the_option(filled_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["report", "--db", filled_url, "--since", "last tuesday"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--since" in err and "ISO 8601" in err
    code, _, err = run_cli(capsys, "report", "--db", filled_url, "--job", "nope")
    assert code == 1 and "no job 'nope'" in err


def test_a_job_whose_default_runs_all_missed_the_target_still_has_a_default(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, capsys: pytest.CaptureFixture[str]
) -> None:
    # A target no size reaches: b0 runs to max_epochs, as Default would on such days. The
    # budget's books count those runs, so the report's Default counts the same ones.
    gpu = ReplayGPU(cifar_trace)
    config = replace(
        job_config(cifar_trace, "hard.job", exploration_budget=0.1), target_metric=0.999
    )
    engine = Engine(sql_store, gpu, config, seed=3, heartbeat_s=None)
    for day in range(3):
        result = engine.run_recurrence(
            ReplayTraining(gpu, seed=3), RecurrenceKey(f"day-{day}", "dag", "hard-task")
        )
        assert not result.reached_target
    url = sql_store.engine.url.render_as_string(hide_password=False)
    code, out, _ = run_cli(capsys, "report", "--db", url, "--format", "json")
    (job,) = json.loads(out)["jobs"]
    b0_runs = [t for t in list_trials(sql_store) if t.batch_size == config.default_batch_size]
    assert {run.stop_reason for run in b0_runs} == {"max_epochs"}
    assert code == 0 and job["default_cost"] is not None and job["default_energy_j"] > 0
    # Three recurrences, each b0's alone: Default's cost over them is the cost formula on
    # Default's energy and time (one Default: V100, 250 W, eta 0.5), close to what the
    # budget's books reckoned those runs would have cost at the maximum limit.
    assert job["runs"] == len(b0_runs) == 3
    assert job["default_cost"] == pytest.approx(
        zeus_cost(job["default_energy_j"], job["default_time_s"], config.eta, 250.0)
    )
    assert job["default_cost"] == pytest.approx(sum(run.default_cost for run in b0_runs), rel=1e-3)


# --- a store holding extreme figures (issue 35) ---------------------------------------------
def _refuse_constant(name: str) -> float:
    raise ValueError(f"not strict JSON: {name}")


def strict_json(text: str) -> object:
    """``json.loads`` as jq and JavaScript's JSON.parse read: no NaN, Infinity or -Infinity."""
    return json.loads(text, parse_constant=_refuse_constant)


def test_a_store_holding_extreme_figures_reads_them_as_missing_and_prints_strict_json(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every succeeded try of each job holds garbage: later runs still decide and train, and
    every JSON output parses strictly; the garbage counts nowhere."""
    url = sql_store.engine.url.render_as_string(hide_password=False)
    engines = store_of_extremes(sql_store, cifar_trace)
    for job_id, (engine, train) in engines.items():  # later runs decide and train
        later = engine.run_recurrence(train, RecurrenceKey("day-3", "dag", job_id))
        assert later.tries and later.final.outcome.epochs > 0, job_id
    for argv in (("report",), ("runs",), ("jobs",)):
        code, out, err = run_cli(capsys, *argv, "--db", url, "--format", "json")
        assert code == 0 and err == "", (argv, err)
        found = strict_json(out)
        assert found, argv
    code, out, _ = run_cli(capsys, "report", "--db", url, "--format", "json")
    jobs = {j["job_id"]: j for j in strict_json(out)["jobs"]}  # type: ignore[index]
    assert set(jobs) == set(engines)
    for job_id, job in jobs.items():
        # Only the later run's figures count: the garbage is missing, not summed.
        energy = job["energy_j"]
        assert energy is None or 0 <= energy < 1e15, (job_id, energy)
    for argv in (("report",), ("runs",), ("jobs",)):  # the tables print too
        assert run_cli(capsys, *argv, "--db", url)[0] == 0


def test_time_shift_savings_are_reported_apart_from_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: a deferred start's saving against starting at once, per job and for the
    fleet, in the JSON and on the table's fleet line (fixtures_fleet: every other day
    deferred from a 400 g slot into an 80 g one)."""
    from fixtures_fleet import CARBON_JOB, fleet_url

    url = fleet_url(tmp_path)
    code, out, _ = run_cli(capsys, "report", "--db", url, "--format", "json")
    assert code == 0
    found = json.loads(out)
    job = next(j for j in found["jobs"] if j["job_id"] == CARBON_JOB)
    assert job["shift_saved_emissions_g"] > 0
    # 80 g against 400 g: 80 % saved, less the setup energy the fixture's 80 g leaves out.
    assert 0.75 < job["shift_saved_emissions_fraction"] <= 0.8 + 1e-9
    fleet = found["fleet"]
    shifted = [j for j in found["jobs"] if j["shift_saved_emissions_g"] is not None]
    assert fleet["shift_saved_emissions_g"] == pytest.approx(
        sum(j["shift_saved_emissions_g"] for j in shifted)
    )
    _, table, _ = run_cli(capsys, "report", "--db", url)
    assert "shifting starts saved" in table

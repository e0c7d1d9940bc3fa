"""The carbon-aware start through the real scheduler, LocalExecutor and triggerer.

One LocalExecutor worker (parallelism 1). A first task publishes the day's forecast as a CSV
trace: a dirty grid now, a clean one from 50 s to 270 s ahead (wide, so that the 20 s run
stays inside it on a loaded machine; the scheduler has 50 s from the forecast to the training
task's plan: the 40 s it always had, and time for one task of the mapped DAG below, which
the scheduler may have queued ahead while the forecast ran). The training task plans its
start from it, defers with a date-time trigger, and the one worker slot runs a
lower-priority witness task meanwhile; the triggerer wakes the training task at the chosen
time and it trains then. A second DAG's deadline has already passed: it trains at once,
never deferring.

A third DAG maps the training task over two grid zones (``.expand(carbon_zone=[...])``,
each instance a job of its own, named by its zone). Its tasks have priority 0, below every
task of the other two, so they take the one slot when those leave it free, and the witness
keeps its place. Its own first task publishes its forecast: dirty for 90 s (time for the
other DAG's tasks and both instances' plans on a loaded machine; about 20 s here), then clean
until 320 s, each zone at its own intensity. Each instance defers, is woken in the clean
slot and trains, in one try; its delay and what shifting saved are read where a user reads
them: the XComs, the store, and ``zeus-airflow report`` (JSON and table) run as a command
on the same store.

Everything listens on 127.0.0.1, the scheduler and triggerer skip serving logs, and every
process started here is stopped at the end.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fixtures_airflow import PRISTINE_DB, TRACES
from fixtures_store import stored_trials
from scheduler_harness import airflow_home, running_servers, wait_for_runs

from zeus_airflow.core.carbon.csvtrace import parse_time
from zeus_airflow.core.common.units import show_emissions
from zeus_airflow.core.domain import TrialRecord

DEADLINE_S = 420.0
CLEAN_FROM_S, CLEAN_UNTIL_S = 50, 270
DIRTY_G, CLEAN_G = 800.0, 100.0
MAPPED_CLEAN_FROM_S, MAPPED_CLEAN_UNTIL_S = 90, 320
MAPPED_CLEAN_G = {"AA": 100.0, "BB": 200.0}
"""The mapped DAG's zones, each with its clean slot's intensity (dirty: ``DIRTY_G``)."""
ZEUS_CLI = str(Path(sys.executable).with_name("zeus-airflow"))

DAG_FILE = """
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from zeus_airflow import ZeusTrainOperator
from zeus_airflow.operators.replay import replay_job_settings, replay_train

TRACE = os.environ["ZEUS_TEST_TRACE"]
MAPPED_TRACE = os.environ["ZEUS_TEST_MAPPED_TRACE"]
START = pendulum.parse("{start}")


def publish_forecast(path, clean_g, clean_from, clean_until):
    # The day's forecast for each zone, every 10 s: dirty now, clean (the zone's
    # clean_g[zone]) from clean_from s to clean_until s.
    now = datetime.now(UTC)
    rows = ["datetime,zone,carbon_intensity_g_per_kwh"]
    for zone, grams in clean_g.items():
        for i in range(-6, 60):
            clean = clean_from <= 10 * i < clean_until
            rows.append(f"{{(now + timedelta(seconds=10 * i)).isoformat()}},{{zone}},"
                        f"{{grams if clean else {dirty_g}}}")
    Path(path).write_text("\\n".join(rows) + "\\n")


def witness():
    return datetime.now(UTC).isoformat()


with DAG("zeus_carbon_deferred", schedule="@once", start_date=START, catchup=True):
    forecast = PythonOperator(
        task_id="forecast", python_callable=publish_forecast, priority_weight=100,
        op_args=[TRACE, {{"TEST": {clean_g}}}, {clean_from}, {clean_until}])
    train = ZeusTrainOperator(
        task_id="train", train=replay_train, device="replay:v100:cifar100",
        carbon_zone="TEST", carbon_source="csv:" + TRACE, start_deadline="10min",
        expected_duration="20s", priority_weight=50, **replay_job_settings("v100", "cifar100"))
    forecast >> train
    forecast >> PythonOperator(task_id="witness", python_callable=witness, priority_weight=1)

with DAG("zeus_carbon_late", schedule="@once", start_date=START, catchup=True):
    ZeusTrainOperator(
        task_id="train", train=replay_train, device="replay:v100:cifar100",
        carbon_zone="TEST", carbon_source="fixed:300", expected_duration="20s",
        start_deadline="{{{{ (data_interval_end - macros.timedelta(days=1)).isoformat() }}}}",
        **replay_job_settings("v100", "cifar100"))

# Priority 0: below every task above, so that it takes the one slot only when they leave it.
with DAG("zeus_carbon_mapped", schedule="@once", start_date=START, catchup=True):
    PythonOperator(
        task_id="forecast", python_callable=publish_forecast, priority_weight=0,
        op_args=[MAPPED_TRACE, {mapped_clean_g}, {mapped_clean_from}, {mapped_clean_until}],
    ) >> ZeusTrainOperator.partial(
        task_id="train", train=replay_train, device="replay:v100:cifar100",
        carbon_source="csv:" + MAPPED_TRACE, start_deadline="10min", expected_duration="20s",
        map_index_template="{{{{ task.carbon_zone }}}}", priority_weight=0,
        **replay_job_settings("v100", "cifar100"),
    ).expand(carbon_zone={mapped_zones})
"""


@pytest.fixture
def airflow_env(tmp_path: Path, airflow_db: Path) -> dict[str, str]:
    home = tmp_path / "airflow"
    trace = tmp_path / "forecast.csv"
    env = airflow_home(
        home,
        PRISTINE_DB,
        parallelism=1,
        extra={
            "ZEUS_TRACES_DIR": str(TRACES),
            "ZEUS_TEST_TRACE": str(trace),
            "ZEUS_TEST_MAPPED_TRACE": str(tmp_path / "mapped-forecast.csv"),
        },
    )
    start = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    (home / "dags" / "zeus_carbon.py").write_text(
        DAG_FILE.format(
            start=start,
            clean_from=CLEAN_FROM_S,
            clean_until=CLEAN_UNTIL_S,
            clean_g=CLEAN_G,
            dirty_g=DIRTY_G,
            mapped_clean_g=MAPPED_CLEAN_G,
            mapped_clean_from=MAPPED_CLEAN_FROM_S,
            mapped_clean_until=MAPPED_CLEAN_UNTIL_S,
            mapped_zones=list(MAPPED_CLEAN_G),
        )
    )
    return env


@pytest.fixture
def servers(airflow_env: dict[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    with running_servers(airflow_env, tmp_path, DEADLINE_S, triggerer=True) as started:
        yield started


def _task_times(home: str, dag_id: str) -> dict[str, tuple[datetime, datetime, int]]:
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, start_date, end_date, try_number FROM task_instance WHERE dag_id = ?",
            (dag_id,),
        ).fetchall()
    return {task: (parse_time(start), parse_time(end), tries) for task, start, end, tries in rows}


def _xcoms(home: str, dag_id: str, task_id: str, map_index: int = -1) -> dict[str, object]:
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        return {
            key: json.loads(value)
            for key, value in db.execute(
                "SELECT key, json(value) FROM xcom "
                "WHERE dag_id = ? AND task_id = ? AND map_index = ?",
                (dag_id, task_id, map_index),
            ).fetchall()
        }


def _instances(home: str, dag_id: str, task_id: str) -> dict[int, tuple[str, int, str, int]]:
    """Each mapped instance's (state, try number, rendered map index, earlier tries kept in
    the state history), by map index."""
    with sqlite3.connect(Path(home) / "airflow.db") as db:
        rows = db.execute(
            "SELECT map_index, state, try_number, rendered_map_index FROM task_instance "
            "WHERE dag_id = ? AND task_id = ?",
            (dag_id, task_id),
        ).fetchall()
        history = dict(
            db.execute(
                "SELECT map_index, count(*) FROM task_instance_history "
                "WHERE dag_id = ? AND task_id = ? GROUP BY map_index",
                (dag_id, task_id),
            ).fetchall()
        )
    return {i: (state, tries, shown, history.get(i, 0)) for i, state, tries, shown in rows}


def _zeus_cli(env: dict[str, str], *args: str) -> str:
    """``zeus-airflow ARGS`` as a user runs it, on the servers' AIRFLOW_HOME (its embedded
    store, where the tasks recorded)."""
    done = subprocess.run(
        [ZEUS_CLI, *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _shift_saving_g(trial: TrialRecord) -> float:
    """What the run saved by starting late, from its stored figures: its energy at the
    intensity forecast for the planned slot, less at the intensity it ran at."""
    assert trial.unshifted_intensity_g_per_kwh is not None
    assert trial.carbon_intensity_g_per_kwh is not None
    kwh = (trial.energy_j + (trial.setup_energy_j or 0.0)) / 3.6e6
    return kwh * (trial.unshifted_intensity_g_per_kwh - trial.carbon_intensity_g_per_kwh)


def test_the_task_defers_frees_its_slot_and_trains_at_the_chosen_time(
    airflow_env: dict[str, str], servers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home = airflow_env["AIRFLOW_HOME"]
    deferred = wait_for_runs(home, "zeus_carbon_deferred", 1, servers, DEADLINE_S)
    late = wait_for_runs(home, "zeus_carbon_late", 1, servers, DEADLINE_S)
    mapped = wait_for_runs(home, "zeus_carbon_mapped", 1, servers, DEADLINE_S)
    server_logs = "\n".join(path.read_text() for path in tmp_path.glob("*.log"))
    assert [s for _, s in deferred + late + mapped] == ["success"] * 3, server_logs[-4000:]

    trials = stored_trials(f"sqlite:///{home}/zeus_airflow.db")
    rows = {r.dag_id: r for r in trials if r.dag_id != "zeus_carbon_mapped"}
    task_logs = {path: path.read_text() for path in Path(home, "logs").rglob("*.log")}

    # The deferred run: planned from the forecast, woken at the start of the clean window.
    pushed = _xcoms(home, "zeus_carbon_deferred", "train")
    times = _task_times(home, "zeus_carbon_deferred")
    forecast_done = times["forecast"][1]
    delay_s = float(pushed["start_delay_s"])  # type: ignore[arg-type]
    assert 0 < delay_s <= CLEAN_FROM_S, pushed
    trained_at = rows["zeus_carbon_deferred"].started_at.replace(tzinfo=UTC)
    planned_at = forecast_done  # the plan is made after the forecast task ends
    assert trained_at >= planned_at + timedelta(seconds=delay_s - 1)
    assert "cut emissions by 88 %" in str(pushed["start_reason"])
    assert pushed["carbon_intensity_g_per_kwh"] == pytest.approx(CLEAN_G)
    assert pushed["carbon_provenance"] == "file"
    row = rows["zeus_carbon_deferred"]
    assert pushed["emissions_g"] == pytest.approx(
        (row.energy_j + row.setup_energy_j) / 3.6e6 * CLEAN_G
    )
    assert (row.status, row.try_number, times["train"][2]) == ("succeeded", 1, 1)
    # The one worker slot ran the witness while the training task waited in the triggerer.
    witness_start, witness_end, _ = times["witness"]
    assert times["train"][0] < witness_start and witness_end < trained_at
    assert any(
        "deferring the start until" in text and "starting at the chosen time" in text
        for text in task_logs.values()
    )
    # The triggerer ran the date-time trigger and fired it (its log sits beside the task's).
    assert any(
        "yielding event" in text
        for path, text in task_logs.items()
        if ".trigger." in path.name and "dag_id=zeus_carbon_deferred" in str(path)
    )

    # The late run: its deadline had passed, so it trained at once and never deferred.
    late_pushed = _xcoms(home, "zeus_carbon_late", "train")
    assert late_pushed["start_delay_s"] == 0.0
    assert "has already passed" in str(late_pushed["start_reason"])
    assert late_pushed["carbon_provenance"] == "fixed"
    assert late_pushed["carbon_intensity_g_per_kwh"] == pytest.approx(300.0)
    late_times = _task_times(home, "zeus_carbon_late")["train"]
    late_trained = rows["zeus_carbon_late"].started_at.replace(tzinfo=UTC)
    assert late_trained - late_times[0] < timedelta(seconds=30)
    late_logs = [t for path, t in task_logs.items() if "dag_id=zeus_carbon_late" in str(path)]
    assert any("has already passed" in t for t in late_logs)
    assert not any("deferring the start" in t for t in late_logs)

    # The mapped DAG: each instance deferred, was woken in its zone's clean slot, trained once.
    shift_saved_g = _mapped_instances_deferred(home, trials, task_logs)

    # What a user reads: zeus-airflow report, as a command, on the same store.
    shift_saved_g["zeus_carbon_deferred.train"] = _shift_saving_g(rows["zeus_carbon_deferred"])
    shift_saved_g["zeus_carbon_late.train"] = 0.0  # it started at once
    _report_shows_the_shift_savings(airflow_env, shift_saved_g)


def _mapped_instances_deferred(
    home: str, trials: list[TrialRecord], task_logs: dict[Path, str]
) -> dict[str, float]:
    """Issue 37: the instances of ``.expand(carbon_zone=[...])`` each deferred into the clean
    slot and trained then, in their first try; each one's delay is in its XComs and in the
    store, its emissions at its own zone's clean intensity. Returns the gCO2e each one's job
    saved by shifting, by job id."""
    zones = list(MAPPED_CLEAN_G)
    forecast_done = _task_times(home, "zeus_carbon_mapped")["forecast"][1]
    # Succeeded, each in its first try: the deferral and the wake-up are one try, not two.
    assert _instances(home, "zeus_carbon_mapped", "train") == {
        i: ("success", 1, zone, 0) for i, zone in enumerate(zones)
    }
    mapped = [t for t in trials if t.dag_id == "zeus_carbon_mapped"]
    assert sorted((t.map_index, t.try_number, t.status) for t in mapped) == [
        (i, 1, "succeeded") for i in range(len(zones))
    ]
    stored = {t.map_index: t for t in mapped}
    saved: dict[str, float] = {}
    for i, zone in enumerate(zones):
        pushed = _xcoms(home, "zeus_carbon_mapped", "train", i)
        trial = stored[i]
        delay_s = float(pushed["start_delay_s"])  # type: ignore[arg-type]
        assert 0 < delay_s <= MAPPED_CLEAN_FROM_S, (zone, pushed)
        assert trial.start_delay_s == pytest.approx(delay_s)
        assert trial.job_id == f"zeus_carbon_mapped.train[{zone}]"
        assert trial.started_at.replace(tzinfo=UTC) >= forecast_done + timedelta(
            seconds=delay_s - 1
        )
        assert (pushed["carbon_zone"], pushed["carbon_provenance"]) == (zone, "file")
        assert pushed["carbon_intensity_g_per_kwh"] == pytest.approx(MAPPED_CLEAN_G[zone])
        kwh = (trial.energy_j + (trial.setup_energy_j or 0.0)) / 3.6e6
        assert pushed["emissions_g"] == pytest.approx(kwh * MAPPED_CLEAN_G[zone])
        assert trial.emissions_g == pytest.approx(pushed["emissions_g"])
        cut = re.search(r"cut emissions by (\d+) %", str(pushed["start_reason"]))
        assert cut and int(cut[1]) > 0, pushed["start_reason"]
        # Planned while the grid was dirty: had it started at once, it would have run at
        # (mostly) the dirty intensity.
        unshifted = trial.unshifted_intensity_g_per_kwh
        assert unshifted is not None and MAPPED_CLEAN_G[zone] < unshifted <= DIRTY_G, trial
        saved[trial.job_id] = _shift_saving_g(trial)
        assert saved[trial.job_id] > 0
        instance_logs = {
            p: t
            for p, t in task_logs.items()
            if "dag_id=zeus_carbon_mapped" in str(p) and f"map_index={i}" in str(p)
        }
        assert any(
            "deferring the start until" in t and "starting at the chosen time" in t
            for t in instance_logs.values()
        ), zone
        assert any("yielding event" in t for p, t in instance_logs.items() if ".trigger." in p.name)
    return saved


def _report_shows_the_shift_savings(env: dict[str, str], expected_g: dict[str, float]) -> None:
    """``zeus-airflow report --format json``: each job's gCO2e saved by shifting, and the
    fleet's, their sum; the table says so on its fleet line."""
    found = json.loads(_zeus_cli(env, "report", "--format", "json"))
    jobs = {j["job_id"]: j for j in found["jobs"]}
    assert set(jobs) == set(expected_g)
    for job_id, saved_g in expected_g.items():
        job = jobs[job_id]
        assert job["shift_saved_emissions_g"] == pytest.approx(saved_g, abs=1e-9), job
        assert job["unshifted_emissions_g"] == pytest.approx(job["emissions_g"] + saved_g)
    for job_id in ("zeus_carbon_deferred.train", *(j for j in jobs if "mapped" in j)):
        assert jobs[job_id]["shift_saved_emissions_g"] > 0
        assert 0 < jobs[job_id]["shift_saved_emissions_fraction"] < 1
    fleet = found["fleet"]
    assert fleet["shift_saved_emissions_g"] == pytest.approx(sum(expected_g.values()))
    table = " ".join(_zeus_cli(env, "report").split())  # the notes are wrapped to the terminal
    assert all(job_id in table for job_id in expected_g), table
    assert f"shifting starts saved {show_emissions(fleet['shift_saved_emissions_g'])}" in table

"""The fault suite: Zeus's own faults never fail a task that trained (the first rule).

Through real Airflow (``dag.test()``) on the fake NVML and real SQLite and PostgreSQL stores:
a store outage over the end of training, a read-only and a full SQLite file at the end, bad
carbon CSV values and an intensity server answering 503 with many retries; on the core, 120 s
of clock skew between two workers. In each, the task that trained succeeds, nothing is lost
or counted twice, the GPU's power limit is restored, and the next run proceeds at once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fixtures_airflow import FAKE_ORIGINAL_LIMIT_MW, daily, sync_dag, task_state, xcoms
from fixtures_grid import FakeElectricityMaps, Reply
from fixtures_store import FAST_RETRY, StoreOutage
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from zeus_airflow.core.domain import RecurrenceKey, TrialRecord, outbox_from_json
from zeus_airflow.core.store import sql
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine as ZeusEngine
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.operators.train import OUTBOX_KEY, ZeusTrainOperator
from zeus_airflow.testing import FakeNVML

AT_THE_END = Callable[[], None]
"""What a train function does once it has trained: the fault it leaves the store in."""


class QuickStoreOperator(ZeusTrainOperator):
    """The operator with the store's retries and lock wait cut short, so that an outage is
    given up on in a fraction of a second instead of minutes (the store is the real one)."""

    def _open_store(self) -> SQLStore:
        from zeus_airflow.hooks.store import ZeusStoreHook

        return ZeusStoreHook(zeus_conn_id=self.zeus_conn_id).get_store(
            retry=FAST_RETRY, timeout_s=0.3
        )


def fault_dag(dag_id: str, fault: AT_THE_END | None = None, **operator_args: Any) -> Any:
    """A daily job on the fake GPU whose train function trains, then (the first time only)
    leaves the store in ``fault``."""
    from airflow.sdk import DAG

    faults = [fault] if fault is not None else []

    def train(run: TrainingRun) -> str:
        for _ in run.epochs():
            for _ in run.steps(range(8)):
                time.sleep(0.001)
            run.report_metric(1.0)
        if faults:
            faults.pop()()
        return "model.pt"

    with DAG(dag_id, schedule="@daily", start_date=daily(0), catchup=False) as dag:
        QuickStoreOperator(
            task_id="train",
            train=train,
            device="auto",
            batch_sizes=[16, 32],
            default_batch_size=32,
            target_metric=1.0,
            max_epochs=1,
            warmup_steps=1,
            profile_steps=2,
            warmup_s=0.0,
            profile_s=0.0,
            heartbeat_s=5,
            **operator_args,
        )
    return sync_dag(dag)


def outbox(dag_id: str, run: Any) -> list[Any]:
    return outbox_from_json(xcoms(dag_id, run.run_id, "train")[OUTBOX_KEY])


def assert_recorded_late_once(url: str, first: Any, runs: list[Any]) -> list[TrialRecord]:
    """The first run's result reached the store from the outbox, once; every run is one
    trial, every one counted."""
    store = SQLStore(url)
    rows = list_trials(store)
    store.engine.dispose()
    assert [r.run_id for r in rows] == [first.run_id, *(r.run_id for r in runs)]
    assert [r.status for r in rows] == ["succeeded"] * len(rows)
    assert all(r.observed for r in rows)
    assert rows[0].recorded_late_at is not None and rows[0].energy_j
    assert [r.recorded_late_at for r in rows[1:]] == [None] * len(runs)
    return rows


def run_through_a_fault(
    dag_id: str,
    url: str,
    fault: AT_THE_END,
    heal: AT_THE_END,
    fake: FakeNVML,
    capfd: pytest.CaptureFixture[str],
    failure: str,
    **operator_args: Any,
) -> list[TrialRecord]:
    """Day 0 trains then meets the fault; the store heals; days 1 and 2 run."""
    dag = fault_dag(dag_id, fault, **operator_args)
    first = dag.test(logical_date=daily(0))
    assert task_state(first, "train") == ("success", 1)  # the model comes first
    assert fake.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]  # restored
    (pending,) = outbox(dag_id, first)
    assert failure in pending.failure and pending.outcome.reached_target
    log = capfd.readouterr().out  # the task's log, which dag.test() prints
    assert "kept in the outbox and the next run records it late" in log and failure in log
    pushed = xcoms(dag_id, first.run_id, "train")
    assert pushed["energy_j"] == pytest.approx(pending.outcome.energy_j)
    assert pushed["return_value"] == "model.pt"
    if "carbon_zone" in operator_args:  # over the span the worker saw
        assert pushed["carbon_provenance"] == "fixed" and pushed["emissions_g"] > 0
    heal()
    later = [dag.test(logical_date=daily(day)) for day in (1, 2)]
    assert [task_state(r, "train") for r in later] == [("success", 1)] * 2
    assert [outbox(dag_id, r) for r in later] == [[], []]  # drained by day 1, once
    assert "is recorded late: succeeded" in capfd.readouterr().out
    assert fake.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]
    return assert_recorded_late_once(url, first, later)


# --- the store at the end of training ------------------------------------------------------
pytestmark = pytest.mark.usefixtures("dag_test")


def test_a_store_outage_over_the_end_of_training_fails_nothing(
    store_outage: StoreOutage,
    fake_gpus: FakeNVML,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", store_outage.url)
    backend = make_url(store_outage.url).get_backend_name()
    run_through_a_fault(
        f"outage_{backend}",
        store_outage.url,
        store_outage.cut,
        store_outage.restore,
        fake_gpus,
        capfd,
        "gave up after 3 tries",
        carbon_zone="DE",
        carbon_source="fixed:300",
    )


@pytest.fixture
def sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite store on 512-byte pages (so that finishing a trial needs a new page, which a
    full disk refuses), found through ``$ZEUS_AIRFLOW_DB_URL``."""
    import sqlite3

    path = tmp_path / "zeus.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA page_size=512")
        conn.execute("VACUUM")
    url = f"sqlite:///{path}"
    SQLStore(url, create_schema=True).engine.dispose()
    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", url)
    return url


class SQLiteFault:
    """A fault of one SQLite file, as every connection of any engine to it sees it at the
    start of its next transaction: read-only (``PRAGMA query_only``: SQLite's own
    SQLITE_READONLY, as for a file without write permission) or full (``PRAGMA
    max_page_count`` at its current size: SQLITE_FULL, as for a full disk)."""

    def __init__(self, url: str, pragma: str) -> None:
        self.database = make_url(url).database
        self.pragma, self.on = pragma, False

    def __enter__(self) -> SQLiteFault:
        # No free page left over from the migrations (a dropped column rebuilds its table):
        # a full file has none, and a write that needs a page must grow the file.
        vacuum = create_engine(f"sqlite:///{self.database}", isolation_level="AUTOCOMMIT")
        with vacuum.connect() as conn:
            conn.exec_driver_sql("VACUUM")
        vacuum.dispose()
        event.listen(Engine, "begin", self._apply)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(Engine, "begin", self._apply)

    def cut(self) -> None:
        self.on = True

    def heal(self) -> None:
        self.on = False

    def _apply(self, conn: Any) -> None:
        if conn.engine.url.database != self.database:
            return  # Airflow's own metadata database
        if self.pragma == "query_only":
            conn.exec_driver_sql(f"PRAGMA query_only = {int(self.on)}")
            return
        size = conn.exec_driver_sql("PRAGMA page_count").scalar() if self.on else 2**30
        conn.exec_driver_sql(f"PRAGMA max_page_count = {size}")


@pytest.mark.parametrize(
    ("pragma", "failure"),
    [
        ("query_only", "attempt to write a readonly database"),
        ("max_page_count", "database or disk is full"),
    ],
)
def test_a_read_only_or_full_sqlite_store_at_the_end_fails_nothing(
    sqlite_store: str,
    fake_gpus: FakeNVML,
    capfd: pytest.CaptureFixture[str],
    pragma: str,
    failure: str,
) -> None:
    # A long DAG id (and so job id and trial row): a finished trial's row no longer fits
    # the page it was inserted on, so recording it needs a page the full file refuses.
    dag_id = f"sqlite_{pragma}_".ljust(230, "x")
    with SQLiteFault(sqlite_store, pragma) as fault:
        rows = run_through_a_fault(
            dag_id, sqlite_store, fault.cut, fault.heal, fake_gpus, capfd, failure
        )
    assert len(rows) == 3


def test_a_store_still_read_only_at_the_next_start_fails_it_fast_and_keeps_the_outbox(
    sqlite_store: str, fake_gpus: FakeNVML, capfd: pytest.CaptureFixture[str]
) -> None:
    """A fault before training still fails the task before any GPU change; the result it
    could not record either is carried on, and the run after the repair records it once."""
    with SQLiteFault(sqlite_store, "query_only") as fault:
        dag = fault_dag("still_read_only", fault.cut)
        first = dag.test(logical_date=daily(0))
        (pending,) = outbox("still_read_only", first)
        changes = len(fake_gpus.set_calls)
        blocked = dag.test(logical_date=daily(1))  # the file is still read-only
        assert task_state(blocked, "train")[0] == "failed"
        assert len(fake_gpus.set_calls) == changes  # failed before any GPU change
        assert [p.trial_id for p in outbox("still_read_only", blocked)] == [pending.trial_id]
        assert "is still not in the store" in capfd.readouterr().out
        fault.heal()
        later = dag.test(logical_date=daily(2))
    assert task_state(later, "train") == ("success", 1)
    assert outbox("still_read_only", later) == []
    store = SQLStore(sqlite_store)
    rows = list_trials(store)
    store.engine.dispose()
    assert [(r.run_id, r.status, r.observed) for r in rows] == [
        (first.run_id, "succeeded", True),
        (later.run_id, "succeeded", True),
    ]
    assert rows[0].recorded_late_at is not None and rows[1].recorded_late_at is None
    assert fake_gpus.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i needs CAP_LINUX_IMMUTABLE (root)")
def test_a_store_made_immutable_mid_training_is_not_retried(
    sqlite_store: str, fake_gpus: FakeNVML, capfd: pytest.CaptureFixture[str]
) -> None:
    """``chattr +i`` on the store's files as training ends: SQLite says "disk I/O error", once
    retried (and the task held) as a busy disk although read-only is not retried
    (docs/store.md). Now the store names the read-only file at once and the result waits in
    the outbox, as for any read-only store."""
    path = Path(make_url(sqlite_store).database or "")

    def chattr(flag: str) -> None:
        files = [p for p in path.parent.iterdir() if p.name.startswith(path.name)]
        subprocess.run(["chattr", flag, *map(str, files)], check=True)

    try:
        rows = run_through_a_fault(
            "immutable_mid_training",
            sqlite_store,
            lambda: chattr("+i"),
            lambda: chattr("-i"),
            fake_gpus,
            capfd,
            "chattr +i or a read-only mount): make it writable for the worker's user, or "
            "move the store (not retried",
        )
    finally:
        chattr("-i")
    assert len(rows) == 3


# --- the carbon source ----------------------------------------------------------------------
def carbon_fault_run(
    dag_id: str, url: str, capfd: pytest.CaptureFixture[str], **carbon: Any
) -> tuple[dict[str, Any], str]:
    """Two daily runs with a carbon source that fails: both succeed, each labelled
    ``fallback``; day 0's XComs and task log."""
    dag = fault_dag(dag_id, carbon_zone="DE", **carbon)
    first = dag.test(logical_date=daily(0))
    log = capfd.readouterr().out
    assert task_state(first, "train") == ("success", 1)
    pushed = xcoms(dag_id, first.run_id, "train")
    assert (pushed["carbon_provenance"], pushed["carbon_intensity_g_per_kwh"]) == (
        "fallback",
        pytest.approx(475.0),
    )
    assert pushed["emissions_g"] > 0 and pushed["return_value"] == "model.pt"
    second = dag.test(logical_date=daily(1))  # the next run proceeds at once
    assert task_state(second, "train") == ("success", 1)
    store = SQLStore(url)
    rows = list_trials(store)
    store.engine.dispose()
    assert [(r.status, r.observed, r.carbon_provenance) for r in rows] == [
        ("succeeded", True, "fallback")
    ] * 2
    return pushed, log


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (b"2026-01-01T01:00:00Z,DE,nan,80", "carbon intensity nan is not a finite number"),
        (b"2026-01-01T01:00:00Z,DE,inf,80", "carbon intensity inf is not a finite number"),
        (b"2026-01-01T01:00:00Z,DE,1e9,80", "is not a finite number in [0, 2000] gCO2e/kWh"),
        (b"2026-01-01T01:00:00Z,DE,\xff\xfe,80", "not UTF-8 text (byte 0xff)"),
    ],
)
def test_bad_carbon_csv_values_are_refused_before_training_and_fall_back(
    zeus_store_url: str,
    fake_gpus: FakeNVML,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    row: bytes,
    problem: str,
) -> None:
    trace = tmp_path / "grid.csv"
    trace.write_bytes(
        b"datetime,zone,carbon_intensity_g_per_kwh,price_per_mwh\n"
        b"2026-01-01T00:00:00Z,DE,300,80\n" + row + b"\n"
    )
    _, log = carbon_fault_run("bad_csv", zeus_store_url, capfd, carbon_source=f"csv:{trace}")
    said = log.index(f"{trace}, line 3: ")
    assert problem in log[said : said + 300]
    assert said < log.index("try 1: batch size")  # at plan time, before training
    assert "fall back to 475 gCO2e/kWh (provenance fallback)" in log
    assert fake_gpus.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]


def test_an_intensity_server_answering_503_with_retries_40_holds_a_task_seconds(
    zeus_store_url: str,
    fake_gpus: FakeNVML,
    electricity_maps: FakeElectricityMaps,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """retries=40 once held a task 15 min 52 s: now the client's time budget (5 s by
    default) ends the lookup after a few tries, and the run falls back, labelled."""
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_503",
        json.dumps(
            {
                "conn_type": "electricitymaps",
                "password": "tok",
                "extra": {"base_url": electricity_maps.url, "retries": 40, "cache_ttl_s": 0},
            }
        ),
    )
    electricity_maps.script(*[Reply(503, {"error": "unavailable"})] * 100)
    _, log = carbon_fault_run("em_503", zeus_store_url, capfd, carbon_conn_id="em_503")
    # Backoff 1 s, 2 s, then 4 s would pass the 5 s budget: 3 tries a lookup, not 41.
    assert len(electricity_maps.requests) == 2 * 3
    assert "HTTP 503, 3 tries, no time left in the budget" in log
    assert "the run's carbon intensity fell back to 475 gCO2e/kWh" in log


def test_a_503_intensity_server_never_holds_a_carbon_aware_start_for_long(
    zeus_store_url: str,
    fake_gpus: FakeNVML,
    electricity_maps: FakeElectricityMaps,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """retries=12 once delayed a deferred start by 222 s: planning's lookups share the same
    budget, so the run starts now, saying why."""
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_503",
        json.dumps(
            {
                "conn_type": "electricitymaps",
                "password": "tok",
                "extra": {"base_url": electricity_maps.url, "retries": 12, "cache_ttl_s": 0},
            }
        ),
    )
    electricity_maps.script(*[Reply(503, {"error": "unavailable"})] * 100)
    pushed, _ = carbon_fault_run(
        "em_503_plan",
        zeus_store_url,
        capfd,
        carbon_conn_id="em_503",
        start_deadline="8h",
        expected_duration="10min",
    )
    assert pushed["start_delay_s"] == 0.0
    assert pushed["start_reason"].startswith("no forecast (Electricity Maps")
    assert "no time left in the budget" in pushed["start_reason"]
    # Two runs, each: planning (history and forecast) and accounting, a few tries each.
    assert len(electricity_maps.requests) <= 2 * (3 + 3 + 3)


def test_electricity_maps_extras_it_cannot_use_fall_back_instead_of_failing(
    zeus_store_url: str,
    fake_gpus: FakeNVML,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_EM_MANY",
        json.dumps(
            {
                "conn_type": "electricitymaps",
                "password": "tok",
                "extra": {"base_url": "http://127.0.0.1:9", "retries": "many"},
            }
        ),
    )
    _, log = carbon_fault_run("em_many", zeus_store_url, capfd, carbon_conn_id="em_many")
    said = log.index(
        "connection 'em_many''s extras: retries='many' is invalid: expected an integer >= 0"
    )
    assert said < log.index("try 1: batch size")


# --- clock skew between workers --------------------------------------------------------------
def test_leases_are_judged_on_the_database_clock_so_skew_loses_nothing(
    sql_store: SQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers, each with a fake GPU; worker B's clock runs 120 s ahead of worker A's.
    B decides and trains while A's try is in flight, with a lease (3 heartbeats of 30 s)
    shorter than the skew: A's live try must stay live, and both count."""
    from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
    from zeus_airflow.core.devices.nvml import NVMLGPUs
    from zeus_airflow.testing import FakeGPUSpec

    config = JobConfig(
        "skew.job",
        (16, 32),
        32,
        1.0,
        1,
        exploration_budget=None,
        profiler=ProfilerConfig(warmup_steps=1, profile_steps=2, warmup_s=0.0, profile_s=0.0),
    )
    fakes = [FakeNVML(1, FakeGPUSpec(default_limit_mw=FAKE_ORIGINAL_LIMIT_MW)) for _ in range(3)]
    worker_a, worker_b, worker_c = (
        ZeusEngine(sql_store, NVMLGPUs((0,), nvml=fake), config, seed=1, heartbeat_s=30)
        for fake in fakes
    )
    ahead = [False]
    workers_clock = sql._now  # each worker's own clock, as the store used to read it

    def skewed() -> datetime:
        return workers_clock() + timedelta(seconds=120 if ahead[0] else 0)

    monkeypatch.setattr(sql, "_now", skewed)

    def steps(run: TrainingRun) -> str:
        for _ in run.epochs():
            for _ in run.steps(range(8)):
                time.sleep(0.001)
            run.report_metric(1.0)
        return "model.pt"

    def train_a(run: TrainingRun) -> str:
        ahead[0] = True  # worker B's recurrence runs while A's try is in flight
        b = worker_b.run_recurrence(steps, RecurrenceKey("b"))
        ahead[0] = False
        assert [t.outcome.reached_target for t in b.tries] == [True]
        return steps(run)

    a = worker_a.run_recurrence(train_a, RecurrenceKey("a"))
    worker_c.run_recurrence(steps, RecurrenceKey("c"))  # the next run proceeds at once
    rows = {r.run_id: r for r in list_trials(sql_store)}
    assert sorted(rows) == ["a", "b", "c"]
    assert [(rows[k].status, rows[k].observed) for k in "abc"] == [("succeeded", True)] * 3
    assert rows["a"].cost == pytest.approx(a.cost)
    # The leases were written on the database's clock: no worker's skew is in them.
    for row in rows.values():
        assert row.expires_at is not None
        assert abs((row.heartbeat_at - row.started_at).total_seconds()) < 60
    assert [fake.limits_mw() for fake in fakes] == [[FAKE_ORIGINAL_LIMIT_MW]] * 3


# --- the outbox is untrusted input (issue 35) -------------------------------------------------
def rewrite_outbox(dag_id: str, run: Any, entries: list[Any]) -> None:
    """Replace a run's outbox XCom, as a corrupted value or a forged one would."""
    from airflow.models.xcom import XComModel

    XComModel.set(OUTBOX_KEY, entries, dag_id=dag_id, task_id="train", run_id=run.run_id)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def _tampered(entry: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    return {**entry, "outcome": {**entry["outcome"], field: value}}


TAMPERING: dict[str, tuple[Callable[[dict[str, Any]], list[Any]], str]] = {
    "energy_j=nan": (
        lambda e: [_tampered(e, "energy_j", float("nan"))],
        "energy_j=",  # NaN, or None once the Execution API's JSON made it null
    ),
    "cost=-1e9": (lambda e: [_tampered(e, "cost", -1e9)], "cost=-1000000000.0 is outside"),
    "another batch size": (
        lambda e: [_tampered(e, "batch_size", 16)],
        "differs from it: batch_size=16 (the trial's: 32)",
    ),
    "garbage beside a good entry": (
        lambda e: [e, {"trial_id": "x"}],
        "not a pending result",
    ),
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_a_bad_outbox_entry_is_refused_kept_for_inspection_and_never_stored(
    case: str,
    store_outage: StoreOutage,
    fake_gpus: FakeNVML,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A pending result whose outbox entry was corrupted or forged: the later runs refuse
    it with a warning and keep it in their XCom ``zeus_outbox_refused``; nothing of it is
    stored, every run succeeds, and the reports still read the store."""
    from zeus_airflow.cli import main
    from zeus_airflow.operators.xcoms import REFUSED_KEY

    monkeypatch.setenv("ZEUS_AIRFLOW_DB_URL", store_outage.url)
    dag_id = f"tampered_{abs(hash(case))}"
    dag = fault_dag(dag_id, store_outage.cut)
    first = dag.test(logical_date=daily(0))
    assert task_state(first, "train") == ("success", 1)
    (entry,) = xcoms(dag_id, first.run_id, "train")[OUTBOX_KEY]
    make, reason = TAMPERING[case]
    rewrite_outbox(dag_id, first, make(entry))
    store_outage.restore()
    capfd.readouterr()
    later = [dag.test(logical_date=daily(day)) for day in (1, 2)]
    assert [task_state(r, "train") for r in later] == [("success", 1)] * 2
    log = capfd.readouterr().out
    assert "is refused and NOT stored" in log and reason in log
    pushed = xcoms(dag_id, later[0].run_id, "train")
    (kept,) = pushed[REFUSED_KEY]  # for inspection, as found
    assert reason in kept["refused_because"] and kept["entry"]
    assert pushed[OUTBOX_KEY] == []  # never carried on
    assert REFUSED_KEY not in xcoms(dag_id, later[1].run_id, "train")
    store = SQLStore(store_outage.url)
    rows = {r.run_id: r for r in list_trials(store)}
    store.engine.dispose()
    good = case == "garbage beside a good entry"  # the good entry is recorded all the same
    assert (rows[first.run_id].status == "succeeded") == good
    assert (rows[first.run_id].recorded_late_at is not None) == good
    for row in rows.values():  # nothing wrong stored: every finished try has its figures
        if row.status in ("succeeded", "failed"):
            assert row.energy_j is not None and row.cost is not None and row.cost >= 0
    assert main(["report", "--db", store_outage.url, "--format", "json"]) == 0
    report = capfd.readouterr().out
    assert json.loads(report, parse_constant=_refuse_constant)["jobs"]  # strict: no NaN
    assert fake_gpus.limits_mw() == [FAKE_ORIGINAL_LIMIT_MW]


def test_a_first_run_looks_for_no_outbox_and_logs_no_xcom_error(
    zeus_store_url: str, fake_gpus: FakeNVML, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every task's first run once logged Airflow's ``[error] XCom not found ... zeus_outbox``
    for a normal situation: an outbox is looked up only while a trial awaits its result."""
    dag = fault_dag("first_run_quiet")
    runs = [dag.test(logical_date=daily(day)) for day in (0, 1)]
    assert [task_state(r, "train") for r in runs] == [("success", 1)] * 2
    log = capfd.readouterr().out
    assert "XCom not found" not in log and "zeus_outbox" not in log.replace("'zeus_outbox'", "")
    assert [outbox("first_run_quiet", r) for r in runs] == [[], []]  # still pushed, empty


# --- a full disk stops the outbox's XCom write (issue 48) -----------------------------------
class ServerResponseError(Exception):
    """As Airflow's task SDK client raises it: a generic message, the cause in ``detail``."""

    def __init__(self, detail: object) -> None:
        super().__init__("Server returned error")
        self.detail = detail


@pytest.mark.parametrize(
    "error",
    [
        ServerResponseError({"reason": "(sqlite3.OperationalError) database or disk is full"}),
        OSError(28, "No space left on device"),
    ],
    ids=["api-server", "local"],
)
def test_a_full_disk_that_stops_the_outbox_write_is_named(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    from zeus_airflow.operators.xcoms import keep_outbox

    class FullTI:
        def xcom_push(self, key: str, value: Any) -> None:
            raise error

    log = logging.getLogger("zeus_airflow.test")
    with caplog.at_level(logging.ERROR, logger="zeus_airflow.test"):
        keep_outbox(FullTI(), [], log)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("Zeus: the outbox cannot be kept (a disk is full (")
    assert "free some space on the disk of Airflow's metadata database or XCom backend" in said

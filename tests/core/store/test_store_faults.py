"""Faults between the store and its database, on SQLite and PostgreSQL: unreachable at the
start (a clear error before any GPU change), lost while a result is recorded (bounded retries,
then the result kept in the outbox and recorded late, once), and a brief outage ridden out.
The whole fault suite, through Airflow, is tests/operators/test_faults.py."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fixtures_store import FAST_RETRY, StoreOutage, job_config, unreachable_url
from sqlalchemy import text

from zeus_airflow.cli import main
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey, outbox_from_json, outbox_to_json
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.location import open_store
from zeus_airflow.core.store.retry import RetryPolicy
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, TrainFunction, record_late
from zeus_airflow.core.train.gpu_lease import GPULeases
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import FakeNVML


class WatchedGPU(ReplayGPU):
    """The replay GPU, remembering every power-limit change asked of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_changes: list[tuple[int, ...]] = []

    def set_power_limits_w(self, limits_w: Sequence[int]) -> None:
        self.limit_changes.append(tuple(limits_w))
        super().set_power_limits_w(limits_w)


def cutting_after_training(outage: StoreOutage, gpu: ReplayGPU) -> TrainFunction:
    """A train function that trains, then loses the database before the result is recorded."""
    replay = ReplayTraining(gpu, seed=1)

    def train(run: TrainingRun) -> object:
        value = replay(run)
        outage.cut()
        return value

    return train


class RestoreOnFirstRetry(logging.Handler):
    """Ends the outage when the store first reports it is waiting to retry."""

    def __init__(self, outage: StoreOutage) -> None:
        super().__init__(logging.WARNING)
        self.outage = outage

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying in" in record.getMessage():
            self.outage.restore()


def test_an_unreachable_store_fails_at_start_with_a_clear_error(
    db_backend: str, tmp_path: Path
) -> None:
    with pytest.raises(StoreError) as raised:
        open_store(unreachable_url(db_backend, tmp_path), retry=FAST_RETRY)
    message = str(raised.value)
    assert "opening the store: the zeus-airflow store at" in message
    assert "[store location:" in message and "(from the given URL)" in message
    if db_backend == "postgresql":
        assert "unreachable or busy (gave up after 3 tries)" in message
        assert "zeus:***@127.0.0.1" in message and "s3cret" not in message
    else:  # a missing folder is permanent: named at once, not retried as a busy disk
        assert "does not exist" in message and "(not retried)" in message


def test_a_store_down_at_task_start_fails_before_any_gpu_change(
    store_outage: StoreOutage, cifar_trace: WorkloadTrace
) -> None:
    store = SQLStore(store_outage.url, retry=FAST_RETRY, timeout_s=0.2)
    gpu = WatchedGPU(cifar_trace)
    engine = Engine(store, gpu, job_config(cifar_trace), seed=1, heartbeat_s=None)
    store_outage.cut()
    with pytest.raises(StoreError, match=r"registering job 'store\.job'"):
        engine.run_recurrence(ReplayTraining(gpu, seed=1), RecurrenceKey("r1"))
    assert gpu.limit_changes == []


def test_a_result_that_cannot_be_recorded_waits_in_the_outbox_and_is_recorded_late_once(
    store_outage: StoreOutage,
    cifar_trace: WorkloadTrace,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = SQLStore(store_outage.url, retry=FAST_RETRY, timeout_s=0.2)
    gpu = WatchedGPU(cifar_trace)
    engine = Engine(store, gpu, job_config(cifar_trace), seed=1, heartbeat_s=None)
    train = cutting_after_training(store_outage, gpu)
    with caplog.at_level(logging.WARNING):
        result = engine.run_recurrence(train, RecurrenceKey("r1"))  # the model comes first
    (pending,) = result.unrecorded
    assert pending.outcome == result.final.outcome and pending.observed
    assert pending.trial_id == result.final.trial_id
    message = pending.failure
    for figure in (
        f"batch_size={result.batch_size} ",
        f"energy_j={result.energy_j:.6g} ",
        "reached_target=True",
    ):
        assert figure in message
    assert "gave up after 3 tries" in message and "is NOT in the store" in message
    assert (
        caplog.text.count(f"recording trial {pending.trial_id}: the store is unavailable") == 2
    )  # retried twice, with backoff
    assert "kept in the outbox" in caplog.text
    assert gpu.get_power_limits_w() == (max(cifar_trace.power_limits_w),)  # restored
    store_outage.restore()
    (trial,) = list_trials(store)
    assert (trial.status, trial.cost) == ("running", None)  # nothing counted yet
    # Drained twice (two runs at once, or a run that failed after draining): recorded once.
    outbox = outbox_from_json(outbox_to_json([pending]))
    assert record_late(store, outbox, logging.getLogger("t")) == []
    assert record_late(store, outbox, logging.getLogger("t")) == []
    (trial,) = list_trials(store)
    assert (trial.status, trial.cost, trial.observed) == ("succeeded", result.cost, True)
    assert trial.recorded_late_at is not None and trial.recorded_late_at >= trial.started_at
    assert "is recorded late: succeeded" in caplog.text
    assert store.record_late(pending) == (False, "succeeded", None)  # had its result: untouched
    (again,) = list_trials(store)
    assert again == trial
    capsys.readouterr()
    assert main(["runs", "--db", store_outage.url]) == 0  # the table shows it came late
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[-1] == "late" and row.split()[-1].startswith("20")


def test_a_brief_outage_while_recording_is_ridden_out(
    store_outage: StoreOutage, cifar_trace: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    patient = RetryPolicy(attempts=3, first_delay_s=0.1)
    store = SQLStore(store_outage.url, retry=patient, timeout_s=0.2)
    gpu = ReplayGPU(cifar_trace)
    engine = Engine(store, gpu, job_config(cifar_trace), seed=1, heartbeat_s=None)
    train = cutting_after_training(store_outage, gpu)
    retries = logging.getLogger("zeus_airflow.core.store.retry")
    healer = RestoreOnFirstRetry(store_outage)
    retries.addHandler(healer)
    try:
        with caplog.at_level(logging.WARNING):
            result = engine.run_recurrence(train, RecurrenceKey("r1"))
    finally:
        retries.removeHandler(healer)
    assert "the store is unavailable" in caplog.text
    (trial,) = list_trials(store)
    assert (trial.status, trial.cost, trial.observed) == ("succeeded", result.cost, True)
    profile = store.load_profile(result.job, result.batch_size, engine.device_info)
    assert profile.measurements  # saved once the database was back


def test_lease_writes_fail_as_store_errors_naming_the_store(
    tmp_path: Path, fake_gpus: FakeNVML
) -> None:
    """Leases are the store's: its retries and its errors, not a raw database error (the
    lease table is gone: a fault no Store method makes)."""
    store = SQLStore(
        f"sqlite:///{tmp_path}/zeus.db", retry=RetryPolicy(attempts=1), create_schema=True
    )
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE zeus_gpu_leases"))
    leases = GPULeases(store)
    with pytest.raises(
        StoreError,
        match=r"leasing GPUs' power limits: the zeus-airflow store "
        r"at sqlite:///",
    ):
        leases.acquire(NVMLGPUs((0,), nvml=fake_gpus), (250,))
    with pytest.raises(StoreError, match="reading the GPU leases of"):
        leases.on_host()


# --- a full disk is named as a full disk wherever it stops a write (issue 48) -----------------
def test_a_full_sqlite_database_is_named_when_a_result_cannot_be_recorded(
    tmp_path: Path, cifar_trace: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite's own error for a full disk (SQLITE_FULL, "database or disk is full") on the
    write of a result, where the free-space check finds room (a quota, a full tmpfs): the
    warning that keeps the result in the outbox says the disk is full, and it is not
    retried."""
    import sqlite3

    from sqlalchemy import event

    store = SQLStore(f"sqlite:///{tmp_path / 'zeus.db'}", create_schema=True, retry=FAST_RETRY)
    gpu = ReplayGPU(cifar_trace)
    engine = Engine(store, gpu, job_config(cifar_trace), seed=1, heartbeat_s=None)
    train = ReplayTraining(gpu, seed=1)

    def full(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE ZEUS_TRIALS SET STATUS"):
            raise sqlite3.OperationalError("database or disk is full")

    def fill(run: TrainingRun) -> Any:  # the disk fills while it trains
        event.listen(store.engine, "before_cursor_execute", full)
        return train(run)

    with caplog.at_level(logging.WARNING, logger="zeus_airflow"):
        result = engine.run_recurrence(fill, RecurrenceKey("r1"))
    assert result.unrecorded, "the result waits in the outbox"
    (said,) = [r.getMessage() for r in caplog.records if "kept in the outbox" in r.getMessage()]
    assert "cannot be written: its disk is full: free some space" in said
    assert "database or disk is full" in said and "retrying" not in caplog.text


def test_a_full_postgresql_disk_is_named_not_retried() -> None:
    """PostgreSQL's DiskFull (SQLSTATE 53100) is an OperationalError, which reads as
    transient: it is named and not retried."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from zeus_airflow.core.store.sql import guarded

    calls = []

    def write() -> None:
        calls.append(1)
        full = psycopg.errors.DiskFull('could not extend file "base/5/16385": No space left')
        raise OperationalError("INSERT INTO zeus_trials ...", {}, full)

    with pytest.raises(StoreError) as raised:
        guarded("postgresql://db/zeus", "recording trial 7", write, RetryPolicy(attempts=5))
    assert len(calls) == 1
    assert str(raised.value).startswith(
        "recording trial 7: the zeus-airflow store at postgresql://db/zeus cannot be written: "
        "its disk is full: free some space on the database's disk, or move the store"
    )

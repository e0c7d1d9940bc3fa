"""The ``Store`` protocol's contract (``core/store/base.py``), as its docstrings state it: each
method's happy path and each of its raises, on SQLite and on PostgreSQL (the ``db_backend``
fixture runs every test on both). The tests speak to the store through ``Store`` alone, as
the engine, the operator and the carbon code do: only the fixtures below know which
implementation they built (as Optuna's storage tests run one suite over every storage).

``gone`` is a store whose database went away after a job and a running trial were stored: a
PostgreSQL server cut off by a TCP proxy, a SQLite file whose folder was removed."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from fixtures_store import FAST_RETRY, TcpProxy, job_config
from sqlalchemy.engine import make_url

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.domain import (
    Decide,
    Decision,
    DeviceInfo,
    JobRef,
    JobState,
    PendingResult,
    PowerProfile,
    RecurrenceKey,
    RunCarbon,
    RunOutcome,
    SliceInProgress,
)
from zeus_airflow.core.store.base import LeaseRequest, Store, StoreError, UnrecordedResultError
from zeus_airflow.core.store.location import upgrade_store
from zeus_airflow.core.store.sql import SQLStore

DEVICE = DeviceInfo("V100 (replay)", 1, "replayed", (250, 200, 150))
COLUMNS = ("status", "observed", "batch_size", "energy_j", "time_s", "reached_target", "error")


def ti(run_id: str, try_number: int = 1, task_id: str = "train") -> RecurrenceKey:
    return RecurrenceKey(run_id, "dag", task_id, -1, try_number)


def outcome(batch_size: int = 32, energy_j: float = 1500.0, reached: bool = True) -> RunOutcome:
    return RunOutcome(
        batch_size,
        250,
        energy_j=energy_j,
        time_s=10.0,
        cost=1000.0,
        epochs=3,
        reached_target=reached,
        stop_reason="target" if reached else "max_epochs",
        last_metric=None,
    )


def deciding(batch_size: int = 32, phase: str = "sampling") -> Decide:
    def decide(state: JobState, rng: np.random.Generator) -> Decision:
        return Decision(batch_size, phase)  # type: ignore[arg-type]

    return decide


def begin(
    store: Store,
    job: JobRef,
    key: RecurrenceKey,
    heartbeat_s: float | None = None,
    decide: Decide | None = None,
) -> int:
    start = store.begin_trial(
        job, key, 1, decide or deciding(), DEVICE, frozenset(), heartbeat_s=heartbeat_s
    )
    return start.trial_id


def tries(store: Store, job: JobRef, key: RecurrenceKey) -> list[dict[str, object]]:
    """The run's shown tries, as the reports read them."""
    with store.reader() as reader:
        return [dict(r._mapping) for r in reader.run_tries(job.id, key, COLUMNS)]


def status_of(store: Store, job: JobRef, key: RecurrenceKey) -> str | None:
    shown = tries(store, job, key)
    return str(shown[-1]["status"]) if shown else None


# --- the stores -------------------------------------------------------------------------------
@pytest.fixture
def config(cifar_trace: WorkloadTrace) -> JobConfig:
    return job_config(cifar_trace, "contract.job")


@pytest.fixture
def store(sql_store: SQLStore) -> Store:
    return sql_store


@dataclass
class Gone:
    """A store whose database went away, and what was stored before it did."""

    store: Store
    job: JobRef
    trial_id: int


@contextmanager
def _cut_off(
    db_backend: str, migrated_url: str, tmp_path: Path
) -> Iterator[tuple[SQLStore, Callable[[], None]]]:
    """A store on a database of its own, and the switch that takes its database away."""
    if db_backend == "sqlite":
        folder = tmp_path / "gone"
        folder.mkdir()
        url = f"sqlite:///{folder / 'zeus.db'}"
        upgrade_store(url)
        store = SQLStore(url, retry=FAST_RETRY, timeout_s=0.3)

        def remove() -> None:
            store.engine.dispose()
            shutil.rmtree(folder)

        yield store, remove
        store.engine.dispose()
        return
    parsed = make_url(migrated_url)
    proxy = TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
    proxied = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    store = SQLStore(proxied, retry=FAST_RETRY, timeout_s=0.3)
    yield store, proxy.cut
    store.engine.dispose()
    proxy.close()


@pytest.fixture
def gone(db_backend: str, migrated_url: str, tmp_path: Path, config: JobConfig) -> Iterator[Gone]:
    with _cut_off(db_backend, migrated_url, tmp_path) as (store, cut):
        job = store.register_job(config, seed=1)
        trial_id = begin(store, job, ti("before"))
        cut()
        yield Gone(store, job, trial_id)


# --- register_job -----------------------------------------------------------------------------
def test_registering_the_same_job_returns_its_version(store: Store, config: JobConfig) -> None:
    first = store.register_job(config, seed=3)
    again = store.register_job(config)
    assert first.version == 1 and first.job_id == "contract.job" and first.config == config
    assert again == first


def test_settings_that_keep_what_a_cost_means_keep_the_version(
    store: Store, config: JobConfig
) -> None:
    first = store.register_job(config)
    changed = replace(config, max_tries=2)
    kept = store.register_job(changed)
    assert (kept.id, kept.version, kept.config) == (first.id, 1, changed)


def test_a_changed_configuration_starts_a_new_version(store: Store, config: JobConfig) -> None:
    first = store.register_job(config)
    second = store.register_job(replace(config, eta=0.9))
    assert second.version == 2 and second.id != first.id
    with store.reader() as reader:
        versions = reader.versions(["contract.job"])["contract.job"]
    assert [(v.version, v.active) for v in versions] == [(1, False), (2, True)]


def test_registering_raises_when_the_database_is_gone(gone: Gone, config: JobConfig) -> None:
    with pytest.raises(StoreError):
        gone.store.register_job(replace(config, job_id="contract.other"))


# --- begin_trial ------------------------------------------------------------------------------
def test_a_trial_begins_running_with_the_decision_made(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    start = store.begin_trial(job, ti("r1"), 1, deciding(64), DEVICE, frozenset())
    assert start.decision == Decision(64, "sampling")
    assert tries(store, job, ti("r1")) == [
        dict(
            status="running",
            observed=False,
            batch_size=64,
            energy_j=None,
            time_s=None,
            reached_target=None,
            error=None,
        )
    ]
    assert start.trial_id != begin(store, job, ti("r2"))


def test_a_seeded_job_draws_the_same_whichever_store_decides(
    store: Store, config: JobConfig
) -> None:
    draws: list[float] = []

    def decide(state: JobState, rng: np.random.Generator) -> Decision:
        draws.append(float(rng.random()))
        return Decision(32, "sampling")

    for job_id in ("contract.a", "contract.b"):
        job = store.register_job(replace(config, job_id=job_id), seed=11)
        begin(store, job, ti("r1"), decide=decide)
    assert len(draws) == 2 and draws[0] == draws[1]


def test_a_later_try_supersedes_the_earlier_one(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    first = begin(store, job, ti("r1", 1))
    store.finish_trial(first, outcome(), observed=True)
    begin(store, job, ti("r1", 2))
    assert tries(store, job, ti("r1", 1)) == []  # superseded: history, not shown
    assert status_of(store, job, ti("r1", 2)) == "running"


def test_beginning_a_trial_of_an_unknown_job_raises(store: Store, config: JobConfig) -> None:
    with pytest.raises(StoreError, match="not in the zeus-airflow store"):
        begin(store, JobRef(987654, "contract.job", 1, config), ti("r1"))


def test_what_decide_raises_propagates_and_registers_no_trial(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)

    def broken(state: JobState, rng: np.random.Generator) -> Decision:
        raise ZeroDivisionError("the policy broke")

    with pytest.raises(ZeroDivisionError, match="the policy broke"):
        begin(store, job, ti("r1"), decide=broken)
    assert not store.awaits_late_results(config.job_id, ti("r1"))


def test_beginning_a_trial_raises_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        begin(gone.store, gone.job, ti("after"))


# --- heartbeat --------------------------------------------------------------------------------
def test_heartbeats_keep_a_trial_from_expiring(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    beaten = begin(store, job, ti("beaten"), heartbeat_s=0.1)
    store.heartbeat(beaten, heartbeat_s=60)  # before any other decision could expire it
    begin(store, job, ti("silent"), heartbeat_s=0.1)
    time.sleep(0.5)  # three missed beats of 0.1 s: the silent trial's lease ran out
    begin(store, job, ti("later"))  # a decision expires what ran out
    assert status_of(store, job, ti("beaten")) == "running"
    assert status_of(store, job, ti("silent")) == "expired"


def test_a_heartbeat_leaves_a_finished_trial_as_it_is(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    store.finish_trial(trial, outcome(), observed=True)
    store.heartbeat(trial, heartbeat_s=60)
    store.heartbeat(987654)  # gone: nothing to do
    assert status_of(store, job, ti("r1")) == "succeeded"


def test_a_heartbeat_raises_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        gone.store.heartbeat(gone.trial_id, heartbeat_s=60)


# --- finish_trial -----------------------------------------------------------------------------
def test_a_finished_trial_keeps_its_figures_and_a_second_record_replaces_them(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    store.finish_trial(trial, outcome(energy_j=1500.0, reached=False), observed=False)
    assert tries(store, job, ti("r1"))[0] | {"error": None} == dict(
        status="failed",
        observed=False,
        batch_size=32,
        energy_j=1500.0,
        time_s=10.0,
        reached_target=False,
        error=None,
    )
    store.finish_trial(trial, outcome(energy_j=900.0), observed=True)
    [row] = tries(store, job, ti("r1"))
    assert (row["status"], row["observed"], row["energy_j"]) == ("succeeded", True, 900.0)


def test_a_replaced_trial_keeps_its_status_when_its_result_arrives(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    first = begin(store, job, ti("r1", 1))
    begin(store, job, ti("r1", 2))  # abandons the running first try
    store.finish_trial(first, outcome(), observed=True)  # kept, never counted: no error
    assert tries(store, job, ti("r1", 1)) == []
    assert status_of(store, job, ti("r1", 2)) == "running"


def test_finishing_an_unknown_trial_raises_with_its_outcome(store: Store) -> None:
    measured = outcome()
    with pytest.raises(UnrecordedResultError, match="no longer there") as raised:
        store.finish_trial(987654, measured, observed=True)
    assert raised.value.outcome == measured and raised.value.trial_id == 987654
    assert "energy_j=1500" in str(raised.value)


def test_finishing_raises_with_its_outcome_when_the_database_is_gone(gone: Gone) -> None:
    measured = outcome()
    with pytest.raises(UnrecordedResultError) as raised:
        gone.store.finish_trial(gone.trial_id, measured, observed=True)
    assert raised.value.outcome == measured


# --- record_job_phase -------------------------------------------------------------------------
def test_the_job_phase_after_a_try_is_what_the_reader_shows(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    first = begin(store, job, ti("r1"), decide=deciding(phase="pruning"))
    store.finish_trial(first, outcome(), observed=True)
    store.record_job_phase(first, "sampling")
    running = begin(store, job, ti("r2"), decide=deciding(phase="exploit"))
    with store.reader() as reader:
        latest = reader.latest_tries([job.id])[job.id]
    # The try in flight has no phase yet: the job's is the one recorded after the first.
    assert (latest.phase, latest.job_phase, latest.shown_phase) == (
        "exploit",
        "sampling",
        "sampling",
    )
    store.record_job_phase(running, "infeasible")
    with store.reader() as reader:
        latest = reader.latest_tries([job.id])[job.id]
    assert (latest.shown_phase, latest.falls_back) == ("infeasible", True)


def test_the_job_phase_of_an_unknown_trial_writes_nothing(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    store.record_job_phase(987654, "pruning")
    with store.reader() as reader:
        assert reader.latest_tries([job.id]) == {}


def test_recording_the_job_phase_raises_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        gone.store.record_job_phase(gone.trial_id, "pruning")


# --- invalidate_trial -------------------------------------------------------------------------
def test_an_invalid_trial_keeps_its_measurement_and_never_counts(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    store.invalidate_trial(trial, outcome(), "no metric reported " + "x" * 5000)
    [row] = tries(store, job, ti("r1"))
    assert (row["status"], row["observed"], row["energy_j"]) == ("invalid", False, 1500.0)
    assert isinstance(row["error"], str) and len(row["error"]) == 4000


def test_invalidating_raises_with_its_outcome_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(UnrecordedResultError) as raised:
        gone.store.invalidate_trial(gone.trial_id, outcome(), "no metric")
    assert raised.value.outcome == outcome()


# --- fail_trial -------------------------------------------------------------------------------
def test_a_failed_trial_keeps_what_it_measured_without_a_verdict(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    store.fail_trial(trial, "Traceback: ValueError", measured=outcome(energy_j=700.0))
    [row] = tries(store, job, ti("r1"))
    assert (row["status"], row["observed"], row["energy_j"]) == ("error", False, 700.0)
    assert row["reached_target"] is None and row["error"] == "Traceback: ValueError"


def test_a_skipped_trial_is_skipped(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    store.fail_trial(trial, "AirflowSkipException", skipped=True)
    [row] = tries(store, job, ti("r1"))
    assert (row["status"], row["energy_j"]) == ("skipped", None)


def test_failing_a_trial_never_raises(gone: Gone) -> None:
    gone.store.fail_trial(gone.trial_id, "Traceback", measured=outcome())
    gone.store.fail_trial(987654, "Traceback")


# --- record_late and awaits_late_results ------------------------------------------------------
def pending(job: JobRef, trial_id: int, key: RecurrenceKey, batch_size: int = 32) -> PendingResult:
    return PendingResult(
        trial_id,
        job.id,
        key,
        1,
        outcome(batch_size),
        observed=True,
        finished_at=datetime.now(UTC),
        failure="the store was down",
    )


def test_a_late_result_is_recorded_once(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    assert store.awaits_late_results(config.job_id, ti("r2"))  # any run of the task
    assert not store.awaits_late_results(config.job_id, ti("r1", task_id="other"))
    first = store.record_late(pending(job, trial, ti("r1")))
    again = store.record_late(pending(job, trial, ti("r1")))
    assert (first.recorded, first.status, first.refused) == (True, "succeeded", None)
    assert (again.recorded, again.status) == (False, "succeeded")
    assert not store.awaits_late_results(config.job_id, ti("r1"))


def test_a_late_result_that_is_not_its_trials_is_refused(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    trial = begin(store, job, ti("r1"))
    refused = store.record_late(pending(job, trial, ti("r1"), batch_size=128))
    assert not refused.recorded and refused.status == "running"
    assert refused.refused is not None and "128" in refused.refused
    gone = store.record_late(pending(job, 987654, ti("r1")))
    assert (gone.recorded, gone.status, gone.refused) == (False, None, None)


def test_late_results_raise_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        gone.store.record_late(pending(gone.job, gone.trial_id, ti("before")))
    with pytest.raises(StoreError):
        gone.store.awaits_late_results(gone.job.job_id, ti("before"))


# --- load_profile and save_profile ------------------------------------------------------------
def profile(measured: dict[int, float], partial: SliceInProgress | None = None) -> PowerProfile:
    found = PowerProfile(
        32,
        DEVICE.model,
        DEVICE.count,
        DEVICE.power_limits_w,
        {w: LimitMeasurement(w, avg_power_w, 5.0) for w, avg_power_w in measured.items()},
    )
    found.partial = partial
    return found


def test_a_profile_is_empty_until_saved_then_merged_per_limit(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    empty = store.load_profile(job, 32, DEVICE)
    assert empty.measurements == {} and empty.partial is None
    assert empty.candidates_w == DEVICE.power_limits_w
    store.save_profile(job, profile({250: 240.0, 200: 190.0}))
    store.save_profile(job, profile({200: 180.0, 175: 170.0}))  # 175: not a candidate
    loaded = store.load_profile(job, 32, DEVICE)
    assert {w: m.avg_power_w for w, m in loaded.measurements.items()} == {250: 240.0, 200: 180.0}
    assert store.load_profile(job, 64, DEVICE).measurements == {}
    other_gpus = DeviceInfo(DEVICE.model, 2, DEVICE.measurement, DEVICE.power_limits_w)
    assert store.load_profile(job, 32, other_gpus).measurements == {}


def test_a_profile_keeps_one_slice_in_progress(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    store.save_profile(job, profile({}, SliceInProgress(200, 40, 8.0, 1600.0)))
    store.save_profile(job, profile({}, SliceInProgress(150, 20, 4.0, 600.0)))
    partial = store.load_profile(job, 32, DEVICE).partial
    assert partial is not None
    assert (partial.power_limit_w, partial.steps) == (150, 20)
    assert math.isclose(partial.time_s, 4.0) and math.isclose(partial.energy_j, 600.0)


def test_profiles_raise_on_load_and_never_on_save_when_the_database_is_gone(gone: Gone) -> None:
    gone.store.save_profile(gone.job, profile({250: 240.0}))
    with pytest.raises(StoreError):
        gone.store.load_profile(gone.job, 32, DEVICE)


# --- trial_spans ------------------------------------------------------------------------------
def test_spans_are_the_finished_trials_in_utc(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    finished, running = begin(store, job, ti("r1")), begin(store, job, ti("r2"))
    store.finish_trial(finished, outcome(), observed=True)
    spans = store.trial_spans([finished, running, 987654])
    assert list(spans) == [finished]
    started_at, finished_at = spans[finished]
    assert started_at.tzinfo is not None and finished_at.utcoffset() == UTC.utcoffset(None)
    assert started_at <= finished_at <= datetime.now(UTC)


def test_spans_raise_when_the_database_is_gone_unless_none_are_asked(gone: Gone) -> None:
    assert gone.store.trial_spans([]) == {}
    with pytest.raises(StoreError):
        gone.store.trial_spans([gone.trial_id])


# --- record_carbon ----------------------------------------------------------------------------
def carbon(emissions_g: float, note: str = "") -> RunCarbon:
    return RunCarbon("DE", emissions_g, 0.12, 380.0, "forecast", note, start_delay_s=3600.0)


def test_a_runs_carbon_is_recorded_and_recording_it_again_replaces_it(
    store: Store, config: JobConfig
) -> None:
    job = store.register_job(config)
    key = ti("r1")
    store.record_carbon(job.id, key, carbon(12.5))
    store.record_carbon(job.id, key, carbon(math.nan, note="n" * 5000))
    store.record_carbon(job.id, ti("r1", 2), carbon(3.0))
    with store.reader() as reader:
        rows = reader.run_carbon(job.id)
    run = rows[("dag", "train", "r1", -1, 1)]
    assert len(rows) == 2 and rows[("dag", "train", "r1", -1, 2)].emissions_g == 3.0
    assert (run.carbon_zone, run.emissions_g, run.start_delay_s) == ("DE", None, 3600.0)
    assert len(run.carbon_note) == 4000


def test_carbon_of_an_unknown_job_raises(store: Store) -> None:
    with pytest.raises(StoreError):
        store.record_carbon(987654, ti("r1"), carbon(1.0))


def test_recording_carbon_raises_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        gone.store.record_carbon(gone.job.id, ti("before"), carbon(1.0))


# --- GPU leases -------------------------------------------------------------------------------
def lease(gpu_index: int, host: str = "node-1") -> LeaseRequest:
    return LeaseRequest(host, f"GPU-{host}-{gpu_index}", gpu_index, 250, 4242)


def test_leases_are_taken_all_at_once_or_not_at_all(store: Store) -> None:
    ids = store.acquire_leases([lease(1), lease(0)])
    assert ids is not None and len(set(ids)) == 2
    held = store.leases_on_host("node-1")
    assert [(x.id, x.gpu_index) for x in held] == [(ids[1], 0), (ids[0], 1)]
    assert held[0].acquired_at.tzinfo is not None
    assert (held[0].original_limit_w, held[0].pid, held[0].gpu_uuid) == (250, 4242, "GPU-node-1-0")
    assert store.acquire_leases([lease(2), lease(1)]) is None  # GPU 1 is leased
    assert [x.gpu_index for x in store.leases_on_host("node-1")] == [0, 1]  # 2 was not taken
    assert store.leases_on_host("node-2") == []


def test_released_leases_are_gone_and_unknown_ids_are_ignored(store: Store) -> None:
    ids = store.acquire_leases([lease(0), lease(1)])
    assert ids is not None
    store.release_leases([ids[0], 987654])
    assert [x.gpu_index for x in store.leases_on_host("node-1")] == [1]
    assert store.acquire_leases([lease(0)]) is not None


def test_leases_raise_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError):
        gone.store.leases_on_host("node-1")
    with pytest.raises(StoreError):
        gone.store.acquire_leases([lease(0)])
    with pytest.raises(StoreError):
        gone.store.release_leases([1])


# --- reader -----------------------------------------------------------------------------------
def test_the_reader_reads_what_was_written(store: Store, config: JobConfig) -> None:
    job = store.register_job(config)
    begin(store, job, ti("r1"))
    with store.reader() as reader:
        assert reader.job_dags() == {"contract.job": frozenset({"dag"})}
        assert reader.job_instances("contract.job", "dag", "train") == [-1]


def test_the_reader_raises_when_the_database_is_gone(gone: Gone) -> None:
    with pytest.raises(StoreError, match="cannot be read"), gone.store.reader() as reader:
        reader.job_dags()


def test_the_store_says_where_it_is(store: Store, db_backend: str) -> None:
    assert store.where.startswith(db_backend)

"""Trials in the store: atomic decisions, idempotency per Airflow task instance, leases, job
versions, power profiles, the decision's window. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np
import pytest
from fixtures_store import job_config
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.decide.policy import ZeusPolicy
from zeus_airflow.core.decide.snapshot import job_snapshot
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import (
    Decision,
    DeviceInfo,
    JobRef,
    JobSnapshot,
    PowerProfile,
    RecurrenceKey,
    RunOutcome,
)
from zeus_airflow.core.store.admin import list_jobs, list_trials, reset_job
from zeus_airflow.core.store.base import StoreError
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.store.state import read_state
from zeus_airflow.core.store.tables import trials
from zeus_airflow.core.train.engine import Engine, decided_by
from zeus_airflow.core.train.replay_training import ReplayTraining

ZEUS = ZeusPolicy()
DEVICE = DeviceInfo("V100 (replay)", 1, "replayed", (250, 225, 200, 175, 150, 125, 100))


def ti(run_id: str, try_number: int = 1) -> RecurrenceKey:
    return RecurrenceKey(run_id, "dag", "train", -1, try_number)


def outcome(batch_size: int, cost: float = 1000.0, reached: bool = True) -> RunOutcome:
    return RunOutcome(
        batch_size,
        250,
        energy_j=cost * 1.5,
        time_s=cost / 100,
        cost=cost,
        epochs=3,
        reached_target=reached,
        stop_reason="target" if reached else "max_epochs",
        last_metric=None,
    )


def begin(
    store: SQLStore, job: JobRef, key: RecurrenceKey, attempt: int = 1, policy: object = ZEUS
) -> tuple[int, Decision]:
    start = store.begin_trial(
        job,
        key,
        attempt,
        decided_by(policy),  # type: ignore[arg-type]
        DEVICE,
        frozenset(),
    )
    return start.trial_id, start.decision


def statuses(store: SQLStore) -> dict[int, tuple[str, bool]]:
    return {t.id: (t.status, t.observed) for t in list_trials(store)}


class Fixed:
    """A policy that always decides the same (phase and batch size chosen by the test)."""

    name = "fixed"
    has_job_phase = False

    def __init__(self, batch_size: int, phase: str) -> None:
        self.decision = Decision(batch_size, phase)  # type: ignore[arg-type]

    def decide(self, snapshot: JobSnapshot, rng: np.random.Generator) -> Decision:
        return self.decision

    def job_phase(self, snapshot: JobSnapshot) -> str | None:
        return None


@pytest.fixture
def config(cifar_trace: WorkloadTrace) -> JobConfig:
    return job_config(cifar_trace)


# --- atomic decisions -------------------------------------------------------------------------
def test_an_overlapping_run_sees_the_trial_in_flight(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config, seed=1)
    first, explored = begin(sql_store, job, ti("r1"))
    assert explored == Decision(config.default_batch_size, "pruning")
    # While b0's outcome is pending, a second run takes the best known size, not b0's walk.
    _, overlapping = begin(sql_store, job, ti("r2"))
    assert overlapping.phase == "concurrent"
    sql_store.finish_trial(first, outcome(config.default_batch_size), observed=True)
    _, after = begin(sql_store, job, ti("r3"))
    below = max(b for b in config.batch_sizes if b < config.default_batch_size)
    assert after == Decision(below, "pruning", early_stop_cost=config.beta * 1000.0)
    assert [t.decision_seq for t in list_trials(sql_store)] == [1, 2, 3]


def test_the_database_refuses_a_second_live_trial_for_one_try(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config)
    trial_id, _ = begin(sql_store, job, ti("r1"))
    with sql_store.engine.connect() as conn:
        row = conn.execute(select(trials).where(trials.c.id == trial_id)).mappings().one()
    copy = {k: v for k, v in row.items() if k != "id"}
    for clash in ({"decision_seq": 99}, {"run_id": "r2"}):  # same try / same decision
        with pytest.raises(IntegrityError), sql_store.transaction() as conn:
            conn.execute(insert(trials).values({**copy, **clash}))
    with sql_store.transaction() as conn:  # another attempt of the try is fine
        conn.execute(insert(trials).values({**copy, "decision_seq": 2, "attempt": 2}))


# --- idempotency per Airflow task instance ----------------------------------------------------
def test_a_retry_supersedes_a_finished_try_and_only_the_retry_counts(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config, seed=1)
    first, decision = begin(sql_store, job, ti("r1", try_number=1))
    sql_store.finish_trial(first, outcome(decision.batch_size, 1000.0), observed=True)
    retry, again = begin(sql_store, job, ti("r1", try_number=2))
    # The finished exploration step keeps its place in the pruning walk: the retry goes on
    # with the walk instead of exploring b0 a second time.
    assert again.phase == "pruning" and again.batch_size < config.default_batch_size
    sql_store.finish_trial(retry, outcome(again.batch_size, 900.0), observed=True)
    assert statuses(sql_store) == {first: ("superseded", False), retry: ("succeeded", True)}


def test_a_retry_abandons_a_try_still_running_and_its_late_result_never_counts(
    sql_store: SQLStore, config: JobConfig, caplog: pytest.LogCaptureFixture
) -> None:
    job = sql_store.register_job(config, seed=1)
    first, decision = begin(sql_store, job, ti("r1", try_number=1))
    retry, again = begin(sql_store, job, ti("r1", try_number=2))
    assert again == decision  # the abandoned try is neither in flight nor in the walk
    sql_store.finish_trial(first, outcome(decision.batch_size), observed=True)
    assert "finished after it was abandoned" in caplog.text
    assert statuses(sql_store) == {first: ("abandoned", False), retry: ("running", False)}
    rows = {t.id: t for t in list_trials(sql_store)}
    assert rows[first].cost == 1000.0  # kept for history


def test_running_the_same_try_again_replaces_it(sql_store: SQLStore, config: JobConfig) -> None:
    job = sql_store.register_job(config, seed=1)
    first, decision = begin(sql_store, job, ti("r1"))
    sql_store.finish_trial(first, outcome(decision.batch_size), observed=True)
    second, _ = begin(sql_store, job, ti("r1"))
    sql_store.finish_trial(second, outcome(decision.batch_size, 800.0), observed=True)
    assert statuses(sql_store) == {first: ("superseded", False), second: ("succeeded", True)}


def test_recording_a_trial_twice_replaces_its_figures(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config, seed=1)
    trial_id, decision = begin(sql_store, job, ti("r1"))
    sql_store.finish_trial(trial_id, outcome(decision.batch_size, 1000.0), observed=True)
    sql_store.finish_trial(trial_id, outcome(decision.batch_size, 700.0), observed=True)
    (row,) = list_trials(sql_store)
    assert (row.status, row.cost, row.energy_j, row.observed) == ("succeeded", 700.0, 1050.0, True)


# --- leases -----------------------------------------------------------------------------------
def test_a_trial_without_heartbeats_expires_and_its_size_is_explored_again(
    migrated_url: str, config: JobConfig
) -> None:
    store = SQLStore(migrated_url, lease_s=0.3)
    job = store.register_job(config, seed=1)
    lost, decision = begin(store, job, ti("r1"))
    time.sleep(0.4)
    _, retaken = begin(store, job, ti("r2"))
    assert retaken == decision  # pruning goes on: b0 again, not "concurrent"
    store.finish_trial(lost, outcome(decision.batch_size), observed=True)
    # Another worker has explored its size meanwhile: the late step stays out of the walk.
    assert statuses(store)[lost] == ("expired", False)
    store.engine.dispose()


def test_heartbeats_keep_a_long_trial_alive(migrated_url: str, config: JobConfig) -> None:
    store = SQLStore(migrated_url, lease_s=0.5)
    job = store.register_job(config, seed=1)
    alive, _ = begin(store, job, ti("r1"))
    for _ in range(4):
        time.sleep(0.2)
        store.heartbeat(alive)
    _, overlapping = begin(store, job, ti("r2"))
    assert overlapping.phase == "concurrent"
    assert statuses(store)[alive] == ("running", False)
    store.engine.dispose()


def test_the_late_result_of_an_expired_sampling_trial_is_taken_back(
    migrated_url: str, config: JobConfig
) -> None:
    store = SQLStore(migrated_url, lease_s=0.2)
    job = store.register_job(config, seed=1)
    sampling = Fixed(config.default_batch_size, "sampling")
    slow, _ = begin(store, job, ti("r1"), policy=sampling)
    time.sleep(0.3)
    begin(store, job, ti("r2"), policy=sampling)
    assert statuses(store)[slow] == ("expired", False)
    store.finish_trial(slow, outcome(config.default_batch_size), observed=True)
    assert statuses(store)[slow] == ("succeeded", True)  # a real measurement, not a step
    store.engine.dispose()


def test_an_errored_trial_is_kept_and_its_size_explored_again(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config, seed=1)
    broken, decision = begin(sql_store, job, ti("r1"))
    sql_store.fail_trial(broken, "Traceback ...\nValueError: bad batch")
    _, next_decision = begin(sql_store, job, ti("r2"))
    assert next_decision == decision
    (row, _) = list_trials(sql_store)
    assert (row.status, row.observed, row.error) == (
        "error",
        False,
        "Traceback ...\nValueError: bad batch",
    )


# --- job versions -----------------------------------------------------------------------------
def test_a_changed_configuration_starts_a_new_version_and_keeps_the_history(
    sql_store: SQLStore, config: JobConfig
) -> None:
    v1 = sql_store.register_job(config, seed=1)
    trial_id, decision = begin(sql_store, v1, ti("r1"))
    sql_store.finish_trial(trial_id, outcome(decision.batch_size), observed=True)
    changed = JobConfig(**{**config.__dict__, "eta": 0.8})
    v2 = sql_store.register_job(changed, seed=1)
    assert (v2.version, v2.id != v1.id) == (2, True)
    # Nothing of version 1 leaks into version 2's decisions: pruning starts over.
    assert begin(sql_store, v2, ti("r2"))[1] == Decision(config.default_batch_size, "pruning")
    assert sql_store.register_job(changed).id == v2.id  # unchanged: same version
    # Settings that do not change what a cost means update the version in place.
    assert sql_store.register_job(JobConfig(**{**changed.__dict__, "max_tries": 2})).id == v2.id
    versions = [(j.version, j.active, j.trials, j.counted) for j in list_jobs(sql_store)]
    assert versions == [(1, False, 1, 1), (2, True, 1, 0)]
    assert sql_store.register_job(config).version == 3  # going back is a change too


def test_reset_starts_the_job_over_as_a_new_version(sql_store: SQLStore, config: JobConfig) -> None:
    v1 = sql_store.register_job(config, seed=7)
    trial_id, decision = begin(sql_store, v1, ti("r1"))
    sql_store.finish_trial(trial_id, outcome(decision.batch_size), observed=True)
    assert reset_job(sql_store, config.job_id).version == 2
    v2 = sql_store.register_job(config, seed=123)  # the engine passes its seed every time
    assert v2.version == 2
    assert begin(sql_store, v2, ti("r2"))[1] == Decision(config.default_batch_size, "pruning")
    assert [t.version for t in list_trials(sql_store, config.job_id)] == [1, 2]
    with pytest.raises(
        StoreError,
        match=r"job 'nope' is not in the store .* known jobs: "
        r"store\.job",
    ):
        reset_job(sql_store, "nope")


# --- power profiles ---------------------------------------------------------------------------
def test_power_profiles_merge_measurements_per_limit(
    sql_store: SQLStore, config: JobConfig
) -> None:
    job = sql_store.register_job(config)
    limits = DEVICE.power_limits_w

    def profile(measured: dict[int, float], model: str = DEVICE.model) -> PowerProfile:
        return PowerProfile(
            256, model, 1, limits, {w: LimitMeasurement(w, p, 10.0) for w, p in measured.items()}
        )

    sql_store.save_profile(job, profile({250: 240.0, 225: 220.0}))
    sql_store.save_profile(job, profile({225: 221.0, 200: 199.0}))  # another worker's slice
    sql_store.save_profile(job, profile({250: 111.0}, model="A40"))
    loaded = sql_store.load_profile(job, 256, DEVICE)
    assert {w: m.avg_power_w for w, m in loaded.measurements.items()} == {
        250: 240.0,
        225: 221.0,
        200: 199.0,
    }
    assert sql_store.load_profile(job, 512, DEVICE).measurements == {}


# --- what a decision reads ----------------------------------------------------------------------
def test_the_decision_reads_each_arms_newest_observations(
    sql_store: SQLStore, config: JobConfig
) -> None:
    windowed = JobConfig(**{**config.__dict__, "window_size": 2})
    job = sql_store.register_job(windowed)
    fixed = {b: Fixed(b, "sampling") for b in (256, 512)}
    costs = {256: [500.0, 400.0, 300.0, 350.0], 512: [900.0, 100.0, 800.0]}
    for i in range(4):
        for b, series in costs.items():
            if i < len(series):
                trial_id, _ = begin(sql_store, job, ti(f"r{b}-{i}"), policy=fixed[b])
                sql_store.finish_trial(
                    trial_id, outcome(b, series[i], reached=b == 256), observed=True
                )
    with sql_store.reading() as conn:
        snapshot = job_snapshot(read_state(conn, job, DEVICE, frozenset()))
        unwindowed = job_snapshot(
            read_state(conn, JobRef(job.id, job.job_id, job.version, config), DEVICE, frozenset())
        )
    assert {b: (a.count, a.mean) for b, a in snapshot.observations.items()} == {
        256: (2, 325.0),
        512: (2, 450.0),
    }
    # The mean of 256's successes within its window (512 never reached the target).
    assert snapshot.success_mean_cost == {256: 325.0}
    assert {b: (a.count, a.mean) for b, a in unwindowed.observations.items()} == {
        256: (4, pytest.approx(387.5)),
        512: (3, 600.0),
    }
    assert unwindowed.success_mean_cost == {256: pytest.approx(387.5)}


def test_the_engine_decides_on_this_database_as_on_the_in_memory_store(
    sql_store: SQLStore, cifar_trace: WorkloadTrace
) -> None:
    config = job_config(cifar_trace, window_size=5)

    def decisions(store: SQLStore) -> list[tuple[int, str, int]]:
        gpu = ReplayGPU(cifar_trace)
        engine = Engine(store, gpu, config, seed=3, heartbeat_s=None)
        train = ReplayTraining(gpu, seed=3)
        return [
            (t.outcome.batch_size, t.phase, t.outcome.power_limit_w)
            for i in range(12)
            for t in engine.run_recurrence(train, ti(f"r{i}")).tries
        ]

    expected = decisions(SQLStore.in_memory())
    assert decisions(sql_store) == expected
    assert {phase for _, phase, _ in expected} >= {"pruning", "sampling"}


def test_two_tasks_sharing_a_job_id_with_different_settings_are_named(
    sql_store: SQLStore, cifar_trace: WorkloadTrace, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 48: each run of either task starts a new version; the warning names both tasks,
    what differs and the fix."""
    gpu = ReplayGPU(cifar_trace)
    train = ReplayTraining(gpu, seed=1)
    shared = job_config(cifar_trace, "retrain")
    other = replace(shared, max_epochs=shared.max_epochs + 10)
    with caplog.at_level(logging.WARNING):
        for day, (dag_id, config) in enumerate([("dag_a", shared), ("dag_b", other)] * 2):
            engine = Engine(sql_store, gpu, config, seed=1, heartbeat_s=None)
            engine.run_recurrence(train, RecurrenceKey(f"day-{day}", dag_id, "train"))
    changed = [r.getMessage() for r in caplog.records if "configuration changed" in r.getMessage()]
    assert len(changed) == 3
    assert changed[-1] == (
        "job retrain: configuration changed, starting version 4 (the history of version 3 "
        "stays visible but no longer counts). Tasks dag_a.train and dag_b.train share job_id "
        f"'retrain' with different settings (max_epochs: {shared.max_epochs} vs "
        f"{other.max_epochs}): each run of either starts a new version, so the job never "
        "learns. Give each task its own job_id (the default, <dag_id>.<task_id>), or the same "
        'settings (docs/store.md, "Changing a job\'s configuration")'
    )

"""What the UI reads from the store (``core/reports.py``): a SQLite store filled by the real
engine replaying a paper workload, and small ones written row by row, on SQLite and on
PostgreSQL, where a figure must come out exact. Airflow-free, like the module."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from fixtures_store import insert_profile_point, insert_trial, job_config

from zeus_airflow.core import reports
from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey, TrialRecord
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.core.train.replay_training import ReplayTraining

RECURRENCES = 20
JOB = "d.t"


@pytest.fixture(scope="module")
def replayed() -> SQLStore:
    """20 recurrences of V100 cifar100: pruning, a run with three tries, then sampling."""
    trace = load_workload_trace(resolve_traces_dir(), "v100", "cifar100")
    gpu = ReplayGPU(trace)
    config = job_config(trace, JOB)  # the paper's walk: no exploration budget
    store = SQLStore.in_memory()
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    train = ReplayTraining(gpu, 1)
    for i in range(RECURRENCES):
        engine.run_recurrence(train, RecurrenceKey(run_id=f"r{i:02d}", dag_id="d", task_id="t"))
    return store


def detail_of(store: SQLStore, job_id: str = JOB) -> reports.JobDetail:
    """The job's current version, as the job page reads it."""
    with store.reader() as reader:
        history = reader.versions([job_id])
        summary = reports.summaries(reader, [reports.current(history[job_id])], history)[0]
        return reports.detail(reader, summary)


def summary_of(store: SQLStore, job_id: str = JOB) -> reports.JobSummary:
    return detail_of(store, job_id).summary


def trial_rows(store: SQLStore) -> list[TrialRecord]:
    return sorted(list_trials(store), key=lambda t: t.decision_seq)


def test_a_run_is_a_task_instance_with_its_tries_summed(replayed: SQLStore) -> None:
    detail, rows = detail_of(replayed), trial_rows(replayed)
    assert [r.run_id for r in detail.runs] == [f"r{i:02d}" for i in range(RECURRENCES)]
    assert [r.index for r in detail.runs] == list(range(1, RECURRENCES + 1))
    multi = [r for r in detail.runs if r.tries > 1]
    assert multi, "the replay should include a run whose first batch sizes missed the target"
    for run in detail.runs:
        mine = [t for t in rows if t.run_id == run.run_id]
        assert run.batch_sizes == tuple(t.batch_size for t in mine)
        assert run.energy_j == pytest.approx(sum(t.energy_j for t in mine))
        assert run.time_s == pytest.approx(sum(t.time_s for t in mine))
        assert run.epochs == sum(t.epochs for t in mine)
        assert (run.power_limit_w, run.reached_target, run.status) == (
            mine[-1].power_limit_w,
            mine[-1].reached_target,
            mine[-1].status,
        )
        assert run.measurement == "replayed"
    assert all(
        not t.reached_target
        for r in multi
        for t in rows
        if t.run_id == r.run_id and t.batch_size != r.batch_size
    )


def test_summary_totals_the_trials_and_knows_the_phase(replayed: SQLStore) -> None:
    s, rows = summary_of(replayed), trial_rows(replayed)
    assert (s.runs, s.finished_runs) == (RECURRENCES, RECURRENCES)
    assert s.energy_j == pytest.approx(sum(t.energy_j for t in rows))
    assert s.time_s == pytest.approx(sum(t.time_s for t in rows))
    assert s.tasks == (("d", "t"),) and s.measurements == ("replayed",)
    assert s.phase == "sampling" and rows[-1].phase == "sampling"
    assert s.best_power_limit_w == next(
        t.power_limit_w for t in reversed(rows) if t.batch_size == s.best_batch_size
    )


def test_arms_are_what_thompson_sampling_draws_from(replayed: SQLStore) -> None:
    detail, rows = detail_of(replayed), trial_rows(replayed)
    for arm in detail.arms:
        costs = [t.cost for t in rows if t.batch_size == arm.batch_size and t.observed]
        assert arm.observations == len(costs)
        if not costs:
            assert arm.posterior_mean is None and arm.posterior_sd is None
            continue
        # flat prior: the posterior mean is the mean observed cost, and never certain
        assert arm.posterior_mean == pytest.approx(sum(costs) / len(costs))
        assert arm.mean_cost == pytest.approx(sum(costs) / len(costs))
        assert arm.posterior_sd is not None and arm.posterior_sd > 0
    in_play = [a for a in detail.arms if not a.pruned and a.observations]
    assert detail.summary.best_batch_size == min(in_play, key=lambda a: a.mean_cost or 0).batch_size
    failed_pruning = {t.batch_size for t in rows if t.phase == "pruning" and not t.reached_target}
    assert failed_pruning and all(a.pruned for a in detail.arms if a.batch_size in failed_pruning)


def test_a_job_another_policy_explored_is_reported_without_zeus_pruning() -> None:
    """Grid search (the simulator's baseline) tries b0 at every limit, a history the Zeus
    pruning rounds never ask for: the reports show its last phase and every arm in play
    rather than failing. Only that error is caught, so other failures still surface."""
    from zeus_airflow.core.decide.policy import GridSearchPolicy

    trace = load_workload_trace(resolve_traces_dir(), "v100", "cifar100")
    gpu = ReplayGPU(trace)
    config = JobConfig(
        "grid.t",
        trace.batch_sizes,
        trace.default_batch_size,
        trace.workload.target_metric,
        trace.workload.max_epochs,
        trace.workload.higher_is_better,
    )
    store = SQLStore.in_memory()
    engine = Engine(store, gpu, config, GridSearchPolicy(), seed=1, heartbeat_s=None)
    for i in range(3):
        engine.run_recurrence(ReplayTraining(gpu, 1), RecurrenceKey(f"r{i}", "grid", "t"))
    assert [t.batch_size for t in trial_rows(store)] == [trace.default_batch_size] * 3
    detail = detail_of(store, "grid.t")
    assert (detail.summary.phase, detail.summary.best_batch_size) == ("grid", None)
    assert [a.batch_size for a in detail.arms if not a.pruned] == list(trace.batch_sizes)


def test_more_observations_narrow_an_arms_spread(replayed: SQLStore) -> None:
    arms = [a for a in detail_of(replayed).arms if a.observations and a.mean_cost]
    relative = {a.observations: (a.posterior_sd or 0) / (a.mean_cost or 1) for a in arms}
    most, fewest = max(relative), min(relative)
    assert most > fewest and relative[most] < relative[fewest]


def test_profile_points_are_the_stored_profile(replayed: SQLStore) -> None:
    points = detail_of(replayed).profile
    with replayed.reader() as reader:
        (version,) = reader.versions([JOB])[JOB]
        stored = reader.profile_points(version.pk)  # (batch size, model, count, limit, ...)
    assert len(points) == len(stored) > 0
    assert {(p.batch_size, p.power_limit_w) for p in points} == {(r[0], r[3]) for r in stored}
    assert all(p.samples_per_s == pytest.approx(p.steps_per_s * p.batch_size) for p in points)


# --- row by row -----------------------------------------------------------------------------------
B0, OTHER = 64, 32
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(sql_store: SQLStore) -> SQLStore:
    """An empty store, on SQLite and on PostgreSQL (``fixtures_store``)."""
    return sql_store


def add_job(store: SQLStore, job_id: str = "j") -> int:
    config = JobConfig(job_id, (OTHER, B0), B0, target_metric=0.9, max_epochs=10)
    return store.register_job(config, seed=1).id


def add_trial(
    store: SQLStore,
    job_pk: int,
    run_id: str,
    batch_size: int,
    *,
    status: str = "succeeded",
    energy_j: float | None = 1000.0,
    time_s: float = 100.0,
    limit_w: int = 150,
    try_number: int = 1,
    attempt: int = 1,
    dag_id: str = "d",
    phase: str = "pruning",
    stop_reason: str | None = None,
) -> None:
    """A try as the engine stores it; one that succeeded stopped at the target, one that
    failed was stopped early unless ``stop_reason`` says otherwise."""
    finished = energy_j is not None
    insert_trial(
        store,
        job_pk,
        dag_id=dag_id,
        task_id="t",
        run_id=run_id,
        map_index=-1,
        try_number=try_number,
        attempt=attempt,
        status=status,
        phase=phase,
        batch_size=batch_size,
        power_limit_w=limit_w,
        energy_j=energy_j,
        time_s=time_s if finished else None,
        cost=energy_j,
        epochs=3 if finished else None,
        stop_reason=stop_reason or ("target" if status == "succeeded" else None),
        # a try that raised keeps its figures without a verdict (engine.fail_trial)
        reached_target=(status == "succeeded") if finished and status != "error" else None,
        observed=status == "succeeded",
        measurement="measured",
        gpu_model="A40",
        gpu_count=1,
        started_at=NOW,
        heartbeat_at=NOW,
        # a measured try's time fits in its own wall clock (store/state.py reads one that
        # does not as missing)
        finished_at=NOW + timedelta(seconds=time_s) if finished else None,
    )


def add_profile(
    store: SQLStore, job_pk: int, limit_w: int, power_w: float, steps_per_s: float
) -> None:
    insert_profile_point(
        store,
        job_pk,
        batch_size=B0,
        gpu_model="A40",
        gpu_count=1,
        power_limit_w=limit_w,
        avg_power_w=power_w,
        steps_per_s=steps_per_s,
    )


def test_default_estimate_scales_b0s_successes_to_the_maximum_limit(store: SQLStore) -> None:
    job = add_job(store)
    add_trial(store, job, "r1", B0, energy_j=1000.0, time_s=100.0)
    add_trial(store, job, "r2", B0, energy_j=1200.0, time_s=110.0)
    add_trial(store, job, "r3", B0, status="failed", energy_j=5000.0, time_s=900.0)
    add_trial(store, job, "r4", OTHER, energy_j=700.0, time_s=120.0)
    add_profile(store, job, 250, power_w=200.0, steps_per_s=10.0)  # 20 J and 0.1 s a step
    add_profile(store, job, 150, power_w=120.0, steps_per_s=8.0)  # 15 J and 0.125 s a step

    s = summary_of(store, "j")
    assert s.default is not None
    assert (s.default.batch_size, s.default.power_limit_w) == (B0, 250)
    # The early-stopped b0 run is left out: Default would have trained on.
    assert (s.default.runs, s.default.scaled_runs) == (2, 2)
    assert s.default.energy_j == pytest.approx(1100.0 * 20 / 15)
    assert s.default.time_s == pytest.approx(105.0 * 0.1 / 0.125)
    assert s.finished_runs == 4
    assert s.default_energy_j == pytest.approx(4 * 1100.0 * 20 / 15)
    assert s.energy_saved_j == pytest.approx(4 * 1100.0 * 20 / 15 - (1000 + 1200 + 5000 + 700))


def test_without_a_profile_b0_counts_as_measured_and_without_a_complete_run_there_is_none(
    store: SQLStore,
) -> None:
    job = add_job(store)
    add_trial(store, job, "r1", B0, status="failed", energy_j=900.0)
    assert summary_of(store, "j").default is None
    assert summary_of(store, "j").energy_saved_j is None
    # A b0 run that trained to max_epochs is what Default would have run that day.
    add_trial(store, job, "r0", B0, status="failed", energy_j=700.0, stop_reason="max_epochs")
    assert summary_of(store, "j").default.energy_j == 700.0  # type: ignore[union-attr]
    add_trial(store, job, "r2", B0, energy_j=800.0, time_s=50.0)
    d = summary_of(store, "j").default
    assert d is not None and (d.energy_j, d.time_s, d.scaled_runs, d.power_limit_w) == (
        750.0,
        75.0,
        0,
        None,
    )


def test_a_retry_after_an_error_replaces_the_errored_try(store: SQLStore) -> None:
    job = add_job(store)
    add_trial(store, job, "r1", B0, status="error", energy_j=None)
    add_trial(store, job, "r1", OTHER, energy_j=600.0, try_number=2)
    add_trial(store, job, "r2", B0, status="superseded", energy_j=999.0)
    add_trial(store, job, "r2", B0, energy_j=500.0, try_number=2)
    add_trial(store, job, "r3", B0, status="error", energy_j=None)
    add_trial(store, job, "r4", B0, status="running", energy_j=None)

    runs = detail_of(store, "j").runs
    assert [(r.run_id, r.try_number, r.status, r.energy_j) for r in runs] == [
        ("r1", 2, "succeeded", 600.0),
        ("r2", 2, "succeeded", 500.0),
        ("r3", 1, "error", None),
        ("r4", 1, "running", None),
    ]
    s = summary_of(store, "j")
    assert (s.runs, s.finished_runs, s.energy_j) == (4, 2, 1100.0)


def test_a_run_still_trying_has_not_missed_its_target_yet(store: SQLStore) -> None:
    """Try 1 early-stopped, try 2 still training: the run is in flight, not a missed target
    (the page drew it as a red 'target not reached' dot while it ran)."""
    job = add_job(store)
    add_trial(store, job, "r1", OTHER, status="failed", energy_j=700.0)
    add_trial(store, job, "r1", B0, status="running", energy_j=None, attempt=2)
    (run,) = detail_of(store, "j").runs
    assert (run.status, run.batch_sizes, run.energy_j) == ("running", (OTHER, B0), 700.0)
    assert run.reached_target is None
    add_trial(store, job, "r2", OTHER, status="failed", energy_j=700.0)
    assert detail_of(store, "j").runs[1].reached_target is False  # finished: missed
    # A run whose first try has figures while its second trains is not finished yet: the
    # Default estimate must not count a Default run for it.
    assert summary_of(store, "j").finished_runs == 1


def test_a_run_whose_last_try_raised_keeps_its_energy_without_a_verdict(store: SQLStore) -> None:
    job = add_job(store)
    add_trial(store, job, "r1", OTHER, status="failed", energy_j=700.0)
    add_trial(store, job, "r1", B0, status="error", energy_j=250.0, attempt=2)
    (run,) = detail_of(store, "j").runs
    assert (run.status, run.energy_j, run.reached_target) == ("error", 950.0, None)
    assert summary_of(store, "j").energy_j == 950.0  # spent energy is never lost


def test_jobs_know_their_dags_and_tasks_their_job(store: SQLStore) -> None:
    alpha, shared, fresh = (
        add_job(store, "alpha.t"),
        add_job(store, "shared"),
        add_job(store, "fresh.t"),
    )
    add_trial(store, alpha, "r1", B0, dag_id="alpha")
    add_trial(store, shared, "r1", B0, dag_id="a")
    add_trial(store, shared, "r2", B0, dag_id="b")
    add_trial(store, shared, "r3", B0, dag_id="")
    with store.reader() as reader:
        assert reader.job_dags() == {
            "alpha.t": frozenset({"alpha"}),
            "shared": frozenset({"a", "b"}),
            "fresh.t": frozenset(),
        }
        assert reader.job_dags("shared") == {"shared": frozenset({"a", "b"})}
        assert reader.instance_job("b", "t") == "shared"
        assert reader.instance_job("nope", "t") is None
    assert fresh and summary_of(store, "fresh.t").runs == 0


def test_a_job_without_runs_has_no_best_and_is_pruning(store: SQLStore) -> None:
    add_job(store)
    detail = detail_of(store, "j")
    s = detail.summary
    assert (s.phase, s.best_batch_size, s.best_power_limit_w, s.energy_j) == (
        "pruning",
        None,
        None,
        0.0,
    )
    assert detail.runs == () and detail.profile == ()
    assert [a.batch_size for a in detail.arms] == [OTHER, B0]
    assert not any(a.pruned or a.observations for a in detail.arms)
    assert all(math.isfinite(x) for x in (s.time_s, s.energy_j))

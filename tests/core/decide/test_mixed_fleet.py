"""A job that moves to another GPU model reuses what it learned (paper §7)."""

from __future__ import annotations

import pytest
from fixtures_airflow import TRACES

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.decide.translation import training_cost_per_step, translate
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import FleetKey, ForeignObservation, PowerProfile, RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining

EXPLORING = ("pruning", "calibrate")


def profile(
    key: FleetKey, batch_size: int, watts_and_speed: dict[int, tuple[float, float]]
) -> PowerProfile:
    return PowerProfile(
        batch_size,
        key.gpu_model,
        key.gpu_count,
        tuple(sorted(watts_and_speed, reverse=True)),
        {w: LimitMeasurement(w, p, s) for w, (p, s) in watts_and_speed.items()},
    )


def test_costs_translate_by_the_ratio_of_profiled_step_costs() -> None:
    a, b = FleetKey("A", 1), FleetKey("B", 2)
    profiles = {
        (a, 32): profile(a, 32, {200: (180.0, 10.0), 100: (100.0, 5.0)}),
        (b, 32): profile(b, 32, {300: (500.0, 20.0), 150: (250.0, 8.0)}),
    }
    config = ProfilerConfig()
    step_a = training_cost_per_step(profiles[(a, 32)], config, 0.5)
    step_b = training_cost_per_step(profiles[(b, 32)], config, 0.5)
    # A: 0.5 * 180 / 10 + 0.5 * 200 / 10 = 19 (the 200 W optimum); B: MAXPOWER = 2 x 300 W.
    assert step_a == pytest.approx(19.0)
    assert step_b == pytest.approx(0.5 * 500 / 20 + 0.5 * 600 / 20)
    observed = [ForeignObservation(a, 32, 1000.0, True), ForeignObservation(a, 64, 900.0, True)]
    result = translate(b, observed, profiles, config, 0.5)
    assert result.costs == {32: [(pytest.approx(1000.0 * step_b / step_a), True)]}
    assert result.untranslated_mean_cost == {64: 900.0}  # no profile of 64 on B yet


def run(engine: Engine, train: ReplayTraining, count: int, prefix: str) -> list[RecurrenceResult]:
    return [engine.run_recurrence(train, RecurrenceKey(f"{prefix}-{i}")) for i in range(count)]


def explored(results: list[RecurrenceResult]) -> int:
    return sum(t.phase in EXPLORING for r in results for t in r.tries)


@pytest.fixture(scope="module")
def traces() -> tuple[WorkloadTrace, WorkloadTrace]:
    return (
        load_workload_trace(TRACES, "v100", "cifar100"),
        load_workload_trace(TRACES, "a40", "cifar100"),
    )


def test_a_job_moving_to_another_gpu_model_explores_less_than_a_fresh_one(
    traces: tuple[WorkloadTrace, WorkloadTrace],
) -> None:
    v100, a40 = traces
    sizes = tuple(b for b in v100.batch_sizes if b in a40.batch_sizes)
    config = JobConfig("cifar.train", sizes, 1024, 0.6, 100)

    moving_store = SQLStore.in_memory()
    on_v100 = ReplayGPU(v100)
    run(
        Engine(moving_store, on_v100, config, seed=2, heartbeat_s=None),
        ReplayTraining(on_v100, seed=2),
        40,
        "v100",
    )
    moved_gpu = ReplayGPU(a40)
    moved = run(
        Engine(moving_store, moved_gpu, config, seed=2, heartbeat_s=None),
        ReplayTraining(moved_gpu, seed=2),
        40,
        "a40",
    )

    fresh_gpu = ReplayGPU(a40)
    fresh = run(
        Engine(SQLStore.in_memory(), fresh_gpu, config, seed=2, heartbeat_s=None),
        ReplayTraining(fresh_gpu, seed=2),
        40,
        "fresh",
    )

    assert all(t.phase != "pruning" for r in moved for t in r.tries)  # pruning carried over
    assert 0 < explored(moved) < explored(fresh)
    assert sum(r.cost for r in moved) < sum(r.cost for r in fresh)
    # Both settle on the A40's optimum for cifar100, (128, 225 W).
    assert [r.batch_size for r in moved[-10:]].count(128) >= 8
    assert moved[-1].power_limit_w == 225

"""A power profile that contradicts physics saves nothing (issue 47: a simulated V100 timed by
a busy machine's wall clock measured 225 W at 2.1 times the speed of 250 W, and the report
claimed 45.7 % of time saved from it).

Scripted interference, through the real engine and store: while the GPU trains at its
maximum limit every step takes twice as long as the power curve says (another process shares
the machine then), so every lower limit measures faster than the maximum. The profile is
marked untrusted (``domain.physics``): the Default estimate takes b0's runs as measured and
claims no time (or energy) saving from the profile's ratios, the budget's books keep each
try's own cost, observe mode claims nothing, and the report, its JSON and the job page say
why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_airflow import TRACES
from fixtures_ui import app_client

from zeus_airflow.cli import main
from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.cost import LimitMeasurement
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.simulated import SimulatedGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.domain.physics import SPEED_NOISE, contradiction, trusted
from zeus_airflow.core.reports import report
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, TrainFunction
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import ManualClock

STEP_S = 0.01
"""A step's work at the maximum limit, on the power curve's own terms."""
INTERFERENCE = 2.0
"""How much longer every step takes at the maximum limit while the other process runs."""


@pytest.fixture
def trace() -> WorkloadTrace:
    return load_workload_trace(TRACES, "v100", "cifar100")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLStore]:
    store = SQLStore(f"sqlite:///{tmp_path / 'zeus.db'}", create_schema=True)
    yield store
    store.engine.dispose()


def _interfered(gpu: SimulatedGPU, clock: ManualClock, top_w: int) -> TrainFunction:
    """One epoch of 200 steps to the target; at the top limit each step is slowed."""

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(200)):
                slowed = INTERFERENCE if gpu.get_power_limits_w()[0] == top_w else 1.0
                clock.advance(STEP_S * slowed)
            run.report_metric(1.0)

    return train


def _run_days(
    store: SQLStore, trace: WorkloadTrace, job_id: str, days: int, **profiler: object
) -> list[object]:
    clock = ManualClock()
    gpu = SimulatedGPU(trace, clock=clock)
    config = JobConfig(
        job_id,
        (32, 64),
        64,
        1.0,
        3,
        profiler=ProfilerConfig(warmup_steps=2, profile_steps=5, **profiler),  # type: ignore[arg-type]
    )
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    train = _interfered(gpu, clock, max(trace.power_limits_w))
    return [engine.run_recurrence(train, RecurrenceKey(f"day-{d}")) for d in range(days)]


def test_physics_allows_equal_speeds_within_noise_and_no_faster_lower_limit() -> None:
    def profile(*speeds: float) -> dict[int, LimitMeasurement]:
        return {
            w: LimitMeasurement(w, 100.0, s) for w, s in zip((250, 225, 200), speeds, strict=True)
        }

    assert trusted(profile(10.0, 10.0, 9.0))
    assert trusted(profile(10.0, 10.0 * (1 + SPEED_NOISE * 0.9), 9.0))  # within the noise
    found = contradiction(profile(10.0, 9.0, 12.0))  # 200 W faster than 225 W's 9
    assert found is not None and (found.lower_w, found.higher_w) == (200, 225)
    assert found.describe() == "200 W measured 1.33x the speed of 225 W"


def test_a_profile_made_noisy_by_interference_is_marked_and_saves_no_time(
    airflow_db: Path,
    store: SQLStore,
    trace: WorkloadTrace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = _run_days(store, trace, "noisy.job", 4)
    top_w = max(trace.power_limits_w)

    # The stored profile of b0 says a lower limit is faster than the maximum: untrusted.
    with store.reader() as reader:
        points = reader.profile_points(results[0].job.id, 64)  # type: ignore[attr-defined]
        (job,) = report(reader, ["noisy.job"])
    measured = {row[3]: LimitMeasurement(row[3], row[4], row[5]) for row in points}
    found = contradiction(measured)
    assert found is not None and found.higher_w == top_w and found.speedup > 1.5, measured
    # Scaled by it, Default's time would have been that much longer than the runs': the
    # time saving the report claimed before (issue 47).
    trained_w = results[-1].power_limit_w  # type: ignore[attr-defined]
    assert trained_w < top_w
    assert measured[top_w].time_per_step_s / measured[trained_w].time_per_step_s > 1.5

    # No time (or energy) saving from it: Default is b0's runs as measured.
    assert job.untrusted_profile is not None and found.describe() in job.untrusted_profile
    assert job.runs == 4 and job.saved_time_fraction == pytest.approx(0.0, abs=1e-9)
    assert job.saved_energy_fraction == pytest.approx(0.0, abs=1e-9)
    # The budget's books price each try at its own cost, not by the profile's ratios.
    tries = list_trials(store)
    assert tries and all(t.default_cost == pytest.approx(t.cost) for t in tries)

    # The report says why, in its table's notes and its JSON; the job page too.
    url = store.engine.url.render_as_string(hide_password=False)
    assert main(["report", "--db", url]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "noisy.job: the default batch size's power profile contradicts physics" in text
    assert main(["report", "--db", url, "--format", "json"]) == 0
    assert '"untrusted_profile": "on ' in capsys.readouterr().out
    page = app_client(store, monkeypatch).get("/jobs/noisy.job").text
    assert 'id="untrusted-profile"' in page and "contradicts physics" in page


def test_observe_mode_claims_no_saving_from_a_profile_that_contradicts_physics(
    store: SQLStore, trace: WorkloadTrace
) -> None:
    (result,) = _run_days(store, trace, "observing.job", 1, mode="observe")
    figures = result.figures  # type: ignore[attr-defined]
    assert (figures.would_save_energy_j, figures.would_save_time_s) == (None, None)
    assert figures.optimal_power_limit_w is not None  # it did profile

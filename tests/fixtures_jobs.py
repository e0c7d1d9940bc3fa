"""Jobs run through the engine whose stores the tests of more than one folder read: a replayed
job in observe mode, a job on the fake NVML with a fake powercap tree for the host's energy,
and stores holding the extreme figures that reached stores before issue 35's checks."""

from __future__ import annotations

from pathlib import Path

from fixtures_store import job_config, overwrite_trials

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.traces import WorkloadTrace
from zeus_airflow.core.devices.nvml import NVMLGPUs
from zeus_airflow.core.devices.rapl import RAPLReader
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.core.train.run import TrainingRun
from zeus_airflow.testing import FakeNVML, ManualClock
from zeus_airflow.testing.fake_sysfs import FakePowercap

# --- observe mode (tests/core/train/test_observe_mode.py) -----------------------------------
JOB_ID = "observed.train"
MAX_W = 250


def observe_job(
    store: SQLStore,
    trace: WorkloadTrace,
    recurrences: int = 3,
    profiler: ProfilerConfig | None = None,
) -> list[RecurrenceResult]:
    """``recurrences`` of a replayed job in observe mode, its batch size fixed at b0."""
    w = trace.workload
    config = JobConfig(
        JOB_ID,
        (trace.default_batch_size,),
        trace.default_batch_size,
        w.target_metric,
        w.max_epochs,
        w.higher_is_better,
        profiler=profiler or ProfilerConfig(mode="observe"),
    )
    gpu = ReplayGPU(trace)
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    train = ReplayTraining(gpu, seed=1)
    return [engine.run_recurrence(train, RecurrenceKey(f"r{i}")) for i in range(recurrences)]


# --- CPU and DRAM energy (tests/core/devices/test_host_energy.py) ---------------------------
STEPS, STEP_S = 30, 0.1
GPU_W, CPU_W, DRAM_W = 270.0, 50.0, 10.0
"""The fake A40 at its 300 W limit draws 90 %; the host draws what the train function adds."""


def run_job(
    tmp_path: Path, *, cost_includes_cpu: bool = False, with_rapl: bool = True
) -> tuple[RecurrenceResult, SQLStore]:
    """One recurrence of job ``host`` in measure mode on the fake NVML, the host's CPU and DRAM
    drawing CPU_W and DRAM_W (zones of a fake powercap tree, unless not ``with_rapl``); the
    store is ``tmp_path/zeus.db``."""
    clock = ManualClock()
    gpus = NVMLGPUs(nvml=FakeNVML(clock=clock), clock=clock)
    tree = FakePowercap(tmp_path / "powercap")
    if with_rapl:
        tree.zone("intel-rapl:0", "package-0", 262_143_328_850)
        tree.zone("intel-rapl:0:1", "dram", 65_712_999_613)
    reader = RAPLReader(tree.root, poll_interval_s=0)

    def train(run: TrainingRun) -> None:
        for _ in run.epochs():
            for _ in run.steps(range(STEPS)):
                clock.advance(STEP_S)
                if with_rapl:
                    tree.add("intel-rapl:0", round(CPU_W * STEP_S * 1e6))
                    tree.add("intel-rapl:0:1", round(DRAM_W * STEP_S * 1e6))
            run.report_metric(1.0)

    config = JobConfig(
        "host",
        (32,),
        32,
        target_metric=1.0,
        max_epochs=1,
        cost_includes_cpu=cost_includes_cpu,
        profiler=ProfilerConfig(mode="measure"),
    )
    store = SQLStore(f"sqlite:///{tmp_path}/zeus.db", create_schema=True)
    engine = Engine(store, gpus, config, seed=1, heartbeat_s=None, host_energy=reader)
    return engine.run_recurrence(train, RecurrenceKey("r1")), store


# --- a store holding extreme figures (issue 35, tests/cli/test_report_cli.py) ---------------
EXTREMES: dict[str, dict[str, float | None]] = {
    "null-energy": {"energy_j": None},  # an outbox entry of energy_j=nan, before issue 35
    "null-cost": {"cost": None},
    "null-time": {"time_s": None},
    "huge": {"energy_j": 1e308, "time_s": 1e308, "cost": 1.7e308, "default_cost": 1.7e308},
    "negative-cost": {"cost": -1e9},  # an outbox entry of cost=-1e9, before issue 35
    "infinite-budget": {"budget_left_runs": float("inf"), "early_stop_cost": float("inf")},
    "nan": {"energy_j": float("nan"), "cost": float("nan"), "default_cost": float("nan")},
}
"""Figures that reached stores before their checks (SQLite turns a NaN into NULL,
PostgreSQL keeps it)."""


def store_of_extremes(
    store: SQLStore, trace: WorkloadTrace, budgets: tuple[float | None, ...] = (None, 0.1)
) -> dict[str, tuple[Engine, ReplayTraining]]:
    """Each case of EXTREMES as jobs ``<case>-<budget>`` of three daily runs whose tries are
    then overwritten with the case's figures; by job id, its engine and train function."""
    engines = {}
    for name, values in EXTREMES.items():
        for budget in budgets:
            job_id = f"{name}-{budget}"
            gpu = ReplayGPU(trace)
            config = job_config(trace, job_id, exploration_budget=budget)
            engine = Engine(store, gpu, config, seed=3, heartbeat_s=None)
            train = ReplayTraining(gpu, seed=3)
            for day in range(3):
                engine.run_recurrence(train, RecurrenceKey(f"day-{day}", "dag", job_id))
            overwrite_trials(store, job_id, **values)
            engines[job_id] = (engine, train)
    return engines

"""A store of every kind of job a fleet holds, for the tests of what fits a screen: mapped
instances whose ids name their region, carbon-aware starts (some deferred, one whose source
fell back), a short job of one run, and a job that only ever ran Default's configuration,
whose saving against Default is float noise (about 1e-14 J), not a finding.

Built through the engine on the replay device, in seconds, with Airflow's own run ids.
"""

from __future__ import annotations

from pathlib import Path

from fixtures_store import set_trial_energies

from zeus_airflow.core.common.config import JobConfig, ProfilerConfig
from zeus_airflow.core.common.traces import WorkloadTrace, load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey, RunCarbon
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining

MAPPED_DAG, CARBON_DAG, SHORT_DAG, EVEN_DAG = (
    "zeus_fleet_regions",
    "zeus_fleet_carbon_aware",
    "zeus_fleet_short",
    "zeus_fleet_default_only",
)
REGIONS = ("europe-west", "us-east")
MAPPED_JOBS = tuple(f"{MAPPED_DAG}.train[{r}]" for r in REGIONS)
CARBON_JOB, SHORT_JOB, EVEN_JOB = (
    f"{CARBON_DAG}.train",
    f"{SHORT_DAG}.train",
    f"{EVEN_DAG}.train",
)
DAYS = 6
EVEN_ENERGY_J = (37.04, 22.24, 54.8)
"""The Default-only job's runs: their mean times three is 1.4e-14 J short of their sum in
floating point, the float noise a page once showed as "-2.84e-14 J (-0.0 %)" in red."""


def run_id(day: int, kind: str = "scheduled") -> str:
    """Airflow's run id of the day's DAG run (``manual__`` ones carry microseconds)."""
    stamp = f"2026-11-{day + 1:02d}T00:00:00{'.123456' if kind == 'manual' else ''}+00:00"
    return f"{kind}__{stamp}"


def _carbon(energy_j: float, day: int) -> RunCarbon:
    """A carbon-aware start: every other day deferred into a cleaner slot; the last day's
    source fell back to a fixed intensity."""
    kwh = energy_j / 3.6e6
    if day == DAYS - 1:
        return RunCarbon("DE", kwh * 475, None, 475.0, "fallback", "HTTP 401")
    if day % 2:
        return RunCarbon(
            "DE",
            kwh * 80,
            None,
            80.0,
            "forecast",
            start_delay_s=40.0 + day,
            expected_emissions_g=kwh * 82,
            unshifted_intensity_g_per_kwh=400.0,
            start_reason="a cleaner slot within the window",
        )
    return RunCarbon("DE", kwh * 400, None, 400.0, "live")


def _run_days(
    store: SQLStore, trace: WorkloadTrace, config: JobConfig, keys: list[RecurrenceKey]
) -> list[RecurrenceResult]:
    gpu = ReplayGPU(trace)
    engine = Engine(store, gpu, config, seed=3, heartbeat_s=None)
    train = ReplayTraining(gpu, seed=3)
    return [engine.run_recurrence(train, key) for key in keys]


Published = dict[str, list[tuple[RecurrenceResult, RunCarbon | None]]]
"""Each job's runs as the engine returned them, with the carbon figures recorded for them:
what the operator publishes as XComs (``operators/summary.py``)."""


def _record_carbon(
    store: SQLStore, keys: list[RecurrenceKey], results: list[RecurrenceResult]
) -> list[tuple[RecurrenceResult, RunCarbon | None]]:
    published: list[tuple[RecurrenceResult, RunCarbon | None]] = []
    for day, (key, result) in enumerate(zip(keys, results, strict=True)):
        figures = _carbon(result.energy_j, day)
        store.record_carbon(result.job.id, key, figures)
        published.append((result, figures))
    return published


def fill_fleet(url: str) -> Published:
    """Fill a new store at ``url`` with the fleet's jobs (see the module's docstring); the
    runs, by job, of those whose published figures a test compares."""
    store = SQLStore(url, create_schema=True)
    traces = resolve_traces_dir()
    cifar = load_workload_trace(traces, "v100", "cifar100")

    def config(trace: WorkloadTrace, job_id: str, **changes: object) -> JobConfig:
        settings: dict[str, object] = dict(
            batch_sizes=trace.batch_sizes,
            default_batch_size=trace.default_batch_size,
            target_metric=trace.workload.target_metric,
            max_epochs=trace.workload.max_epochs,
            exploration_budget=0.1,
        )
        return JobConfig(job_id, **{**settings, **changes})  # type: ignore[arg-type]

    published: Published = {}
    for index, job_id in enumerate(MAPPED_JOBS):
        keys = [RecurrenceKey(run_id(d), MAPPED_DAG, "train", index) for d in range(DAYS)]
        results = _run_days(store, cifar, config(cifar, job_id), keys)
        published[job_id] = _record_carbon(store, keys, results)
    keys = [RecurrenceKey(run_id(d, "manual"), CARBON_DAG, "train") for d in range(DAYS)]
    results = _run_days(store, cifar, config(cifar, CARBON_JOB), keys)
    published[CARBON_JOB] = _record_carbon(store, keys, results)
    short = [RecurrenceKey(run_id(0), SHORT_DAG, "t")]
    published[SHORT_JOB] = [
        (r, None) for r in _run_days(store, cifar, config(cifar, SHORT_JOB), short)
    ]
    w = cifar.workload  # observe mode: b0 at the maximum limit, every run, as Default would
    only_b0 = JobConfig(
        EVEN_JOB,
        (cifar.default_batch_size,),
        cifar.default_batch_size,
        w.target_metric,
        w.max_epochs,
        profiler=ProfilerConfig(mode="observe"),
    )
    keys = [RecurrenceKey(run_id(d), EVEN_DAG, "train") for d in range(3)]
    _run_days(store, cifar, only_b0, keys)
    set_trial_energies(store, EVEN_DAG, EVEN_ENERGY_J)
    return published


def fleet_url(folder: Path) -> str:
    """A new SQLite store in ``folder``, filled."""
    url = f"sqlite:///{folder / 'fleet.db'}"
    fill_fleet(url)
    return url

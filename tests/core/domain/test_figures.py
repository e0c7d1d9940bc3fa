"""The one declaration of a try's and a run's figures (``core/domain/figures.py``): one rule
adds tries up into a run for the engine and the reports alike, and what is published comes
from it. That the migrated schema has their columns is the store's test
(tests/core/store/test_store_schema.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fixtures_airflow import TRACES
from fixtures_store import job_config, replay_missing_at

from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.domain import FIGURES, RUN_FACTS, TRY_FIGURES, RecurrenceKey, run_of
from zeus_airflow.core.domain.figures import power_problem
from zeus_airflow.core.reports import runs
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine
from zeus_airflow.operators.metrics import FIGURES as METRICS
from zeus_airflow.operators.summary import CARBON_XCOM_KEYS, XCOM_KEYS, carbon_xcom_values


def _try(energy_j: float | None, **figures: object) -> SimpleNamespace:
    return SimpleNamespace(**{**dict.fromkeys(FIGURES), **figures, "energy_j": energy_j})


def test_a_runs_figures_follow_each_figures_rule() -> None:
    first = _try(10.0, time_s=1.0, cpu_energy_j=3.0, would_save_energy_j=2.0, power_limit_w=250)
    second = _try(20.0, time_s=2.0, cpu_energy_j=None, would_save_energy_j=None, power_limit_w=200)
    run = run_of([first, second])
    assert (run["energy_j"], run["time_s"]) == (30.0, 3.0)  # sum
    assert run["cpu_energy_j"] is None  # sum: a try without it leaves the run's unknown
    assert run["would_save_energy_j"] == 2.0  # sum_known: the tries that have one
    assert run["power_limit_w"] == 200  # last
    in_flight = run_of([first, _try(None, power_limit_w=None)])
    assert in_flight["energy_j"] == 10.0  # the finished tries so far
    assert in_flight["power_limit_w"] is None  # the last try's, still training
    assert run_of([_try(None)])["energy_j"] is None


def test_the_engine_and_the_reports_add_a_runs_tries_up_alike() -> None:
    """A recurrence whose first size misses the target: the engine's result (the XComs) and
    the run the reports read back from the store (the UI, the API) agree on every figure."""
    trace = load_workload_trace(TRACES, "v100", "cifar100")
    store, gpu = SQLStore.in_memory(), ReplayGPU(trace)
    engine = Engine(store, gpu, job_config(trace, "test.job"), seed=3, heartbeat_s=None)
    misses_at_512 = replay_missing_at(gpu, 512, seed=3)
    results = [engine.run_recurrence(misses_at_512, RecurrenceKey(f"r{i}")) for i in range(2)]
    result = results[1]
    assert len(result.tries) > 1
    with store.reader() as reader:
        read = runs(reader, result.job.id)[1]
    assert read.batch_sizes == tuple(t.outcome.batch_size for t in result.tries)
    for name in TRY_FIGURES:
        assert getattr(read, name) == pytest.approx(getattr(result.figures, name)), name
    assert result.energy_j == pytest.approx(sum(t.outcome.energy_j for t in result.tries))
    assert read.steps == sum(t.outcome.steps or 0 for t in result.tries) > 0


def test_xcoms_and_metrics_are_the_declared_ones() -> None:
    declared = [*FIGURES.values(), *RUN_FACTS]
    assert set(XCOM_KEYS) | set(CARBON_XCOM_KEYS) == {f.name for f in declared if f.xcom}
    assert {"cpu_energy_j", "setup_energy_j", "would_save_time_s", "tries"} <= set(XCOM_KEYS)
    assert {"emissions_g", "start_delay_s"} <= set(CARBON_XCOM_KEYS)
    assert set(METRICS) == {f.name for f in declared if f.metric}
    from zeus_airflow.core.domain import RunCarbon

    footprint = RunCarbon("DE", 1.0, 2.0, 300.0, "fixed")
    assert tuple(carbon_xcom_values(footprint)) == CARBON_XCOM_KEYS


def test_a_run_s_carbon_record_names_its_fields_as_the_declaration_does() -> None:
    """``RunCarbon``'s fields are the declared run figures, by name and in order: no table
    renames one on its way to the store or the XComs."""
    from dataclasses import fields

    from zeus_airflow.core.domain import RUN_FIGURES, RunCarbon

    assert tuple(f.name for f in fields(RunCarbon)) == RUN_FIGURES
    footprint = RunCarbon("DE", 1.0, None, 300.0, "fixed")
    assert footprint.figures() == dict.fromkeys(RUN_FIGURES) | {
        "carbon_zone": "DE",
        "emissions_g": 1.0,
        "carbon_intensity_g_per_kwh": 300.0,
        "carbon_provenance": "fixed",
    }


def test_an_energy_or_cost_beyond_what_the_gpus_can_spend_in_the_try_is_no_figure() -> None:
    """Issue 48: bounds relative to the try. Eight GPUs at 1.2 kW for an hour, and a host at
    2 kW, pass; 1e15 J in 1e9 s on one GPU does not, nor a cost of 1e17 in an hour."""
    real = dict(energy_j=8 * 1200 * 3600.0, time_s=3600.0, cost=8 * 1200 * 3600.0)
    assert power_problem(dict(real, cpu_energy_j=2000 * 3600.0), gpu_count=8) is None
    forged = power_problem(dict(energy_j=1e15, time_s=1e9), gpu_count=1)
    assert forged is not None
    assert forged.startswith("energy_j=1000000000000000.0 is more than 1 GPU(s)")
    dear = power_problem(dict(real, cost=1e17), gpu_count=8)
    assert dear is not None and dear.startswith("cost=1e+17 is more than 8 GPU(s)")
    assert power_problem(dict(energy_j=1e15, time_s=None), gpu_count=1) is None  # alone: bounds

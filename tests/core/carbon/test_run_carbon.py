"""A run's carbon figures through the carbon service: accounted over each try's span, recorded
as the run's own row, shown by the runs table and on the run's last try in the trial list."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from fixtures_store import job_config

from zeus_airflow.core import reports
from zeus_airflow.core.carbon.options import CarbonOptions
from zeus_airflow.core.carbon.service import CarbonService
from zeus_airflow.core.common.traces import load_workload_trace
from zeus_airflow.core.common.units import J_PER_KWH
from zeus_airflow.core.devices.replay import ReplayGPU
from zeus_airflow.core.devices.spec import resolve_traces_dir
from zeus_airflow.core.domain import RecurrenceKey
from zeus_airflow.core.store.admin import list_trials
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining


def _no_electricitymaps() -> None:
    raise AssertionError("a fixed source needs no API")


def test_a_run_of_several_tries_is_accounted_and_recorded_as_one() -> None:
    trace = load_workload_trace(resolve_traces_dir(), "v100", "cifar100")
    gpu = ReplayGPU(trace)
    config = job_config(trace, "carbon.job")  # the paper's walk: no exploration budget
    store = SQLStore.in_memory()
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    train = ReplayTraining(gpu, 1)
    service = CarbonService(
        CarbonOptions("XX", "fixed:250:80"), _no_electricitymaps, logging.getLogger("t")
    )
    multi: tuple[RecurrenceKey, RecurrenceResult] | None = None
    for day in range(20):
        key = RecurrenceKey(f"r{day:02d}", "d", "t")
        result = engine.run_recurrence(train, key)
        footprint = service.account(store, key, result, service.checked_source(), None)
        kwh = sum(t.outcome.energy_j + t.outcome.setup_energy_j for t in result.tries) / J_PER_KWH
        assert footprint.emissions_g == pytest.approx(kwh * 250)
        assert footprint.energy_cost == pytest.approx(kwh * 80 / 1000)
        if len(result.tries) > 1 and multi is None:
            multi = key, result
    assert multi is not None, "the replay should include a run whose first sizes missed"
    key, result = multi
    with store.reader() as reader:
        (version,) = reader.versions(["carbon.job"])["carbon.job"]
        run = next(r for r in reports.runs(reader, version.pk) if r.run_id == key.run_id)
    kwh = (run.energy_j + run.setup_energy_j) / J_PER_KWH
    assert (run.carbon_zone, run.carbon_provenance, run.carbon_intensity_g_per_kwh) == (
        "XX",
        "fixed",
        250.0,
    )
    assert run.emissions_g == pytest.approx(kwh * 250)
    tries = [t for t in list_trials(store, "carbon.job") if t.run_id == key.run_id]
    assert len(tries) == len(result.tries) > 1
    assert [t.emissions_g is None for t in tries] == [True] * (len(tries) - 1) + [False]
    assert tries[-1].emissions_g == run.emissions_g and tries[-1].carbon_zone == "XX"


def test_time_shift_savings_are_the_runs_energy_at_the_planned_slot_minus_its_emissions() -> None:
    """Issue 37: one formula (``accounting.shift_saving``) from a run's stored figures."""
    from zeus_airflow.core.carbon.accounting import ShiftSaving, shift_saving, shift_savings
    from zeus_airflow.core.domain import TrainingFigures

    kwh = 2.0  # 1.5 kWh of training, 0.5 of setup
    waited = TrainingFigures(
        energy_j=1.5 * 3.6e6,
        setup_energy_j=0.5 * 3.6e6,
        emissions_g=kwh * 80,
        start_delay_s=40.0,
        unshifted_intensity_g_per_kwh=400.0,
    )
    saving = shift_saving(waited)
    assert saving is not None
    assert (saving.unshifted_emissions_g, saving.saved_g) == (
        pytest.approx(800),
        pytest.approx(640),
    )
    assert saving.saved_fraction == pytest.approx(0.8)
    # A plan that started at once saved nothing by shifting; no plan, nothing to say.
    at_once = TrainingFigures(energy_j=3.6e6, emissions_g=300.0, start_delay_s=0.0)
    assert shift_saving(at_once) == ShiftSaving(300.0, 0.0)
    assert shift_saving(TrainingFigures(energy_j=3.6e6, emissions_g=300.0)) is None
    assert shift_saving(replace(waited, unshifted_intensity_g_per_kwh=None)) is None
    total = shift_savings([waited, at_once, TrainingFigures()])
    assert total == ShiftSaving(pytest.approx(1100), pytest.approx(640))

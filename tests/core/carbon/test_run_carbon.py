"""A run's carbon figures through the carbon service: accounted over each try's span, recorded
as the run's own row, shown by the runs table and on the run's last try in the trial list."""

from __future__ import annotations

import logging

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

"""The record a run publishes (integrations/published.py): its names come from the figures'
declaration, its values are the XComs', the savings are Default's estimate minus the run's,
and a run read back from the store gives the same record as the run in memory. In memory, on
the replay GPU: no Airflow."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from zeus_airflow.core.common.config import JobConfig
from zeus_airflow.core.devices.spec import open_device, parse_device
from zeus_airflow.core.domain import FIGURES, RUN_FACTS, SAVED_VS_DEFAULT, RecurrenceKey
from zeus_airflow.core.domain.carbon import RunCarbon
from zeus_airflow.core.reports import DefaultEstimate
from zeus_airflow.core.reports.default import savings
from zeus_airflow.core.store.sql import SQLStore
from zeus_airflow.core.train.engine import Engine, RecurrenceResult
from zeus_airflow.core.train.replay_training import ReplayTraining
from zeus_airflow.integrations import mlflow
from zeus_airflow.integrations.published import PUBLISHED, cost_line, record, stored_record
from zeus_airflow.operators.summary import CARBON_XCOM_KEYS, xcom_values

KEY = RecurrenceKey("day-1", "dag", "train")


def one_run(store: SQLStore, batch_sizes: tuple[int, ...] = (64, 128)) -> RecurrenceResult:
    gpu = open_device(parse_device("replay:v100:cifar100"))
    config = JobConfig("published.t", batch_sizes, 128, target_metric=0.5, max_epochs=50)
    engine = Engine(store, gpu, config, seed=1, heartbeat_s=None)
    return engine.run_recurrence(ReplayTraining(gpu, seed=1), KEY)


def test_the_record_is_the_declaration_s_xcoms_facts_and_savings() -> None:
    names = [f.name for f in PUBLISHED]
    assert names[0] == "job_id" and len(names) == len(set(names))
    xcoms = [f.name for f in FIGURES.values() if f.xcom]
    assert names[1 : 1 + len(xcoms)] == xcoms
    assert names[-len(SAVED_VS_DEFAULT) :] == [f.name for f in SAVED_VS_DEFAULT]
    assert {f.name for f in RUN_FACTS} <= set(names)
    assert set(CARBON_XCOM_KEYS) <= set(names)


def test_a_run_s_record_holds_its_xcoms_and_its_savings_against_default() -> None:
    store = SQLStore.in_memory()
    result = one_run(store)
    published = record(result, None, None, store)

    assert list(published) == [f.name for f in PUBLISHED]
    pushed = xcom_values(result)
    assert {k: published[k] for k in pushed} == pushed  # the same values as its XComs
    assert published["job_id"] == "published.t" and published["measurement"] == "replayed"
    assert all(published[k] is None for k in CARBON_XCOM_KEYS)  # no carbon_zone
    # The first run is b0's: Default's estimate is that run scaled to the maximum limit.
    assert published["saved_energy_j"] is not None and published["saved_emissions_g"] is None
    assert record(result, None, None, None)["saved_energy_j"] is None  # no store: unknown


def test_the_store_s_record_of_a_run_is_the_one_it_published() -> None:
    store = SQLStore.in_memory()
    result = one_run(store)
    carbon = RunCarbon("DE", 12.5, None, 300.0, "fixed")
    store.record_carbon(result.job.id, KEY, carbon)
    published = record(result, carbon, None, store)

    read_back = stored_record(store, "published.t", KEY)
    assert read_back == pytest.approx(published)
    assert read_back is not None and read_back["emissions_g"] == 12.5
    assert stored_record(store, "published.t", replace(KEY, run_id="day-2")) is None


def test_a_measurement_gone_wrong_is_published_as_not_measured_like_its_xcom() -> None:
    """A NaN or infinite figure leaves as None (issue 35's rule for XComs), in the record too:
    OpenLineage's client would write it as a bare NaN, which no JSON parser takes."""
    import json

    from zeus_airflow.core.domain.finite import strict_json_value

    store = SQLStore.in_memory()
    result = one_run(store)
    last = result.tries[-1]
    broken = replace(last.outcome, energy_j=float("nan"), time_s=float("inf"))
    result = replace(result, tries=(*result.tries[:-1], replace(last, outcome=broken)))
    published = record(result, None, None, store)

    assert published["energy_j"] is None and published["time_s"] is None
    assert published["saved_energy_j"] is None and published["saved_time_s"] is None
    pushed = strict_json_value(xcom_values(result))  # what operators/xcoms.py pushes
    assert {k: published[k] for k in pushed} == pushed
    json.dumps(published, allow_nan=False)  # raises on a NaN or an infinity


def test_savings_are_default_s_estimate_minus_the_run_s() -> None:
    from zeus_airflow.core.domain import TrainingFigures

    run = TrainingFigures(energy_j=800.0, time_s=100.0, cost=900.0)
    default = DefaultEstimate(128, 300, 1000.0, 90.0, 3, 3, 1100.0)
    assert savings(default, run) == {
        "saved_energy_j": 200.0,
        "saved_time_s": -10.0,  # slower than Default: a negative saving
        "saved_cost": 200.0,
        "saved_emissions_g": None,  # no carbon figures
    }
    assert set(savings(None, run).values()) == {None}
    with_carbon = replace(run, emissions_g=0.1, carbon_intensity_g_per_kwh=360.0)
    # Default's 1000 J at the same 360 gCO2e/kWh: 0.1 g; the run emitted 0.1 g.
    assert savings(default, with_carbon)["saved_emissions_g"] == pytest.approx(0.0, abs=1e-12)


def test_mlflow_takes_numbers_as_metrics_texts_as_params_and_three_tags() -> None:
    values: dict[str, Any] = dict.fromkeys((f.name for f in PUBLISHED), None)
    values |= {
        "job_id": "j",
        "phase": "pruning",
        "measurement": "replayed",
        "batch_size": 64,
        "power_limit_w": 175,
        "energy_j": 1.5,
        "reached_target": True,
        "carbon_zone": "DE",
    }
    metrics, params, tags = mlflow.split(values)
    assert metrics == {
        "zeus.power_limit_w": 175.0,
        "zeus.energy_j": 1.5,
        "zeus.reached_target": 1.0,
        "zeus.batch_size": 64.0,
    }
    assert params == {
        "zeus.carbon_zone": "DE",
        "zeus.batch_size": "64",
        "zeus.power_limit_w": "175",
    }
    assert tags == {"zeus.job_id": "j", "zeus.phase": "pruning", "zeus.measurement": "replayed"}


def test_the_cost_line_says_replayed_and_a_negative_saving() -> None:
    values = {
        "energy_j": 80_400.0,
        "time_s": 583.0,
        "batch_size": 1024,
        "power_limit_w": 175,
        "emissions_g": 8.49,
        "carbon_provenance": "fixed",
        "carbon_zone": "DE",
        "saved_energy_j": -1_000.0,
        "measurement": "replayed",
    }
    line = cost_line(values)
    assert line.startswith("80.4 kJ · 9.72 min · b=1024 at 175 W · 8.49 gCO2e (fixed, DE)")
    assert "1 kJ more than Default" in line and line.endswith("(replayed)")
    assert not cost_line({**values, "measurement": "measured"}).endswith(")")


def test_a_store_that_cannot_give_default_s_estimate_leaves_only_the_savings_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from zeus_airflow.core.store.base import StoreError

    store = SQLStore.in_memory()
    result = one_run(store)

    def down() -> Any:
        raise StoreError("the zeus-airflow store cannot be read (OperationalError: gone)")

    monkeypatch.setattr(store, "reader", down)
    published = record(result, None, None, store, logging.getLogger("zeus.test"))

    assert published["energy_j"] == result.energy_j and published["batch_size"] == 128  # b0
    assert all(published[f.name] is None for f in SAVED_VS_DEFAULT)
    assert "Default's estimate cannot be read" in caplog.text and "goes on" in caplog.text
